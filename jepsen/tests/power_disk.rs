//! The forgetting filesystem through the kernel: files written and synced with std::fs under
//! a real FUSE mount, then a power cut. Needs root and /dev/fuse (CI has both); elsewhere it
//! prints a note and passes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tenure_jepsen::power::{CutMode, PowerDisk};

mod common;

fn sync_dir(dir: &Path) {
    File::open(dir)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

/// A forgetting disk mounted in a temporary directory, or None (with a note) where FUSE
/// cannot mount.
fn mounted() -> Option<(tempfile::TempDir, PathBuf, PowerDisk)> {
    if !common::is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("note: skipping: a FUSE mount needs root and /dev/fuse");
        return None;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let mount = tmp.path().join("data");
    let disk = PowerDisk::mount(&tmp.path().join("disk"), &mount).expect("mount");
    Some((tmp, mount, disk))
}

#[test]
fn through_a_mount_a_power_cut_keeps_what_was_synced_and_nothing_else() {
    let Some((_tmp, mount, mut disk)) = mounted() else {
        return;
    };

    // Synced data under synced names.
    let mut log = File::create(mount.join("log")).expect("create");
    log.write_all(b"durable").expect("write");
    log.sync_data().expect("fdatasync");
    std::fs::write(mount.join("state"), b"old").expect("write");
    File::open(mount.join("state"))
        .expect("open")
        .sync_all()
        .expect("fsync");
    sync_dir(&mount);

    // Then data written and never synced, as a process killed before its fsync leaves it.
    log.write_all(b" lost").expect("write");
    drop(log);
    // A new file whose data is synced but whose name is not.
    let mut orphan = File::create(mount.join("orphan")).expect("create");
    orphan.write_all(b"x").expect("write");
    orphan.sync_all().expect("fsync");
    drop(orphan);
    // The atomic replace, its rename never synced.
    std::fs::write(mount.join("state.tmp"), b"new").expect("write");
    OpenOptions::new()
        .write(true)
        .open(mount.join("state.tmp"))
        .expect("open")
        .sync_all()
        .expect("fsync");
    std::fs::rename(mount.join("state.tmp"), mount.join("state")).expect("rename");

    assert_eq!(
        std::fs::read(mount.join("log")).expect("read"),
        b"durable lost"
    );
    assert_eq!(std::fs::read(mount.join("state")).expect("read"), b"new");
    assert!(disk.unsynced_bytes() >= 5);

    let stats = disk
        .cut(CutMode::Drop, &mut SmallRng::seed_from_u64(7))
        .expect("power cut");
    assert!(stats.dropped_bytes >= 5, "{stats:?}");
    assert_eq!(std::fs::read(mount.join("log")).expect("read"), b"durable");
    assert!(!mount.join("orphan").exists());
    assert_eq!(std::fs::read(mount.join("state")).expect("read"), b"old");
    assert!(!mount.join("state.tmp").exists());

    // Still a working filesystem after the cut.
    std::fs::write(mount.join("after"), b"ok").expect("write after the cut");
    assert_eq!(std::fs::read(mount.join("after")).expect("read"), b"ok");
    drop(disk);
    assert!(
        !std::fs::read_to_string("/proc/self/mounts")
            .expect("mounts")
            .contains(&mount.display().to_string()),
        "dropping the disk unmounts it"
    );
}

#[test]
fn an_armed_gate_holds_the_next_sync_of_unsynced_data_and_failing_it_makes_nothing_durable() {
    let Some((_tmp, mount, mut disk)) = mounted() else {
        return;
    };
    let mut log = File::create(mount.join("log")).expect("create");
    log.write_all(b"durable").expect("write");
    log.sync_data().expect("fdatasync");
    sync_dir(&mount);

    let gate = disk.gate();
    gate.arm();
    // Nothing unsynced: the sync passes the armed gate and leaves it armed.
    log.sync_data().expect("fdatasync with nothing to sync");
    assert!(!gate.holds());

    log.write_all(b" in flight").expect("write");
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let syncer = std::thread::spawn(move || {
        let result = log.sync_data();
        held_tx.send(()).expect("send");
        result
    });
    // The sync waits in the gate until it is failed (a sync is never answered while held).
    while !gate.holds() {
        assert!(
            held_rx.try_recv().is_err(),
            "the sync returned without being held"
        );
        std::thread::yield_now();
    }
    assert!(held_rx.try_recv().is_err());
    gate.fail_and_open();
    let err = syncer
        .join()
        .expect("syncer")
        .expect_err("a failed sync is an error");
    assert_eq!(err.raw_os_error(), Some(5), "EIO: {err}");

    let stats = disk
        .cut(CutMode::Drop, &mut SmallRng::seed_from_u64(7))
        .expect("power cut");
    assert_eq!(stats.dropped_bytes, b" in flight".len() as u64, "{stats:?}");
    assert_eq!(std::fs::read(mount.join("log")).expect("read"), b"durable");
    // Open again: later syncs pass.
    let mut after = OpenOptions::new()
        .append(true)
        .open(mount.join("log"))
        .expect("open");
    after.write_all(b"!").expect("write");
    after.sync_data().expect("fdatasync after");
}
