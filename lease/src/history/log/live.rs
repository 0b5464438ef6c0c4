//! The event log in a snapshot of format 9: where its chunks are and the open one, not the
//! events the archive holds (those travel as the archive's own entries).

use std::sync::Arc;

use imbl::OrdMap;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::{EventLog, Logged, Sealed};
use crate::archive::{chunk_key, Archive, Space};

/// The log's own fields: its written chunks as (first revision, number, events kept), the
/// open chunk, and where the cursor and the counts are. `S` is the chunk list, `O` the open
/// chunk: borrowed to write, owned when read.
#[derive(Serialize, Deserialize)]
pub(crate) struct LogParts<S, O> {
    sealed: S,
    open: O,
    open_seq: u64,
    open_live: u32,
    sorted: u64,
    cursor: u64,
    len: u64,
    bytes: u64,
}

/// The written chunks, written from the log's map without a copy.
pub(crate) struct SealedList<'a>(&'a OrdMap<u64, Sealed>);

impl Serialize for SealedList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|(first, s)| (*first, s.seq, s.live)))
    }
}

/// The log as format 9 writes it.
pub(crate) type LogWriting<'a> = LogParts<SealedList<'a>, &'a [Logged]>;
/// The log as format 9 reads it.
pub(crate) type LogLoaded = LogParts<Vec<(u64, u64, u32)>, Vec<Logged>>;

impl EventLog {
    pub(crate) fn live(&self) -> LogWriting<'_> {
        LogParts {
            sealed: SealedList(&self.sealed),
            open: &self.open,
            open_seq: self.open_seq,
            open_live: self.open_live,
            sorted: self.sorted as u64,
            cursor: self.cursor as u64,
            len: self.len,
            bytes: self.bytes,
        }
    }

    /// The log a format-9 snapshot wrote, reading its chunks from `archive`.
    pub(crate) fn archive(&self) -> &dyn Archive {
        &*self.archive
    }

    pub(crate) fn archive_shared(&self) -> Arc<dyn Archive> {
        self.archive.clone()
    }

    pub(crate) fn from_live(parts: LogLoaded, archive: Arc<dyn Archive>) -> EventLog {
        let sealed = parts
            .sealed
            .into_iter()
            .map(|(first, seq, live)| (first, Sealed { seq, live }))
            .collect();
        let open = Arc::new(parts.open);
        let sorted = usize::try_from(parts.sorted)
            .unwrap_or(usize::MAX)
            .min(open.len());
        EventLog {
            sealed,
            open,
            open_seq: parts.open_seq,
            open_live: parts.open_live,
            sorted,
            cursor: usize::try_from(parts.cursor).unwrap_or(usize::MAX),
            len: parts.len,
            bytes: parts.bytes,
            ..EventLog::in_archive(archive)
        }
    }

    /// The number the next chunk written gets: every key the log wrote is below it.
    pub(crate) fn next_number(&self) -> u64 {
        self.open_seq
    }

    /// The numbers of the written chunks the log reads, in order: what a snapshot of format 9
    /// sends of it.
    pub(crate) fn archived_chunks(&self) -> Vec<u64> {
        self.sealed.values().map(|s| s.seq).collect()
    }

    /// Whether `value` is a chunk of events (an archive entry of a snapshot just read).
    pub(crate) fn decodes(value: &[u8]) -> bool {
        postcard::from_bytes::<Vec<Logged>>(value).is_ok()
    }

    /// Checks a log just read, its chunks known to decode: its cursor within the cursor's
    /// chunk, what the open one keeps within it, and the count of what all keep.
    pub(crate) fn check_loaded(&self) -> Result<(), String> {
        let cursor_chunk = match self.sealed.get_min() {
            Some((_, sealed)) => {
                let bytes = self.archive.get(Space::Events, &chunk_key(sealed.seq));
                let decoded = bytes.and_then(|b| postcard::from_bytes::<Vec<Logged>>(&b).ok());
                decoded.ok_or(format!("event chunk {} is missing or damaged", sealed.seq))?
            }
            None => self.open.to_vec(),
        };
        let open_live = usize::try_from(self.open_live).unwrap_or(usize::MAX);
        if self.cursor > cursor_chunk.len()
            || open_live > self.open.len()
            || self.live_in_chunks() != self.len
        {
            return Err("the event log's place or counts are not within its chunks".into());
        }
        Ok(())
    }
}
