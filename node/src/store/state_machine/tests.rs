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
