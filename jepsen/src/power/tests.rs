//! The forgetting disk on its own (no FUSE): what a cut keeps and what it drops.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::disk::{CutMode, Disk, ROOT, SECTOR};

fn name(text: &str) -> &OsStr {
    OsStr::new(text)
}

fn on_disk(disk: &Disk, file: &str) -> Option<Vec<u8>> {
    std::fs::read(disk.root().join(file)).ok()
}

/// A disk in `dir` with file `file` holding `content`, all of it durable: data synced and
/// the name synced in its directory.
fn with_durable_file(dir: &Path, file: &str, content: &[u8]) -> (Disk, u64) {
    let mut disk = Disk::at(dir).expect("disk");
    let (ino, fh) = disk.create(ROOT, name(file), 0o644).expect("create");
    disk.write(fh, 0, content).expect("write");
    disk.fsync(fh).expect("fsync");
    disk.fsync_dir(ROOT).expect("fsync dir");
    disk.release(fh);
    (disk, ino)
}

fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

#[test]
fn written_not_synced_data_is_gone_after_a_cut_and_synced_data_stays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut disk, ino) = with_durable_file(dir.path(), "log", b"hello");
    let fh = disk.open(ino).expect("open");
    disk.write(fh, 5, b" world").expect("write");
    // Readers see the cache; the disk has only what was synced.
    assert_eq!(disk.read(fh, 0, 100).expect("read"), b"hello world");
    assert_eq!(disk.attr(ino, Some(fh)).expect("attr").1, 11);
    assert_eq!(on_disk(&disk, "log").as_deref(), Some(&b"hello"[..]));
    assert_eq!(disk.unsynced_bytes(), 6);

    let stats = disk.cut(CutMode::Drop, &mut rng(1)).expect("cut");
    assert_eq!(
        (stats.files, stats.dropped_bytes, stats.kept_bytes),
        (1, 6, 0)
    );
    assert_eq!(on_disk(&disk, "log").as_deref(), Some(&b"hello"[..]));
    assert_eq!(disk.unsynced_bytes(), 0);
}

#[test]
fn an_fsync_makes_the_writes_before_it_durable_and_only_those() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut disk, ino) = with_durable_file(dir.path(), "log", b"");
    let fh = disk.open(ino).expect("open");
    disk.write(fh, 0, b"one,").expect("write");
    disk.write(fh, 4, b"two,").expect("write");
    disk.fsync(fh).expect("fsync");
    disk.write(fh, 8, b"three").expect("write");
    disk.cut(CutMode::Drop, &mut rng(2)).expect("cut");
    assert_eq!(on_disk(&disk, "log").as_deref(), Some(&b"one,two,"[..]));
}

#[test]
fn a_file_created_without_a_directory_fsync_is_gone_even_with_its_data_synced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut disk = Disk::at(dir.path()).expect("disk");
    let (_, fh) = disk.create(ROOT, name("new"), 0o644).expect("create");
    disk.write(fh, 0, b"data").expect("write");
    disk.fsync(fh).expect("fsync file");
    let stats = disk.cut(CutMode::Drop, &mut rng(3)).expect("cut");
    assert_eq!(stats.undone, 1);
    assert_eq!(on_disk(&disk, "new"), None);
}

#[test]
fn a_rename_without_a_directory_fsync_is_undone_and_with_one_it_stays() {
    for synced in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut disk, _) = with_durable_file(dir.path(), "state", b"old");
        // Write a temporary, sync it, rename it over the old one: the usual atomic replace.
        let (_, fh) = disk.create(ROOT, name("state.tmp"), 0o644).expect("create");
        disk.write(fh, 0, b"new").expect("write");
        disk.fsync(fh).expect("fsync");
        disk.release(fh);
        disk.rename(ROOT, name("state.tmp"), ROOT, name("state"), false)
            .expect("rename");
        assert_eq!(on_disk(&disk, "state").as_deref(), Some(&b"new"[..]));
        if synced {
            disk.fsync_dir(ROOT).expect("fsync dir");
        }
        disk.cut(CutMode::Drop, &mut rng(4)).expect("cut");
        let expected: &[u8] = if synced { b"new" } else { b"old" };
        assert_eq!(
            on_disk(&disk, "state").as_deref(),
            Some(expected),
            "directory synced: {synced}"
        );
        assert_eq!(
            on_disk(&disk, "state.tmp"),
            None,
            "directory synced: {synced}"
        );
    }
}

#[test]
fn a_removal_without_a_directory_fsync_is_undone_and_with_one_it_stays() {
    for synced in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut disk, _) = with_durable_file(dir.path(), "segment", b"entries");
        disk.unlink(ROOT, name("segment")).expect("unlink");
        assert_eq!(on_disk(&disk, "segment"), None);
        if synced {
            disk.fsync_dir(ROOT).expect("fsync dir");
        }
        disk.cut(CutMode::Drop, &mut rng(5)).expect("cut");
        let expected = (!synced).then(|| b"entries".to_vec());
        assert_eq!(
            on_disk(&disk, "segment"),
            expected,
            "directory synced: {synced}"
        );
    }
}

#[test]
fn a_directory_created_without_its_parent_synced_goes_with_what_is_in_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut disk = Disk::at(dir.path()).expect("disk");
    let sub = disk.mkdir(ROOT, name("snapshots"), 0o755).expect("mkdir");
    let (_, fh) = disk.create(sub, name("snap-1"), 0o644).expect("create");
    disk.write(fh, 0, b"state").expect("write");
    disk.fsync(fh).expect("fsync");
    disk.fsync_dir(sub).expect("fsync the new directory");
    disk.cut(CutMode::Drop, &mut rng(6)).expect("cut");
    assert!(!disk.root().join("snapshots").exists());
}

#[test]
fn reads_replay_truncates_and_writes_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut disk, ino) = with_durable_file(dir.path(), "f", b"abcdef");
    let fh = disk.open(ino).expect("open");
    disk.set_len(ino, 2);
    disk.write(fh, 4, b"XY").expect("write");
    assert_eq!(disk.read(fh, 0, 100).expect("read"), b"ab\0\0XY");
    assert_eq!(disk.read(fh, 3, 2).expect("read"), b"\0X");
    disk.fsync(fh).expect("fsync");
    assert_eq!(on_disk(&disk, "f").as_deref(), Some(&b"ab\0\0XY"[..]));
}

#[test]
fn a_torn_write_lands_on_a_sector_boundary() {
    let mut ends = BTreeSet::new();
    for seed in 0..64 {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut disk, ino) = with_durable_file(dir.path(), "log", &[b'a'; 1000]);
        let fh = disk.open(ino).expect("open");
        disk.write(fh, 1000, &[b'b'; 3000]).expect("write");
        let stats = disk.cut(CutMode::Tear, &mut rng(seed)).expect("cut");
        let content = on_disk(&disk, "log").expect("the file");
        let end = content.len() as u64;
        assert!(
            end == 1000 || (end.is_multiple_of(SECTOR) && end > 1000 && end < 4000),
            "seed {seed}: the file ends at {end}"
        );
        assert!(content[..1000].iter().all(|b| *b == b'a'));
        assert!(content[1000..].iter().all(|b| *b == b'b'));
        assert_eq!(stats.kept_bytes + stats.dropped_bytes, 3000);
        assert_eq!(stats.kept_bytes, end - 1000);
        ends.insert(end);
    }
    // The boundaries inside the write are 1024, 1536, …, 3584: several of them come up.
    assert!(ends.len() >= 4, "ends seen: {ends:?}");
}

#[test]
fn a_tear_keeps_a_prefix_of_the_unsynced_writes() {
    for seed in 0..64 {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut disk, ino) = with_durable_file(dir.path(), "log", b"");
        let fh = disk.open(ino).expect("open");
        for k in 0..4u8 {
            disk.write(fh, u64::from(k) * 512, &[b'0' + k; 512])
                .expect("write");
        }
        disk.cut(CutMode::Tear, &mut rng(seed)).expect("cut");
        let content = on_disk(&disk, "log").expect("the file");
        // Whole sectors of the writes in order, none missing before the last.
        assert!(content.len().is_multiple_of(512), "seed {seed}");
        for (k, sector) in content.chunks(512).enumerate() {
            assert!(sector.iter().all(|b| *b == b'0' + k as u8), "seed {seed}");
        }
    }
}

#[test]
fn a_reordered_cut_can_keep_a_later_write_without_an_earlier_one() {
    let mut later_alone = false;
    for seed in 0..64 {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut disk, ino) = with_durable_file(dir.path(), "log", &[b'.'; 1024]);
        let fh = disk.open(ino).expect("open");
        disk.write(fh, 0, &[b'1'; 512]).expect("write");
        disk.write(fh, 512, &[b'2'; 512]).expect("write");
        disk.cut(CutMode::Reorder, &mut rng(seed)).expect("cut");
        let content = on_disk(&disk, "log").expect("the file");
        later_alone |= content[0] == b'.' && content[512] == b'2';
    }
    assert!(later_alone);
}

#[test]
fn a_durable_rename_makes_the_earlier_changes_to_its_names_durable() {
    // y/a created, removed, then x/b renamed onto it; only x is synced. The rename is
    // durable, and with it what came before it at y/a: the cut undoes none of them.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut disk = Disk::at(dir.path()).expect("disk");
    let x = disk.mkdir(ROOT, name("x"), 0o755).expect("mkdir");
    let y = disk.mkdir(ROOT, name("y"), 0o755).expect("mkdir");
    let (_, fh) = disk.create(x, name("b"), 0o644).expect("create");
    disk.write(fh, 0, b"b").expect("write");
    disk.fsync(fh).expect("fsync");
    disk.fsync_dir(x).expect("fsync x");
    disk.fsync_dir(y).expect("fsync y");
    disk.fsync_dir(ROOT).expect("fsync root");
    disk.create(y, name("a"), 0o644).expect("create");
    disk.unlink(y, name("a")).expect("unlink");
    disk.rename(x, name("b"), y, name("a"), false)
        .expect("rename");
    disk.fsync_dir(x).expect("fsync x");
    assert_eq!(disk.unsynced_changes(), 0);
    disk.cut(CutMode::Drop, &mut rng(7)).expect("cut");
    assert_eq!(on_disk(&disk, "y/a").as_deref(), Some(&b"b"[..]));
    assert_eq!(on_disk(&disk, "x/b"), None);
}

#[test]
fn an_open_file_removed_from_its_directory_still_has_attributes_and_its_cache_ends_with_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut disk, ino) = with_durable_file(dir.path(), "tmp", b"");
    let fh = disk.open(ino).expect("open");
    disk.unlink(ROOT, name("tmp")).expect("unlink");
    disk.write(fh, 0, b"chunk").expect("write");
    // fstat without a handle, as the kernel asks once its cached attributes expire.
    assert_eq!(disk.attr(ino, None).expect("attr").1, 5);
    assert_eq!(disk.unsynced_bytes(), 5);
    disk.release(fh);
    assert_eq!(
        disk.unsynced_bytes(),
        0,
        "nothing can reach the cache of a closed, unnamed file"
    );
}
