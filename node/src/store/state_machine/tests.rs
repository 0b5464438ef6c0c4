use super::*;
use crate::store::snapshot::Written;

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
        .keep_if_newer(written(dir.path(), 20), None)
        .expect("install 20");
    sm.shared
        .keep_if_newer(written(dir.path(), 10), None)
        .expect("late build of 10");
    let current = sm
        .shared
        .current
        .lock()
        .expect("lock")
        .clone()
        .expect("a snapshot");
    assert_eq!(current.meta.last_log_id.map(|id| id.index), Some(20));
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

/// `coord::rules` announces a raise as soon as it applies, and wakes for nothing else.
#[tokio::test]
async fn the_rules_watch_fires_on_a_raise_only() {
    use crate::lease::Op;
    let dir = tempfile::tempdir().expect("dir");
    let mut sm = StateMachineStore::open_with_rules(dir.path().to_path_buf(), Arc::default(), 3)
        .expect("open");
    let mut rules = sm.shared.subscribe_rules();
    apply_all(
        &mut sm,
        vec![own_entry(1, Op::Tick), own_entry(2, Op::Tick)],
    )
    .await;
    assert!(!rules.has_changed().expect("open"), "no change of version");
    apply_all(&mut sm, vec![own_entry(3, Op::RaiseRules { to: 3 })]).await;
    assert!(rules.has_changed().expect("open"));
    assert_eq!(*rules.borrow_and_update(), 3);
    apply_all(&mut sm, vec![own_entry(4, Op::Tick)]).await;
    assert!(!rules.has_changed().expect("open"));
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
        .keep_if_newer(writer.finish().expect("finish"), None)
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

/// The state machine of a node whose data directory is `dir` (its archive on disk).
fn open_on_disk(dir: &std::path::Path) -> StateMachineStore {
    StateMachineStore::open_with(
        dir.join("snapshots"),
        Some(&dir.join("archive")),
        Arc::default(),
        crate::rules::RELEASE.max,
    )
    .expect("open")
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
    let archive = dir.path().join("archive");
    let open = || open_on_disk(dir.path());
    let mut sm = open();
    apply_all(&mut sm, vec![client_entry(1, 1_000, "q-1")]).await;
    assert_eq!(remembered(&sm, "q-1"), Some(true));
    sm.build_snapshot().await.expect("snapshot at 1");
    apply_all(&mut sm, vec![client_entry(2, 2_000, "q-2")]).await;
    assert!(archive.join("db").exists(), "the archive is on disk");
    assert_eq!(sm.shared.read().state.dedup().len(), 2);
    drop(sm);

    // Restarted: the snapshot of index 1 (rules 1: whole) is loaded into a fresh archive
    // generation; entry 2 comes
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

/// Before rules version 3 a start reads nothing from the archive (it fills a fresh generation
/// from the snapshot and the log), so an archive sled cannot open, as after a power cut that
/// landed its writes out of order, is removed unopened and the node starts.
#[tokio::test]
async fn an_archive_that_will_not_open_is_dropped_when_no_snapshot_reads_it() {
    use openraft::RaftSnapshotBuilder;
    let dir = tempfile::tempdir().expect("dir");
    let archive = dir.path().join("archive");
    let mut sm = open_on_disk(dir.path());
    apply_all(&mut sm, vec![client_entry(1, 1_000, "q-1")]).await;
    sm.build_snapshot().await.expect("snapshot at 1");
    drop(sm);
    std::fs::remove_dir_all(&archive).expect("removed");
    std::fs::create_dir_all(archive.join("db")).expect("sled's file made a directory");
    assert!(
        crate::store::open_sled(&archive, 1 << 20, None).is_err(),
        "sled cannot open it"
    );
    let sm = open_on_disk(dir.path());
    assert_eq!(remembered(&sm, "q-1"), Some(true));
    assert!(archive.join("db").is_file(), "a new archive in its place");
}

/// A client's acquire of `resource` as entry `index`, stamped `mono_ms`.
fn acquire_entry(index: u64, mono_ms: u64, resource: &str) -> crate::store::Entry {
    let mut entry = client_entry(index, mono_ms, &format!("q-{index}"));
    if let EntryPayload::Normal(crate::lease::Command::V1(proposal)) = &mut entry.payload {
        proposal.op =
            crate::lease::Op::Acquire(tenure_lease::testkit::acq_ttl(resource, "h", 5_000));
    }
    entry
}

/// The whole state, as a snapshot sent to another node carries it.
fn whole(sm: &StateMachineStore) -> Vec<u8> {
    snapshot::encode_state(&sm.shared.read().state).expect("encodes")
}

/// From rules version 3 a node keeps the live state alone in its snapshot file, over an
/// archive that stays on disk: the file names the archive's generation, a restart reads the
/// state back from both and replays to the same bytes, what later states forget stays until
/// a newer snapshot is kept, and what is sent to another node is the whole state.
#[tokio::test]
async fn an_own_snapshot_is_the_live_state_over_a_durable_archive() {
    use openraft::RaftSnapshotBuilder;
    let dir = tempfile::tempdir().expect("dir");
    let snapshots = dir.path().join("snapshots");
    let open = || open_on_disk(dir.path());
    let mut sm = open();
    let raise = crate::lease::Op::RaiseRules {
        to: crate::lease::rules::LIVE_SNAPSHOTS,
    };
    apply_all(&mut sm, vec![own_entry(1, raise)]).await;
    let acquires = (2..=101).map(|i| acquire_entry(i, 1_000 + i, &format!("r{i}")));
    apply_all(&mut sm, acquires.collect()).await;
    let at_101 = whole(&sm);

    let built = sm.build_snapshot().await.expect("snapshot at 101");
    let (_, path, bytes) = snapshot::newest(&snapshots).expect("list").expect("a file");
    let generation = snapshot::generation(&path).expect("the file names its generation");
    assert!(
        (bytes as usize) < at_101.len() / 2,
        "the file ({bytes} B) holds less than the whole state ({} B)",
        at_101.len()
    );
    // Sent whole: the archive's entries added to the live state.
    let file = built.snapshot.into_std().await;
    let mut sent = sm
        .shared
        .whole_snapshot(built.meta.last_log_id, file)
        .expect("whole");
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut sent, &mut data).expect("read");
    let (_, body) = snapshot::checked(&data).expect("checksum");
    let sent = snapshot::decode_state(body).expect("decodes alone");
    assert_eq!(snapshot::encode_state(&sent).expect("encodes"), at_101);

    // Eleven minutes on: the leases are reclaimed and their resources go cold, the window
    // forgets every record; then a snapshot, then more.
    let tick = |index, mono_ms| {
        let mut entry = own_entry(index, crate::lease::Op::Tick);
        if let EntryPayload::Normal(crate::lease::Command::V1(proposal)) = &mut entry.payload {
            proposal.stamp.mono_ms = mono_ms;
        }
        entry
    };
    apply_all(&mut sm, vec![tick(102, 700_000)]).await;
    assert_eq!(sm.shared.read().state.dedup().len(), 0);
    sm.build_snapshot().await.expect("snapshot at 102");
    let at_102 = whole(&sm);
    let later: Vec<_> = (103..=140)
        .map(|i| acquire_entry(i, 700_000 + i, &format!("r{}", i - 100)))
        .collect();
    apply_all(&mut sm, later.clone()).await;
    let at_140 = whole(&sm);
    drop(sm);

    // Restarted on the snapshot of 102 and the generation it names, then the log replayed.
    let mut sm = open();
    let (_, path, _) = snapshot::newest(&snapshots).expect("list").expect("a file");
    assert_eq!(snapshot::generation(&path), Some(generation));
    assert_eq!(whole(&sm), at_102);
    apply_all(&mut sm, later).await;
    assert_eq!(whole(&sm), at_140);
}

/// A node upgraded in place from the release before (whose files held the whole state in
/// format 9, and which emptied its archive at every start) starts on that file: the entries
/// go to a new generation, and its next snapshot is its own.
#[tokio::test]
async fn a_node_starts_on_a_whole_format_9_file_of_the_release_before() {
    use openraft::RaftSnapshotBuilder;
    let dir = tempfile::tempdir().expect("dir");
    let snapshots = dir.path().join("snapshots");
    let mut sm = open_on_disk(dir.path());
    let raise = crate::lease::Op::RaiseRules {
        to: crate::lease::rules::LIVE_SNAPSHOTS,
    };
    apply_all(&mut sm, vec![own_entry(1, raise)]).await;
    let acquires = (2..=60).map(|i| acquire_entry(i, 1_000 + i, &format!("r{i}")));
    apply_all(&mut sm, acquires.collect()).await;
    let at_60 = whole(&sm);
    // The file the release before wrote: the whole body, no generation in its name.
    let meta = {
        let applied = sm.shared.read();
        snapshot::meta_at(applied.last_applied, applied.last_membership.clone())
    };
    let mut writer = Writer::create(&snapshots, meta).expect("create");
    writer.state(&sm.shared.read().state).expect("encode whole");
    sm.shared
        .keep_if_newer(writer.finish().expect("finish"), None)
        .expect("keep");
    drop(sm);

    let mut sm = open_on_disk(dir.path());
    assert_eq!(whole(&sm), at_60);
    apply_all(&mut sm, vec![acquire_entry(61, 2_000, "r61")]).await;
    sm.build_snapshot().await.expect("its own snapshot");
    let (_, path, _) = snapshot::newest(&snapshots).expect("list").expect("a file");
    assert!(snapshot::generation(&path).is_some(), "{}", path.display());
    let at_61 = whole(&sm);
    drop(sm);
    assert_eq!(whole(&open_on_disk(dir.path())), at_61);
}
