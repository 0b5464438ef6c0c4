//! The Raft log and vote on sled, durable before openraft is told so.
//!
//! sled 0.34's flush ends in `sync_file_range`, which does not flush a disk's volatile write
//! cache; so after every flush we also `fdatasync` sled's data file. One append = one flush +
//! one fdatasync, however many entries it carries: batching buys throughput.

use std::fmt::Debug;
use std::fs::File;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{read_err, write_err, Entry, LogId, NodeId, StorageStats, TypeConfig};

const VOTE: &[u8] = b"vote";
const LAST_PURGED: &[u8] = b"last_purged";
const COMMITTED: &[u8] = b"committed";

#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    /// sled's data file, opened once for fdatasync.
    data_file: Arc<File>,
    stats: Arc<StorageStats>,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl LogStore {
    /// Opens (or creates) the log under `dir`.
    pub fn open(dir: &Path, stats: Arc<StorageStats>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(64 * 1024 * 1024)
            // sled writes any item over a quarter segment to `blobs/`, which its flush never
            // syncs; 8 MiB segments keep every leaf page of small entries out of there.
            .segment_size(8 * 1024 * 1024)
            .flush_every_ms(None)
            .open()?;
        let log = db.open_tree("raft_log")?;
        let meta = db.open_tree("raft_meta")?;
        let data_file = Arc::new(File::open(dir.join("db"))?);
        Ok(LogStore {
            db,
            log,
            meta,
            data_file,
            stats,
        })
    }

    /// Flushes sled and fdatasyncs its file: after this, what was written survives power loss.
    async fn sync(&self) -> Result<(), StorageError<NodeId>> {
        let db = self.db.clone();
        let file = self.data_file.clone();
        let started = Instant::now();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            db.flush().map_err(std::io::Error::other)?;
            file.sync_data()
        })
        .await
        .map_err(write_err)?
        .map_err(write_err)?;
        StorageStats::add(&self.stats.log_fsyncs, 1);
        StorageStats::add(
            &self.stats.log_sync_micros,
            started.elapsed().as_micros() as u64,
        );
        Ok(())
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageError<NodeId>> {
        match self.meta.get(key).map_err(read_err)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(read_err)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageError<NodeId>> {
        let bytes = serde_json::to_vec(value).map_err(write_err)?;
        self.meta.insert(key, bytes).map_err(write_err)?;
        Ok(())
    }

    fn remove_range(&self, range: impl RangeBounds<[u8; 8]>) -> Result<(), StorageError<NodeId>> {
        let mut batch = sled::Batch::default();
        for item in self.log.range(range) {
            let (key, _) = item.map_err(write_err)?;
            batch.remove(key);
        }
        self.log.apply_batch(batch).map_err(write_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let start = match range.start_bound() {
            std::ops::Bound::Included(i) => *i,
            std::ops::Bound::Excluded(i) => i.saturating_add(1),
            std::ops::Bound::Unbounded => 0,
        };
        let mut entries = Vec::new();
        for item in self.log.range(index_key(start)..) {
            let (key, value) = item.map_err(read_err)?;
            let mut index_bytes = [0u8; 8];
            index_bytes.copy_from_slice(&key);
            if !range.contains(&u64::from_be_bytes(index_bytes)) {
                break;
            }
            entries.push(serde_json::from_slice(&value).map_err(read_err)?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let last_purged_log_id: Option<LogId> = self.get_meta(LAST_PURGED)?;
        let last_log_id = match self.log.last().map_err(read_err)? {
            Some((_, value)) => {
                let entry: Entry = serde_json::from_slice(&value).map_err(read_err)?;
                Some(entry.log_id)
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

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.put_meta(VOTE, vote)?;
        self.sync().await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.get_meta(VOTE)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId>,
    ) -> Result<(), StorageError<NodeId>> {
        // Not synced: a stale value only means less is re-applied at startup.
        self.put_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError<NodeId>> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = sled::Batch::default();
        let mut count = 0u64;
        for entry in entries {
            let value = serde_json::to_vec(&entry).map_err(write_err)?;
            batch.insert(&index_key(entry.log_id.index), value);
            count += 1;
        }
        self.log.apply_batch(batch).map_err(write_err)?;
        self.sync().await?;
        StorageStats::add(&self.stats.log_appends, 1);
        StorageStats::add(&self.stats.log_entries, count);
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        self.remove_range(index_key(log_id.index)..)?;
        self.sync().await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        self.put_meta(LAST_PURGED, &Some(log_id))?;
        self.remove_range(..=index_key(log_id.index))?;
        self.sync().await
    }
}
