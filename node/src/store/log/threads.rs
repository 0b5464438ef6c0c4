//! What runs beside the log's callers: the flusher that fdatasyncs the journal and calls
//! openraft back, the checkpointer that flushes sled and removes the journal segments it now
//! holds, and the purge of what a snapshot covers, in chunks.

use super::*;
use crate::store::{flush_sled, release_deferred};

/// Flushes sled ([`flush_sled`]) and fdatasyncs its file (unless `lies`), counting it in
/// `stats`.
pub(super) fn flush_and_sync(
    db: &sled::Db,
    file: &File,
    stats: &StorageStats,
    lies: bool,
) -> std::io::Result<()> {
    let started = Instant::now();
    flush_sled(db).map_err(std::io::Error::other)?;
    if !lies {
        file.sync_data()?;
    }
    StorageStats::add(&stats.log_fsyncs, 1);
    StorageStats::add(&stats.log_sync_micros, started.elapsed().as_micros() as u64);
    Ok(())
}

/// Keys removed per sled batch by the purger: ≈ 20 ms of work each.
pub(super) const PURGE_CHUNK: usize = 1024;

/// The purger thread: removes the entries up to each index it is sent, a chunk at a time, at
/// the lowest CPU priority. The next sled flush (a checkpoint's) makes the removals durable;
/// a purge that does not survive a crash is done again. Ends when the last `LogStore` clone
/// is dropped, between chunks, so a stopped node lets go of the database promptly.
pub(super) fn purge_behind(
    log: &sled::Tree,
    to_purge: &std::sync::mpsc::Receiver<u64>,
    purged: &tokio::sync::watch::Sender<u64>,
) {
    super::super::lowest_priority();
    while let Ok(first) = to_purge.recv() {
        let mut through = to_purge.try_iter().fold(first, u64::max);
        'chunks: loop {
            let mut batch = sled::Batch::default();
            let mut removed = 0;
            for key in log.range(..=index_key(through)).keys().take(PURGE_CHUNK) {
                match key {
                    Ok(key) => batch.remove(key),
                    Err(error) => {
                        tracing::warn!(%error, "reading the log to purge it");
                        break 'chunks;
                    }
                }
                removed += 1;
            }
            if removed == 0 {
                release_deferred();
                purged.send_replace(through);
                break;
            }
            if let Err(error) = log.apply_batch(batch) {
                tracing::warn!(%error, "purging the log");
                break;
            }
            match to_purge.try_recv() {
                Ok(next) => through = through.max(next),
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            }
        }
    }
}

/// Counts one journal sync begun at `started` (the `log_fsyncs` and `log_sync_micros` stats).
pub(super) fn count_sync(stats: &StorageStats, started: Instant) {
    StorageStats::add(&stats.log_fsyncs, 1);
    StorageStats::add(&stats.log_sync_micros, started.elapsed().as_micros() as u64);
}

/// Closes the open segment once it is full (synced whole) and hands it to the checkpointer.
/// A failed rotation keeps writing the open segment; a failed sync in it leaves the journal
/// failed, so the next write or sync reports it.
pub(super) fn close_if_full(wal: &mut wal::Wal, checkpoints: &std::sync::mpsc::Sender<u64>) {
    if wal.full() {
        match wal.rotate() {
            Ok(closed) => {
                let _ = checkpoints.send(closed);
            }
            Err(error) => tracing::warn!(%error, "beginning a journal segment"),
        }
    }
}

/// The flusher thread: fdatasyncs the journal's open segment for every append written before
/// it (all that are queued), calls them back, and closes the segment once it is full. The
/// segment is synced without holding the journal, so RaftCore appends meanwhile. Ends when
/// the last `LogStore` clone, and with it the queue's sender, is dropped.
pub(super) fn flush_journal(
    journal: &std::sync::Mutex<wal::Wal>,
    stats: &StorageStats,
    lies: bool,
    queued: &std::sync::mpsc::Receiver<IOFlushed<TypeConfig>>,
    unflushed: &std::sync::atomic::AtomicUsize,
    checkpoints: &std::sync::mpsc::Sender<u64>,
) {
    let lock = || journal.lock().unwrap_or_else(|p| p.into_inner());
    while let Ok(first) = queued.recv() {
        let mut batch = vec![first];
        batch.extend(queued.try_iter());
        let started = Instant::now();
        let synced = lock()
            .file()
            .and_then(|file| if lies { Ok(()) } else { file.sync_data() });
        let mut wal = lock();
        // A sync another thread made meanwhile (a truncation's) may have been the one told of
        // a failed writeback: this one's success then proves nothing.
        let synced = synced.and_then(|()| wal.healthy());
        match &synced {
            Ok(()) => {
                count_sync(stats, started);
                close_if_full(&mut wal, checkpoints);
            }
            Err(_) => wal.fail(),
        }
        drop(wal);
        for callback in batch {
            let result = match &synced {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            };
            callback.io_completed(result);
            unflushed.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// The checkpointer thread: flushes sled (and fdatasyncs its file) once a journal segment is
/// closed, then removes the segments up to it, whose records sled now holds durably (each
/// was in sled's memory before it was journaled). Ends when the last `LogStore` clone, and
/// with it the queue's sender, is dropped.
pub(super) fn checkpoint(
    db: &sled::Db,
    file: &File,
    stats: &StorageStats,
    lies: bool,
    wal_dir: &Path,
    closed: &std::sync::mpsc::Receiver<u64>,
    checkpointed: &tokio::sync::watch::Sender<u64>,
) {
    super::super::lowest_priority();
    while let Ok(first) = closed.recv() {
        let through = closed.try_iter().fold(first, u64::max);
        let done = flush_and_sync(db, file, stats, lies)
            .and_then(|()| wal::remove_through(wal_dir, through));
        match done {
            Ok(()) => {
                checkpointed.send_modify(|n| *n += 1);
            }
            Err(error) => tracing::warn!(%error, "checkpointing the log: its journal is kept"),
        }
    }
}
