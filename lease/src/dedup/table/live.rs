//! The exactly-once table in a snapshot of format 9: the open chunk, the decided waits and
//! where the window is, not the records the archive holds (those travel as the archive's own
//! entries). Loading builds the index again from the chunks, and counts the records and what
//! each principal's cost as it goes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::{chunk_key, low, unused, Dedup, Rec, CHUNK};
use crate::archive::{Archive, Space};
use crate::dedup::{Digest128, Remembered};
use crate::types::Name;

/// The table's own fields. `O` is the open chunk, `R` the decided waits: borrowed to write,
/// owned when read.
#[derive(Serialize, Deserialize)]
pub(crate) struct DedupParts<O, R> {
    open: O,
    open_seq: u64,
    resolved: R,
    cursor: (u64, u64),
    pruned_at: Option<u64>,
}

/// The decided waits, written from the table's map without a copy.
pub(crate) struct ResolvedList<'a>(&'a imbl::OrdMap<Digest128, Arc<Remembered>>);

impl Serialize for ResolvedList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|(key, record)| (key, &**record)))
    }
}

/// The table as format 9 writes it.
pub(crate) type DedupWriting<'a> = DedupParts<&'a [Rec], ResolvedList<'a>>;
/// The table as format 9 reads it.
pub(crate) type DedupLoaded = DedupParts<Vec<Rec>, Vec<(Digest128, Remembered)>>;

impl Dedup {
    pub(crate) fn live(&self) -> DedupWriting<'_> {
        DedupParts {
            open: &self.open,
            open_seq: self.open_seq,
            resolved: ResolvedList(&self.resolved),
            cursor: (self.cursor.0, self.cursor.1 as u64),
            pruned_at: self.pruned_at,
        }
    }

    /// The table a format-9 snapshot wrote, reading its chunks from `archive`; not usable
    /// before [`Dedup::index_again`] has checked it.
    pub(crate) fn from_live(parts: DedupLoaded, archive: Arc<dyn Archive>) -> Dedup {
        Dedup {
            open: Arc::new(parts.open),
            open_seq: parts.open_seq,
            resolved: parts
                .resolved
                .into_iter()
                .map(|(key, record)| (key, Arc::new(record)))
                .collect(),
            cursor: (
                parts.cursor.0,
                usize::try_from(parts.cursor.1).unwrap_or(usize::MAX),
            ),
            pruned_at: parts.pruned_at,
            ..Dedup::in_archive(archive)
        }
    }

    /// Checks a table just read (its place within its chunks, every chunk there and
    /// decoding), builds the index from the live records in the order they were remembered,
    /// as [`Dedup::add`] did, and counts them: returns what each principal's records cost.
    pub(crate) fn index_again(&mut self) -> Result<Vec<(Name, u64)>, String> {
        let (first_seq, first_pos) = self.cursor;
        if first_seq > self.open_seq || unused(self.open_seq) || self.open.len() > CHUNK {
            return Err(format!(
                "the exactly-once table's place {first_seq} is past its open chunk {}",
                self.open_seq
            ));
        }
        let (mut len, mut bytes) = (0, 0);
        let mut usage = BTreeMap::<Name, u64>::new();
        // Sized once for every record the chunks can hold, not doubled on the way.
        if let Some(index) = &mut self.index {
            let chunks = (self.open_seq - first_seq + 1) as usize;
            Arc::make_mut(index).reserve(chunks.saturating_mul(CHUNK));
        }
        for seq in (first_seq..=self.open_seq).filter(|seq| !unused(*seq)) {
            let chunk = if seq == self.open_seq {
                self.open.clone()
            } else {
                let bytes = self.archive.get(Space::ExactlyOnce, &chunk_key(seq));
                let decoded = bytes.and_then(|b| postcard::from_bytes::<Vec<Rec>>(&b).ok());
                Arc::new(decoded.ok_or(format!("exactly-once chunk {seq} does not decode"))?)
            };
            let start = if seq == first_seq { first_pos } else { 0 };
            let Some(live) = chunk.get(start..) else {
                return Err(format!(
                    "the exactly-once table's place is past chunk {seq}"
                ));
            };
            for rec in live {
                let sharing = self.sharing(&rec.key);
                if let Some(index) = &mut self.index {
                    Arc::make_mut(index).insert(&rec.key, low(seq), sharing);
                }
                let record = self.current(rec);
                len += 1;
                bytes += record.cost();
                // Records converted from format 4 belong to nobody: they count in the total.
                if !record.principal.is_empty() {
                    *usage.entry(record.principal).or_default() += record.cost();
                }
            }
        }
        self.len = len;
        self.bytes = bytes;
        Ok(usage.into_iter().collect())
    }

    pub(crate) fn archive(&self) -> &dyn Archive {
        &*self.archive
    }

    pub(crate) fn archive_shared(&self) -> Arc<dyn Archive> {
        self.archive.clone()
    }

    /// The number the next chunk written gets: every key the table wrote is below it.
    pub(crate) fn next_number(&self) -> u64 {
        self.open_seq
    }

    /// The numbers of the written chunks the table reads, in order: what a snapshot of
    /// format 9 sends of it.
    pub(crate) fn archived_chunks(&self) -> Vec<u64> {
        (self.cursor.0..self.open_seq)
            .filter(|seq| !unused(*seq))
            .collect()
    }
}
