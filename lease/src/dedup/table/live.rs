//! The exactly-once table in a snapshot of format 9: the open chunk, the decided waits and
//! where the window is, not the records the archive holds (those travel as the archive's own
//! entries). Loading builds the index again from the chunks.

use std::sync::Arc;

use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::{low, unused, Dedup, Rec};
use crate::archive::Archive;
use crate::dedup::{Digest128, Remembered};

/// The table's own fields. `O` is the open chunk, `R` the decided waits: borrowed to write,
/// owned when read.
#[derive(Serialize, Deserialize)]
pub(crate) struct DedupParts<O, R> {
    open: O,
    open_seq: u64,
    resolved: R,
    cursor: (u64, u64),
    pruned_at: Option<u64>,
    len: u64,
    bytes: u64,
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
            len: self.len,
            bytes: self.bytes,
        }
    }

    /// The table a format-9 snapshot wrote, reading its chunks from `archive` (which holds
    /// every chunk from the cursor's to the open one), its index built again.
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
            len: parts.len,
            bytes: parts.bytes,
            ..Dedup::in_archive(archive)
        }
    }

    /// Builds the index from the live records, in the order they were remembered, as
    /// [`Dedup::add`] did (a table just read, once its archive is known to hold its chunks).
    pub(crate) fn index_again(&mut self) {
        let (first_seq, first_pos) = self.cursor;
        for seq in first_seq..=self.open_seq {
            let chunk = self.read_chunk(seq);
            let start = if seq == first_seq { first_pos } else { 0 };
            for rec in chunk.get(start..).unwrap_or_default() {
                let sharing = self.sharing(&rec.key);
                if let Some(index) = &mut self.index {
                    Arc::make_mut(index).insert(&rec.key, low(seq), sharing);
                }
            }
        }
    }

    pub(crate) fn archive(&self) -> &dyn Archive {
        &*self.archive
    }

    /// The numbers of the written chunks the table reads, in order: what a snapshot of
    /// format 9 sends of it.
    pub(crate) fn archived_chunks(&self) -> impl Iterator<Item = u64> {
        (self.cursor.0..self.open_seq).filter(|seq| !unused(*seq))
    }
}
