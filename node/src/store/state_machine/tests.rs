use super::*;

fn written(dir: &std::path::Path, index: u64) -> Written {
    let log_id = crate::store::LogId::new(
        crate::store::LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    );
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: Membership::default(),
        snapshot_id: format!("1-{index}"),
    };
    let mut writer = Writer::create(dir, meta).expect("create");
    writer.state(&State::default()).expect("encode");
    writer.finish().expect("finish")
}

#[test]
fn a_build_finishing_after_a_newer_install_never_replaces_it() {
    let dir = tempfile::tempdir().expect("dir");
    let sm = StateMachineStore::open(dir.path().to_path_buf(), Arc::default()).expect("open");
    sm.shared
        .keep_if_newer(written(dir.path(), 20))
        .expect("install 20");
    sm.shared
        .keep_if_newer(written(dir.path(), 10))
        .expect("late build of 10");
    let current = sm
        .shared
        .current
        .lock()
        .expect("lock")
        .clone()
        .expect("a snapshot");
    assert_eq!(current.last_log_id.map(|id| id.index), Some(20));
    let (on_disk, _, _) = snapshot::newest(dir.path()).expect("load").expect("a file");
    assert_eq!(on_disk.last_log_id.map(|id| id.index), Some(20));
    let files = std::fs::read_dir(dir.path()).expect("list").count();
    assert_eq!(files, 1, "only the newest snapshot file is kept");
}

/// Entry `index` of leader 1 in term 1, carrying `proposal`.
fn entry(index: u64, proposal: crate::lease::Proposal) -> crate::store::Entry {
    crate::store::Entry {
        log_id: crate::store::LogId::new(
            crate::store::LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        ),
        payload: EntryPayload::Normal(crate::lease::Command::V1(proposal)),
    }
}

fn own_entry(index: u64, op: crate::lease::Op) -> crate::store::Entry {
    entry(index, crate::coord::timers::own(op))
}

/// SPEC §4.26: a node never applies an entry of rules above its range; it stops there, says
/// why, and applies nothing after it.
#[tokio::test]
async fn a_node_stops_at_an_entry_of_rules_above_its_own() {
    use crate::lease::Op;
    let dir = tempfile::tempdir().expect("dir");
    let mut sm = StateMachineStore::open_with_rules(dir.path().to_path_buf(), Arc::default(), 1)
        .expect("open");
    let entries = |list: Vec<crate::store::Entry>| {
        futures::stream::iter(list.into_iter().map(|e| Ok((e, None))))
    };
    sm.apply(entries(vec![own_entry(1, Op::Tick)]))
        .await
        .expect("a tick is of rules 1");
    let mut applied_index = sm.shared.subscribe();
    let stopped = sm
        .apply(entries(vec![
            own_entry(2, Op::Tick),
            own_entry(3, Op::RaiseRules { to: 2 }),
            own_entry(4, Op::Tick),
        ]))
        .await
        .expect_err("stops");
    assert!(
        stopped
            .to_string()
            .contains("log entry 3 is of rules version 2")
            && stopped.to_string().contains("--max-rules 1"),
        "{stopped}"
    );
    // What came before it in the same batch is applied, and published.
    assert_eq!(*applied_index.borrow_and_update(), 2);
    let applied = sm.shared.read();
    assert_eq!(applied.last_applied.map(|id| id.index), Some(2));
    assert_eq!(applied.state.rules(), 1);
    drop(applied);
    assert!(sm.shared.halted().is_some());
}

/// SPEC §4.26: data written under rules above a node's range is refused at start, naming both.
#[test]
fn a_node_refuses_to_start_on_a_snapshot_of_higher_rules() {
    let dir = tempfile::tempdir().expect("dir");
    let log_id = crate::store::LogId::new(
        crate::store::LeaderId {
            term: 1,
            node_id: 1,
        },
        7,
    );
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: Membership::default(),
        snapshot_id: "1-7".into(),
    };
    let shared = StateMachineStore::open(dir.path().to_path_buf(), Arc::default())
        .expect("open")
        .shared;
    let mut writer = Writer::create(dir.path(), meta).expect("create");
    writer
        .state(&State::default().with_rules(2))
        .expect("encode");
    shared
        .keep_if_newer(writer.finish().expect("finish"))
        .expect("keep");
    let refused = StateMachineStore::open_with_rules(dir.path().to_path_buf(), Arc::default(), 1)
        .err()
        .expect("refused");
    let refused = refused.to_string();
    assert!(
        refused.contains("is of rules version 2, and this node applies rules up to 1"),
        "{refused}"
    );
    let opened = StateMachineStore::open(dir.path().to_path_buf(), Arc::default()).expect("opens");
    assert_eq!(opened.shared.read().state.rules(), 2);
}

fn client_entry(index: u64, mono_ms: u64, request_id: &str) -> crate::store::Entry {
    let proposal = crate::lease::Proposal {
        stamp: crate::lease::Stamp {
            mono_ms,
            wall_ms: 1_700_000_000_000 + mono_ms,
            clock_epoch: 0,
        },
        principal: "p".into(),
        admin: false,
        request_id: Some(request_id.into()),
        require_registration: false,
        op: client_op(),
    };
    entry(index, proposal)
}

async fn apply_all(sm: &mut StateMachineStore, entries: Vec<crate::store::Entry>) {
    let list: Vec<_> = entries.into_iter().map(|e| Ok((e, None))).collect();
    sm.apply(futures::stream::iter(list))
        .await
        .expect("applies");
}

fn client_op() -> crate::lease::Op {
    crate::lease::Op::Acquire(tenure_lease::testkit::acq("r", "h"))
}

/// What the applied state remembers of request `id` of principal `p`.
fn remembered(sm: &StateMachineStore, id: &str) -> Option<bool> {
    sm.shared
        .read()
        .state
        .dedup()
        .remembers("p", id, &client_op())
}

/// Exactly-once records live in the node's archive on disk: a restart fills it again from
/// the snapshot (and the replayed log), and the window forgets them.
#[tokio::test]
async fn exactly_once_records_are_archived_and_survive_a_restart() {
    use openraft::RaftSnapshotBuilder;
    let dir = tempfile::tempdir().expect("dir");
    let (snapshots, archive) = (dir.path().join("snapshots"), dir.path().join("archive"));
    let open = || {
        StateMachineStore::open_with(
            snapshots.clone(),
            Some(&archive),
            Arc::default(),
            crate::rules::RELEASE.max,
        )
        .expect("open")
    };
    let mut sm = open();
    apply_all(&mut sm, vec![client_entry(1, 1_000, "q-1")]).await;
    assert_eq!(remembered(&sm, "q-1"), Some(true));
    sm.build_snapshot().await.expect("snapshot at 1");
    apply_all(&mut sm, vec![client_entry(2, 2_000, "q-2")]).await;
    assert!(archive.join("db").exists(), "the archive is on disk");
    assert_eq!(sm.shared.read().state.dedup().len(), 2);
    drop(sm);

    // Restarted: the snapshot of index 1 is loaded into an emptied archive; entry 2 comes
    // back as openraft replays it.
    let mut sm = open();
    assert_eq!(remembered(&sm, "q-1"), Some(true));
    assert_eq!(remembered(&sm, "q-2"), None);
    apply_all(&mut sm, vec![client_entry(2, 2_000, "q-2")]).await;
    assert_eq!(remembered(&sm, "q-2"), Some(true));

    // Eleven minutes on, the window has forgotten both; a snapshot later the archive drops
    // them, and what is remembered stays.
    apply_all(&mut sm, vec![client_entry(3, 661_000, "q-3")]).await;
    assert_eq!(sm.shared.read().state.dedup().len(), 1);
    sm.build_snapshot().await.expect("snapshot at 3");
    assert_eq!(remembered(&sm, "q-1"), None);
    assert_eq!(remembered(&sm, "q-3"), Some(true));
}
