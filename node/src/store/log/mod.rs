//! The Raft log and vote on sled, durable before openraft is told so.
//!
//! `append` writes the entries into sled's memory, then their encoded bytes to the end of the
//! log's journal (`wal`), fdatasyncs that, and calls openraft back. sled itself is flushed only
//! at a checkpoint, when a journal segment is full, by a checkpointer thread that then removes
//! the segments sled now holds: sled's flush costs a wake-up of each of its seven IO threads
//! (see `wal`). Opening the log replays the journal into sled.
//!
//! `append` writes the journal's records to the OS and returns; a flusher thread fdatasyncs
//! the segment and calls openraft back (`IOFlushed`), for every append written before its
//! sync at once. openraft 0.10 goes on meanwhile: the leader sends AppendEntries while its
//! own fsync runs, and counts itself towards a commit only once it is called back, so the
//! leader's fsync and the followers' overlap and no entry is committed on a copy that is not
//! durable.
//!
//! sled 0.34's flush ends in `sync_file_range`, which does not flush a disk's volatile write
//! cache; so after every sled flush we also `fdatasync` sled's data file.

mod threads;
mod wal;

use threads::*;

use std::fmt::Debug;
use std::fs::File;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::codec;
use super::{io_err, Entry, LogId, NodeId, StorageStats, TypeConfig, Vote};

const VOTE: &[u8] = b"vote";
const LAST_PURGED: &[u8] = b"last_purged";
const COMMITTED: &[u8] = b"committed";
/// sled's page cache for the log: the entries replication and apply read are the newest few
/// seconds' (16 MiB is tens of thousands of entries); older ones are read back when a
/// follower far behind catches up, or before a purge.
const LOG_CACHE_BYTES: u64 = 16 << 20;

#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    /// sled's data file, opened once for fdatasync.
    data_file: Arc<File>,
    /// Whether fdatasync is skipped (a deliberately broken test build, `--fi-ack-before-sync`).
    lies: bool,
    stats: Arc<StorageStats>,
    /// The journal's open segment; closed segments go to the checkpointer.
    journal: Arc<std::sync::Mutex<wal::Wal>>,
    checkpoint_queue: std::sync::mpsc::Sender<u64>,
    /// Callbacks of appends written to the journal, for the flusher thread's next sync.
    flushes: std::sync::mpsc::Sender<IOFlushed<TypeConfig>>,
    /// How many of them the flusher has not called back yet.
    unflushed: Arc<std::sync::atomic::AtomicUsize>,
    /// This node's id, once known ([`LogStore::of_node`]): its own entries are the leader's.
    node: Option<NodeId>,
    /// Indexes through which the purger thread removes entries.
    purges: std::sync::mpsc::Sender<u64>,
    /// The index through which the purger has removed them (tests await it).
    #[cfg_attr(not(test), allow(dead_code))]
    purged: tokio::sync::watch::Receiver<u64>,
    /// How many checkpoints have removed journal segments (tests await it).
    #[cfg_attr(not(test), allow(dead_code))]
    checkpoints: tokio::sync::watch::Receiver<u64>,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl LogStore {
    /// Opens (or creates) the log under `dir`.
    pub fn open(dir: &Path, stats: Arc<StorageStats>) -> anyhow::Result<Self> {
        LogStore::open_with(dir, stats, false)
    }

    /// [`LogStore::open`]; with `lies`, DELIBERATELY BROKEN: every "sync" stops after sled's
    /// flush to the operating system and skips the fdatasync (the fault harness's planted
    /// bug, caught by its power cuts).
    pub fn open_with(dir: &Path, stats: Arc<StorageStats>, lies: bool) -> anyhow::Result<Self> {
        // sled writes any item over a quarter segment to `blobs/`, which its flush never
        // syncs; 8 MiB segments keep every leaf page of small entries out of there.
        let db = super::open_sled(dir, LOG_CACHE_BYTES, Some(8 * 1024 * 1024))?;
        let log = db.open_tree("raft_log")?;
        let meta = db.open_tree("raft_meta")?;
        let data_file = Arc::new(File::open(dir.join("db"))?);
        // What the journal holds beyond sled's durable state goes into sled, in order, and is
        // made durable there before anything reads the log.
        let opened = wal::Wal::open(&dir.join("wal"))?;
        let replayed = !opened.records.is_empty();
        for record in opened.records {
            match record {
                wal::Record::Entry { index, bytes } => {
                    log.insert(index_key(index), bytes)?;
                }
                wal::Record::TruncateFrom { index } => remove_from(&log, index)?,
            }
        }
        if let Some(through) = opened.replayed_through {
            if replayed {
                flush_and_sync(&db, &data_file, &stats, lies)?;
            }
            wal::remove_through(opened.wal.dir(), through)?;
        }
        let last_purged: Option<LogId> = match meta.get(LAST_PURGED)? {
            Some(bytes) => serde_json::from_slice(&bytes)?,
            None => None,
        };
        // The log kept from before: compaction counts it as grown since the last snapshot.
        // Entries a crash left behind the purge point are not part of it.
        let first_kept = last_purged.map_or(0, |purged| purged.index.saturating_add(1));
        let mut kept_bytes = 0;
        for value in log.range(index_key(first_kept)..).values() {
            kept_bytes += value?.len() as u64;
        }
        StorageStats::add(&stats.log_bytes, kept_bytes);
        let (checkpoints, closed) = std::sync::mpsc::channel();
        let (checkpointed, checkpoints_done) = tokio::sync::watch::channel(0);
        {
            let (db, file, stats) = (db.clone(), data_file.clone(), stats.clone());
            let wal_dir = opened.wal.dir().to_path_buf();
            std::thread::Builder::new()
                .name("log-checkpoint".into())
                .spawn(move || {
                    checkpoint(&db, &file, &stats, lies, &wal_dir, &closed, &checkpointed)
                })?;
        }
        let journal = Arc::new(std::sync::Mutex::new(opened.wal));
        let (flushes, queued) = std::sync::mpsc::channel();
        let unflushed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        {
            let (journal, stats) = (journal.clone(), stats.clone());
            let unflushed = unflushed.clone();
            let checkpoints = checkpoints.clone();
            std::thread::Builder::new()
                .name("log-flusher".into())
                .spawn(move || {
                    flush_journal(&journal, &stats, lies, &queued, &unflushed, &checkpoints)
                })?;
        }
        let (purges, to_purge) = std::sync::mpsc::channel();
        let (purged_through, purged) = tokio::sync::watch::channel(0);
        {
            let log = log.clone();
            std::thread::Builder::new()
                .name("log-purger".into())
                .spawn(move || purge_behind(&log, &to_purge, &purged_through))?;
        }
        let store = LogStore {
            db,
            log,
            meta,
            data_file,
            lies,
            stats,
            journal,
            checkpoint_queue: checkpoints,
            flushes,
            unflushed,
            node: None,
            purges,
            purged,
            checkpoints: checkpoints_done,
        };
        // A purge a crash interrupted is finished now.
        if let Some(purged) = last_purged {
            let _ = store.purges.send(purged.index);
        }
        Ok(store)
    }

    /// The log of node `id`: appends of its own entries (it leads) are synced by the flusher
    /// thread while replication goes on; a follower's are synced in `append`, since it
    /// answers the leader only once they are durable anyway.
    pub fn of_node(mut self, id: NodeId) -> Self {
        self.node = Some(id);
        self
    }

    /// Flushes sled and fdatasyncs its file: after this, what was written survives power loss.
    async fn sync(&self) -> Result<(), std::io::Error> {
        let (db, file, stats) = (self.db.clone(), self.data_file.clone(), self.stats.clone());
        let lies = self.lies;
        tokio::task::spawn_blocking(move || flush_and_sync(&db, &file, &stats, lies))
            .await
            .map_err(io_err)?
            .map_err(io_err)
    }

    /// Writes `records` at the end of the journal and fdatasyncs it (unless `lies`), in the
    /// caller: after this they survive power loss. For a truncation, which must be durable
    /// before it returns; appends are synced by the flusher thread. A full segment is closed
    /// and handed to the checkpointer.
    ///
    /// `then` runs once they are durable and before any segment closes: a change to sled that
    /// must not reach sled's disk before its record (a truncation; a checkpoint's flush could
    /// otherwise carry it there and remove the record's segment).
    fn journal(
        &self,
        records: &[u8],
        then: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let started = Instant::now();
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        journal.write(records)?;
        if !self.lies {
            journal.sync()?;
        }
        count_sync(&self.stats, started);
        then()?;
        close_if_full(&mut journal, &self.checkpoint_queue);
        Ok(())
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, std::io::Error> {
        match self.meta.get(key).map_err(io_err)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(io_err)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), std::io::Error> {
        let bytes = serde_json::to_vec(value).map_err(io_err)?;
        self.meta.insert(key, bytes).map_err(io_err)?;
        Ok(())
    }
}

/// Removes the entries from `index` on, in one sled batch (a truncation: rare).
fn remove_from(log: &sled::Tree, index: u64) -> sled::Result<()> {
    let mut batch = sled::Batch::default();
    for key in log.range(index_key(index)..).keys() {
        batch.remove(key?);
    }
    log.apply_batch(batch)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, std::io::Error> {
        let start = match range.start_bound() {
            std::ops::Bound::Included(i) => *i,
            std::ops::Bound::Excluded(i) => i.saturating_add(1),
            std::ops::Bound::Unbounded => 0,
        };
        let mut entries = Vec::new();
        for item in self.log.range(index_key(start)..) {
            let (key, value) = item.map_err(io_err)?;
            let mut index_bytes = [0u8; 8];
            index_bytes.copy_from_slice(&key);
            if !range.contains(&u64::from_be_bytes(index_bytes)) {
                break;
            }
            entries.push(codec::from_bytes(&value).map_err(io_err)?.0);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, std::io::Error> {
        self.get_meta(VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, std::io::Error> {
        let last_purged_log_id: Option<LogId> = self.get_meta(LAST_PURGED)?;
        let last_log_id = match self.log.last().map_err(io_err)? {
            Some((_, value)) => {
                let (entry, _): (Entry, _) = codec::from_bytes(&value).map_err(io_err)?;
                // Entries behind the purge point may still wait for the purger: the log
                // then ends where it was purged (openraft: last_purged ≤ last_log_id).
                Some(entry.log_id).max(last_purged_log_id)
            }
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), std::io::Error> {
        self.put_meta(VOTE, vote)?;
        self.sync().await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), std::io::Error> {
        // Not synced: a stale value only means less is re-applied at startup.
        self.put_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, std::io::Error> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), std::io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Plain inserts, not a sled batch: a batch seals and writes out sled's IO buffer
        // twice (its `pin_log`), waking every sled IO thread each time. The entries are
        // durable through the journal; a crash that leaves a prefix of them in sled leaves
        // no hole.
        let mut records = Vec::new();
        let mut count = 0u64;
        let mut bytes = 0u64;
        let mut leader = None;
        for entry in entries {
            leader.get_or_insert(entry.log_id.leader_id.node_id);
            let value = codec::to_bytes(&entry).map_err(io_err)?;
            bytes += value.len() as u64;
            wal::encode_entry(&mut records, entry.log_id.index, &value);
            self.log
                .insert(index_key(entry.log_id.index), value)
                .map_err(io_err)?;
            count += 1;
        }
        StorageStats::add(&self.stats.log_appends, 1);
        StorageStats::add(&self.stats.log_entries, count);
        StorageStats::add(&self.stats.log_bytes, bytes);
        // A follower's entries, with no earlier append still to be called back (callbacks
        // report progress in order): synced here, without two thread hand-offs.
        let unflushed = &self.unflushed;
        if leader != self.node && unflushed.load(std::sync::atomic::Ordering::Acquire) == 0 {
            callback.io_completed(self.journal(&records, || Ok(())));
            return Ok(());
        }
        self.journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write(&records)?;
        unflushed.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if let Err(unsent) = self.flushes.send(callback) {
            unsent
                .0
                .io_completed(Err(std::io::Error::other("the log flusher has stopped")));
        }
        Ok(())
    }

    /// Removes the entries after `last` (all with None), and journals that (a replay would
    /// otherwise bring back journaled entries it removed).
    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), std::io::Error> {
        let first_removed = last.map_or(0, |id| id.index.saturating_add(1));
        let mut records = Vec::new();
        wal::encode_truncate(&mut records, first_removed);
        // Journaled first: removed from sled before its record is durable, the entries could
        // be gone from sled's disk (written out by a flush) while a replay brings back only
        // those the journal still holds, leaving a hole.
        self.journal(&records, || {
            remove_from(&self.log, first_removed).map_err(std::io::Error::other)
        })
    }

    /// Durably moves the log's start past `log_id`; the purger thread removes the entries
    /// behind it. Removing them here took seconds for a few hundred thousand entries (sled
    /// removes ≈ 60k keys a second), during which RaftCore, which awaits this, answered no
    /// AppendEntries, and followers started elections. Entries left behind by a crash are
    /// removed at the next start (`open`), and never read: openraft reads after the start.
    async fn purge(&mut self, log_id: LogId) -> Result<(), std::io::Error> {
        self.put_meta(LAST_PURGED, &Some(log_id))?;
        self.sync().await?;
        let _ = self.purges.send(log_id.index);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
