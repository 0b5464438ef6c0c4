//! The state's archive on disk (`lease::archive`): what the state remembers but seldom reads
//! (exactly-once records, history events, idle resources) in a sled database of its own under
//! the data directory, not on the heap.
//!
//! A state reads one generation (a sled tree). Apply writes each key once, numbered by the
//! state, so a node that restarts from its snapshot and replays its log writes the same
//! bytes again. From rules version 3 a node's snapshot file is the live state alone and names
//! the generation it reads: the generation is flushed before that file is named, and what
//! later states forgot leaves it only once a newer snapshot is named (so a restart never
//! misses an entry). A start opens the generation its snapshot names and drops the others;
//! an installed snapshot gets a generation of its own, and the one it replaces goes once no
//! copy of the old state reads it. A write that fails stops the node: the state must never
//! answer from a partial archive.
//!
//! Once a snapshot names a generation (before, a start discards the archive unopened), writes
//! are made durable within [`FLUSH_EVERY`] of the first one not yet durable, sooner past
//! [`FLUSH_SOON`] bytes, and by the writer itself past [`FLUSH_BYTES`]: sled counts an IO buffer handed to `sync_file_range`
//! as stable and may reuse what it relocated from, so a power cut that keeps later unsynced
//! writes without earlier ones left a database sled's recovery panicked on or read without
//! entries flushed before (an experiment on the power nemesis's disk, reordering cuts of a
//! writer at ≈ 30 MB/s: 12 of 16 failed with a sync each 100 ms, 5–17 MB unsynced; none of
//! 24 with a sync each 10 ms or each write, up to 1.9 MB unsynced).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::lease::archive::{tagged, tagged_range, Archive, Space, Visit};

/// sled's page cache for the archive: what is read often stays in memory, the rest is read
/// back from the file. Reads are rare (a retry, a History page, an ended lease asked about,
/// the window's oldest chunk once); writes are appends of whole chunks.
const CACHE_BYTES: u64 = 8 << 20;

const GENERATION: &str = "generation.";

/// How long a write may stay not durable: the flusher thread syncs what was written this long
/// after the first write since its last sync.
const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Bytes written and not yet durable at which the flusher syncs them without waiting.
const FLUSH_SOON: u64 = 512 << 10;

/// Bytes written and not yet durable at which the writer syncs them itself (in apply: only
/// when writes outrun the flusher, as an installed snapshot's copy can).
const FLUSH_BYTES: u64 = 2 << 20;

/// What sled writes for a removal, about (a frame and the key).
const REMOVAL_BYTES: u64 = 64;

/// The node's archives: one sled database, a tree per generation.
pub struct Archives {
    db: sled::Db,
    durable: Arc<Durability>,
    next: AtomicU64,
}

/// What makes the archive's writes durable, shared by the database and every generation.
struct Durability {
    db: sled::Db,
    /// sled's data file, and where it writes its largest values: synced by [`Archives::flush`].
    data: std::fs::File,
    blobs: std::path::PathBuf,
    /// Whether writes are synced as they come: once a snapshot names a generation.
    on: AtomicBool,
    /// Bytes written since the last sync began, about.
    unsynced: AtomicU64,
    /// How long the flusher lets writes gather ([`FLUSH_EVERY`]).
    every: Duration,
    /// The thread that syncs within `every` of a write.
    flusher: OnceLock<std::thread::Thread>,
}

/// A generation: its number and the archive a state reads.
#[derive(Clone)]
pub struct Generation {
    pub number: u64,
    tree: Arc<SledArchive>,
}

impl Generation {
    /// The archive a state reads.
    pub fn archive(&self) -> Arc<dyn Archive> {
        self.tree.clone()
    }

    /// Whether the tree goes when nothing reads it any more: true until a snapshot file
    /// names it ([`Generation::named_by_snapshot`]), and again once a newer generation
    /// replaces it ([`Generation::replaced`]).
    fn set_doomed(&self, doomed: bool) {
        self.tree.doomed.store(doomed, Ordering::Relaxed);
    }

    /// A snapshot file kept names this generation: it stays on disk, and from now on the
    /// archive must open after any crash.
    pub(crate) fn named_by_snapshot(&self) {
        self.set_doomed(false);
        self.tree.durable.on.store(true, Ordering::Release);
    }

    /// A newer generation replaced this one: it goes once nothing reads it.
    pub(crate) fn replaced(&self) {
        self.set_doomed(true);
    }
}

impl Archives {
    /// Opens (or creates) the archive database in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Archives> {
        Archives::open_syncing_every(dir, FLUSH_EVERY)
    }

    fn open_syncing_every(dir: &Path, every: Duration) -> anyhow::Result<Archives> {
        // sled's own segments (512 KiB): each IO buffer it keeps is one (8 MiB ones, as the
        // log's, stayed resident by the handful). Values over a quarter of one go to `blobs/`,
        // which `flush` syncs.
        let db = crate::store::open_sled(dir, CACHE_BYTES, None)?;
        let highest = Archives::numbers(&db).into_iter().max().unwrap_or(0);
        let durable = Arc::new(Durability {
            db: db.clone(),
            data: std::fs::File::open(dir.join("db"))?,
            blobs: dir.join("blobs"),
            on: AtomicBool::new(false),
            unsynced: AtomicU64::new(0),
            every,
            flusher: OnceLock::new(),
        });
        Durability::spawn_flusher(&durable)?;
        Ok(Archives {
            db,
            durable,
            next: AtomicU64::new(highest + 1),
        })
    }

    /// Removes the archive database in `dir`, durably, without opening it.
    pub fn discard(dir: &Path) -> anyhow::Result<()> {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            removed => removed?,
        }
        if let Some(parent) = dir.parent() {
            crate::store::sync_dir(parent)?;
        }
        Ok(())
    }

    /// The numbers of the generations the database holds.
    fn numbers(db: &sled::Db) -> Vec<u64> {
        db.tree_names()
            .iter()
            .filter_map(|name| {
                std::str::from_utf8(name)
                    .ok()?
                    .strip_prefix(GENERATION)?
                    .parse()
                    .ok()
            })
            .collect()
    }

    /// A new, empty generation.
    pub fn fresh(&self) -> anyhow::Result<Generation> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        self.generation(number, true)
    }

    /// Generation `number`, as a snapshot of this node's names it; an error if it is not here.
    pub(crate) fn named(&self, number: u64) -> anyhow::Result<Generation> {
        anyhow::ensure!(
            Archives::numbers(&self.db).contains(&number),
            "the snapshot reads archive generation {number}, which the archive does not hold"
        );
        self.durable.on.store(true, Ordering::Release);
        self.generation(number, false)
    }

    fn generation(&self, number: u64, doomed: bool) -> anyhow::Result<Generation> {
        let name = format!("{GENERATION}{number}");
        let tree = self.db.open_tree(&name)?;
        let tree = Arc::new(SledArchive {
            db: self.db.clone(),
            durable: self.durable.clone(),
            tree,
            name,
            doomed: doomed.into(),
        });
        Ok(Generation { number, tree })
    }

    /// Drops every generation but `keep` (at a start: the others are what a crash left).
    pub(crate) fn keep_only(&self, keep: u64) -> anyhow::Result<()> {
        for number in Archives::numbers(&self.db) {
            if number != keep {
                self.db.drop_tree(format!("{GENERATION}{number}"))?;
                self.durable.wrote(REMOVAL_BYTES);
            }
        }
        Ok(())
    }

    /// Makes every write so far durable (before a snapshot that reads them is named).
    pub fn flush(&self) -> anyhow::Result<()> {
        self.durable.flush()
    }
}

impl Durability {
    /// Starts the thread that syncs within `every` of a write (sooner past [`FLUSH_SOON`]);
    /// it ends when the archive is dropped.
    fn spawn_flusher(durable: &Arc<Durability>) -> anyhow::Result<()> {
        let weak = Arc::downgrade(durable);
        let every = durable.every;
        let handle = std::thread::Builder::new()
            .name("archive-flush".into())
            .spawn(move || loop {
                // Woken by the first write since the last sync (or by the archive's drop).
                std::thread::park();
                let deadline = Instant::now() + every;
                loop {
                    let Some(durable) = weak.upgrade() else {
                        return;
                    };
                    let unsynced = durable.unsynced.load(Ordering::Acquire);
                    let now = Instant::now();
                    if now >= deadline || unsynced >= FLUSH_SOON {
                        if unsynced > 0 {
                            if let Err(error) = durable.flush() {
                                fatal(error);
                            }
                        }
                        break;
                    }
                    drop(durable);
                    std::thread::park_timeout(deadline - now);
                }
            })?;
        let _ = durable.flusher.set(handle.thread().clone());
        Ok(())
    }

    /// Counts `bytes` written: the first since a sync, and the one past [`FLUSH_SOON`], wake
    /// the flusher; past [`FLUSH_BYTES`] the writer syncs them itself.
    fn wrote(&self, bytes: u64) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        let before = self.unsynced.fetch_add(bytes, Ordering::AcqRel);
        let after = before + bytes;
        if after >= FLUSH_BYTES {
            if let Err(error) = self.flush() {
                fatal(error);
            }
        } else if before == 0 || (before < FLUSH_SOON && after >= FLUSH_SOON) {
            if let Some(flusher) = self.flusher.get() {
                flusher.unpark();
            }
        }
    }

    /// Makes every write so far durable: sled's flush, then an fsync of its data file, of
    /// each of its blob files (values over a quarter segment, which its flush writes but
    /// never syncs) and of their directory.
    fn flush(&self) -> anyhow::Result<()> {
        // Writes from here on are the next sync's.
        self.unsynced.swap(0, Ordering::AcqRel);
        super::flush_sled(&self.db)?;
        self.data.sync_data()?;
        let blobs = match std::fs::read_dir(&self.blobs) {
            // None yet (or the directory removed under a stopping node).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            blobs => blobs?,
        };
        for blob in blobs {
            match std::fs::File::open(blob?.path()) {
                Ok(file) => file.sync_data()?,
                // Removed meanwhile: a value sled no longer holds.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        match crate::store::sync_dir(&self.blobs) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            synced => Ok(synced?),
        }
    }
}

impl Drop for Durability {
    fn drop(&mut self) {
        // The flusher wakes, finds the archive gone, and ends.
        if let Some(flusher) = self.flusher.get() {
            flusher.unpark();
        }
    }
}

/// One generation: a sled tree, its keys prefixed by their space's tag.
struct SledArchive {
    db: sled::Db,
    durable: Arc<Durability>,
    tree: sled::Tree,
    name: String,
    /// Dropped from the database with the last reader (see [`Generation::set_doomed`]).
    doomed: std::sync::atomic::AtomicBool,
}

/// A failed write, sync or read of the archive: the node cannot go on answering.
fn fatal(error: impl std::fmt::Display) -> ! {
    tracing::error!(%error, "the state's archive failed: stopping (a restart rebuilds it from the snapshot and the log)");
    std::process::abort()
}

impl Archive for SledArchive {
    fn get(&self, space: Space, key: &[u8]) -> Option<Vec<u8>> {
        match self.tree.get(tagged(space, key)) {
            Ok(value) => value.map(|v| v.to_vec()),
            Err(error) => fatal(error),
        }
    }

    fn insert(&self, space: Space, key: &[u8], value: &[u8]) {
        if let Err(error) = self.tree.insert(tagged(space, key), value) {
            fatal(error);
        }
        self.durable.wrote((1 + key.len() + value.len()) as u64);
    }

    fn remove(&self, space: Space, key: &[u8]) {
        if let Err(error) = self.tree.remove(tagged(space, key)) {
            fatal(error);
        }
        self.durable.wrote(REMOVAL_BYTES);
    }

    fn scan(
        &self,
        space: Space,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        visit: Visit<'_>,
    ) {
        let mut range = self.tree.range::<Vec<u8>, _>(tagged_range(space, from, to));
        loop {
            let next = match reverse {
                false => range.next(),
                true => range.next_back(),
            };
            match next {
                None => return,
                Some(Err(error)) => fatal(error),
                Some(Ok((key, value))) => {
                    if !visit(&key[1..], &value) {
                        return;
                    }
                }
            }
        }
    }
}

impl Drop for SledArchive {
    fn drop(&mut self) {
        if !self.doomed.load(Ordering::Relaxed) {
            return;
        }
        if let Err(error) = self.db.drop_tree(&self.name) {
            tracing::warn!(%error, tree = %self.name, "an old archive was not removed");
        }
        self.durable.wrote(REMOVAL_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_synced_once_named_soon_past_a_bound_and_by_the_writer_past_another() {
        let dir = tempfile::tempdir().expect("temp dir");
        // A flusher that waits an hour unless the writes pass FLUSH_SOON.
        let archives =
            Archives::open_syncing_every(&dir.path().join("archive"), Duration::from_secs(3600))
                .expect("opens");
        let generation = archives.fresh().expect("fresh");
        let archive = generation.archive();
        let unsynced = || archives.durable.unsynced.load(Ordering::Acquire);
        let chunk = vec![7u8; 64 << 10];
        let mut key = 0u32;
        let mut insert = |archive: &Arc<dyn Archive>| {
            key += 1;
            archive.insert(Space::Events, &key.to_be_bytes(), &chunk);
        };
        insert(&archive);
        assert_eq!(
            unsynced(),
            0,
            "not counted before a snapshot names a generation"
        );
        generation.named_by_snapshot();
        for _ in 0..4 {
            insert(&archive);
        }
        assert!(
            unsynced() >= 4 * (64 << 10),
            "below FLUSH_SOON: the flusher waits"
        );
        // Past FLUSH_SOON the flusher syncs without waiting out its hour.
        for _ in 0..4 {
            insert(&archive);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while unsynced() > 0 {
            assert!(Instant::now() < deadline, "the flusher never synced");
            std::thread::yield_now();
        }
        // Past FLUSH_BYTES the writer syncs before its write returns.
        archives.durable.wrote(FLUSH_BYTES);
        assert_eq!(unsynced(), 0);
    }

    #[test]
    fn a_generation_reads_back_in_order_and_goes_when_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let archives = Archives::open(&dir.path().join("archive")).expect("opens");
        let archive = archives.fresh().expect("fresh").archive();
        archive.insert(Space::ExactlyOnce, b"b", b"1");
        archive.insert(Space::ExactlyOnce, b"a", b"2");
        archive.insert(Space::ExactlyOnce, b"c", b"3");
        archive.remove(Space::ExactlyOnce, b"c");
        assert_eq!(archive.get(Space::ExactlyOnce, b"a"), Some(b"2".to_vec()));
        assert_eq!(archive.get(Space::ExactlyOnce, b"c"), None);
        let mut seen = Vec::new();
        archive.scan(
            Space::ExactlyOnce,
            Bound::Unbounded,
            Bound::Included(b"b"),
            true,
            &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                true
            },
        );
        assert_eq!(
            seen,
            [
                (b"b".to_vec(), b"1".to_vec()),
                (b"a".to_vec(), b"2".to_vec())
            ]
        );
        let other = archives.fresh().expect("another").archive();
        let mut empty = true;
        other.scan(
            Space::ExactlyOnce,
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            &mut |_, _| {
                empty = false;
                false
            },
        );
        assert!(empty);
        drop(archive);
        assert_eq!(
            archives
                .db
                .tree_names()
                .iter()
                .filter(|n| n.starts_with(b"generation."))
                .count(),
            1
        );
    }
}
