//! Where the exactly-once table keeps its records: in the state's archive (on disk, on a
//! node), in chunks of [`CHUNK`] records in the order they were remembered, written once when
//! full and never changed. The heap holds the chunk being filled, a compact index from a key
//! to its chunk (8 bytes a record), the outcomes of waits decided after their chunk was
//! written, and where the window has got to; nothing else per record.
//!
//! A retry (rare) reads its record's chunk; a new request id (every write) is answered by the
//! index alone; the window forgets records in order, from the oldest chunk, which it keeps
//! decoded until it has gone through it. A copy of the table taken for a snapshot holds the
//! chunks written by then and its own copy of the rest, so it reads the table as it was while
//! the table goes on; chunks the window has passed leave the archive after a snapshot
//! ([`crate::machine::Forgotten`]).

mod live;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::index::{prefix, At, Index, LOW_BITS};
use super::{Digest128, Remembered, Ticket};
use crate::archive::{chunk_key, copy_chunks, read_chunk, Archive, MemArchive, Space};
use crate::policy::DEDUP_WINDOW_MS;

pub(crate) use live::{DedupLoaded, DedupWriting};

/// Records per chunk: written to the archive at once, read whole by a retry. About 2 KiB:
/// sled keeps far more than its cache of values much larger than that resident (measured:
/// 70 KB values took 1.7 times their size in memory, 2 KB values 40 MiB for 140 MB).
pub const CHUNK: usize = 16;

/// A record as a chunk holds it: with its key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rec {
    key: Digest128,
    record: Remembered,
}

/// What the index holds of a chunk's sequence number: its low 24 bits. The live chunks (ten
/// minutes of records) span far fewer than 2^24 numbers (that many would be 268 million
/// records, 450,000 a second), so the low bits name one of them ([`Dedup::chunk_of`]).
fn low(seq: u64) -> u32 {
    (seq & LOW) as u32
}

const LOW: u64 = (1 << LOW_BITS) - 1;

/// Whether chunk number `seq` is one never used: one whose low 32 bits are all ones (an
/// earlier index marked shared prefixes so; the numbering stays what every release wrote).
fn unused(seq: u64) -> bool {
    seq as u32 == u32::MAX
}

/// The exactly-once table (see the module's doc).
pub struct Dedup {
    archive: Arc<dyn Archive>,
    /// Where each live key's record is; None in a snapshot's copy, which is only read whole.
    index: Option<Arc<Index>>,
    /// The chunk being filled, and its sequence number; every lower one is in the archive.
    open: Arc<Vec<Rec>>,
    open_seq: u64,
    /// Outcomes of waits decided after their record was written.
    resolved: imbl::OrdMap<Digest128, Arc<Remembered>>,
    /// The window's place: records before (chunk, position) are forgotten. A chunk being
    /// gone through is kept decoded here.
    cursor: (u64, usize),
    oldest: Option<(u64, Arc<Vec<Rec>>)>,
    /// The lease-clock instant the window was last moved to: a record remembered at `at_ms`
    /// is forgotten once `at_ms + window <= now` (saturating, as formats up to 8 did).
    pruned_at: Option<u64>,
    /// How many records are remembered, and what they cost.
    len: u64,
    bytes: u64,
}

impl Default for Dedup {
    fn default() -> Self {
        Dedup::in_archive(Arc::new(MemArchive::default()))
    }
}

impl std::fmt::Debug for Dedup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedup")
            .field("open_seq", &self.open_seq)
            .field("cursor", &self.cursor)
            .field("pruned_at", &self.pruned_at)
            .field("len", &self.len)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// Two tables are equal when they remember the same records in the same order, wherever
/// they keep them.
impl PartialEq for Dedup {
    fn eq(&self, other: &Self) -> bool {
        let records = |d: &Dedup| {
            let mut all = Vec::new();
            d.each(|at_ms, key, record| {
                all.push((at_ms, *key, record.clone()));
                true
            });
            all
        };
        self.bytes == other.bytes && self.len == other.len && records(self) == records(other)
    }
}

impl Eq for Dedup {}

/// A change of one principal's remembered bytes, for its quota.
pub type Charge<'a> = (&'a str, i64);

impl Dedup {
    /// An empty table kept in `archive`.
    pub(crate) fn in_archive(archive: Arc<dyn Archive>) -> Dedup {
        Dedup {
            archive,
            index: Some(Arc::default()),
            open: Arc::default(),
            open_seq: 0,
            resolved: imbl::OrdMap::new(),
            cursor: (0, 0),
            oldest: None,
            pruned_at: None,
            len: 0,
            bytes: 0,
        }
    }

    /// The table as a snapshot reads it: the same records, no index (O(1)). It shares the
    /// archive, and reads only what was written before it: never applied to (`State` is not
    /// `Clone`, and this is the only copy).
    pub(crate) fn snapshot_copy(&self) -> Dedup {
        Dedup {
            archive: self.archive.clone(),
            index: None,
            open: self.open.clone(),
            open_seq: self.open_seq,
            resolved: self.resolved.clone(),
            cursor: self.cursor,
            oldest: self.oldest.clone(),
            pruned_at: self.pruned_at,
            len: self.len,
            bytes: self.bytes,
        }
    }

    /// A table that starts numbering its chunks at `seq` (tests of the numbering's wrap).
    #[cfg(test)]
    pub(super) fn numbered_from(seq: u64) -> Dedup {
        Dedup {
            open_seq: seq,
            cursor: (seq, 0),
            ..Dedup::default()
        }
    }

    /// The chunk of number `seq`: the one being filled, the oldest (kept decoded), or one
    /// read from the archive. A chunk the table still reads that the archive does not hold is
    /// a broken archive: nothing can be answered from it ([`crate::archive::read_chunk`]).
    fn read_chunk(&self, seq: u64) -> Arc<Vec<Rec>> {
        if seq == self.open_seq {
            return self.open.clone();
        }
        if let Some((at, chunk)) = &self.oldest {
            if *at == seq {
                return chunk.clone();
            }
        }
        if unused(seq) {
            return Arc::default();
        }
        Arc::new(read_chunk(&*self.archive, Space::ExactlyOnce, seq))
    }

    /// The live chunk whose number has low bits `low`.
    fn chunk_of(&self, low: u32) -> u64 {
        self.cursor.0 + (u64::from(low.wrapping_sub(self.cursor.0 as u32)) & LOW)
    }

    /// The live record of `key` and the chunk that holds it, if remembered.
    fn find(&self, key: &Digest128) -> Option<(u64, Rec)> {
        let Some(index) = &self.index else {
            // A snapshot's copy: read the table through.
            let mut found = None;
            self.each_rec(|seq, rec| {
                if rec.key == *key {
                    found = Some((seq, rec.clone()));
                }
                true
            });
            return found;
        };
        let seq = self.chunk_of(index.get(key)?);
        let chunk = self.read_chunk(seq);
        let start = if seq == self.cursor.0 {
            self.cursor.1
        } else {
            0
        };
        let rec = chunk.get(start..)?.iter().rev().find(|r| r.key == *key)?;
        Some((seq, rec.clone()))
    }

    /// The record of `key` as it stands (a decided wait's outcome replacing the first), if
    /// remembered.
    pub(super) fn record(&self, key: &Digest128) -> Option<Remembered> {
        let (_, rec) = self.find(key)?;
        Some(self.current(&rec))
    }

    fn current(&self, rec: &Rec) -> Remembered {
        match self.resolved.get(&rec.key) {
            Some(resolved) => (**resolved).clone(),
            None => rec.record.clone(),
        }
    }

    /// Visits the live records in the order they were remembered, with their chunk.
    fn each_rec(&self, mut visit: impl FnMut(u64, &Rec) -> bool) {
        let (first_seq, first_pos) = self.cursor;
        for seq in first_seq..=self.open_seq {
            let chunk = self.read_chunk(seq);
            let start = if seq == first_seq { first_pos } else { 0 };
            for rec in chunk.get(start..).unwrap_or_default() {
                if !visit(seq, rec) {
                    return;
                }
            }
        }
    }

    /// Visits the live records, as they stand, in the order they were remembered.
    pub(super) fn each(&self, mut visit: impl FnMut(u64, &Digest128, &Remembered) -> bool) {
        self.each_rec(|_, rec| {
            let record = self.current(rec);
            visit(record.at_ms, &rec.key, &record)
        });
    }

    /// Records `record`, of a new request; returns what it costs its principal.
    pub(super) fn add(&mut self, ticket: Ticket, record: Remembered) -> i64 {
        let cost = record.cost();
        let seq = low(self.open_seq);
        if let Some(index) = &mut self.index {
            Arc::make_mut(index).insert(&ticket.key, seq, ticket.sharing);
        }
        Arc::make_mut(&mut self.open).push(Rec {
            key: ticket.key,
            record,
        });
        if self.open.len() >= CHUNK {
            let bytes = postcard::to_allocvec(&*self.open).unwrap_or_default();
            self.archive
                .insert(Space::ExactlyOnce, &chunk_key(self.open_seq), &bytes);
            if self.cursor.0 == self.open_seq {
                self.oldest = Some((self.open_seq, self.open.clone()));
            }
            self.open = Arc::default();
            self.open_seq += 1;
            if unused(self.open_seq) {
                self.open_seq += 1;
            }
        }
        self.len += 1;
        self.bytes += cost;
        cost as i64
    }

    /// The chunk and live key a new key's prefix already stands for, if another's: what
    /// [`Dedup::add`] needs to keep both.
    pub(super) fn sharing(&self, key: &Digest128) -> Option<(Digest128, u32)> {
        let index = self.index.as_ref()?;
        let At::Chunk(low) = index.at(key)? else {
            return None;
        };
        let chunk = self.read_chunk(self.chunk_of(low));
        let other = chunk.iter().rev().find(|r| prefix(&r.key) == prefix(key))?;
        (other.key != *key).then_some((other.key, low))
    }

    /// Replaces `before`, the live record of `key` ([`Dedup::record`]), by `record` (a wait's
    /// outcome); returns the change of cost.
    pub(super) fn replace(
        &mut self,
        key: &Digest128,
        before: &Remembered,
        record: Remembered,
    ) -> i64 {
        let change = record.cost() as i64 - before.cost() as i64;
        self.resolved.insert(*key, Arc::new(record));
        self.bytes = (self.bytes as i64 + change) as u64;
        change
    }

    /// Forgets what is older than the window at `now_ms`, telling `charge` whose bytes it
    /// freed.
    pub(crate) fn prune(&mut self, now_ms: u64, mut charge: impl FnMut(Charge<'_>)) {
        if self.pruned_at.is_some_and(|at| at >= now_ms) {
            return;
        }
        self.pruned_at = Some(now_ms);
        loop {
            let (seq, pos) = self.cursor;
            let chunk = self.read_chunk(seq);
            if seq != self.open_seq && self.oldest.as_ref().is_none_or(|(at, _)| *at != seq) {
                // Kept decoded while the window goes through it.
                self.oldest = Some((seq, chunk.clone()));
            }
            let Some(rec) = chunk.get(pos) else {
                if seq >= self.open_seq {
                    return;
                }
                // Gone through: the next chunk.
                self.cursor = (seq + 1, 0);
                self.oldest = None;
                continue;
            };
            if !self.in_window(rec.record.at_ms) {
                let record = self.current(rec);
                self.len -= 1;
                self.bytes -= record.cost();
                charge((&record.principal, -(record.cost() as i64)));
                self.resolved.remove(&rec.key);
                if let Some(index) = &mut self.index {
                    Arc::make_mut(index).remove(&rec.key, low(seq));
                }
                self.cursor = (seq, pos + 1);
                continue;
            }
            return;
        }
    }

    /// Whether a record remembered at `at_ms` is still in the window.
    fn in_window(&self, at_ms: u64) -> bool {
        self.pruned_at
            .is_none_or(|now| at_ms.saturating_add(DEDUP_WINDOW_MS) > now)
    }

    /// Counts the records and their bytes again (a loaded snapshot), telling `charge` each
    /// record's principal.
    pub(crate) fn recount(&mut self, mut charge: impl FnMut(Charge<'_>)) {
        let (mut len, mut bytes) = (0, 0);
        self.each(|_, _, record| {
            len += 1;
            bytes += record.cost();
            charge((&record.principal, record.cost() as i64));
            true
        });
        self.len = len;
        self.bytes = bytes;
    }

    /// Moves the table into `archive` (empty: a node's own, on disk): the chunks it still
    /// reads go there.
    pub(crate) fn move_into(&mut self, archive: Arc<dyn Archive>) {
        let seqs = (self.cursor.0..self.open_seq).filter(|seq| !unused(*seq));
        copy_chunks(&*self.archive, &*archive, Space::ExactlyOnce, seqs);
        self.archive = archive;
    }

    /// The number below which the table reads no chunk: what it has gone through leaves the
    /// archive once no older copy reads it ([`crate::machine::Forgotten`]).
    pub(crate) fn forgotten_below(&self) -> u64 {
        self.cursor.0
    }

    /// Removes from the archive the chunks this table has gone through (tests; a node does it
    /// through [`crate::machine::Forgotten`]).
    #[cfg(test)]
    pub fn remove_forgotten(&self) {
        crate::archive::remove_chunks_below(
            &*self.archive,
            Space::ExactlyOnce,
            self.forgotten_below(),
        );
    }

    /// A table of records in the order they were remembered.
    pub(super) fn of_ordered(records: impl IntoIterator<Item = (Digest128, Remembered)>) -> Dedup {
        let mut dedup = Dedup::default();
        for (key, record) in records {
            let sharing = dedup.sharing(&key);
            let ticket = Ticket {
                key,
                op: record.op,
                sharing,
            };
            dedup.add(ticket, record);
        }
        dedup
    }

    /// The cost of all records, in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cfg(test)]
    pub(super) fn set_bytes(&mut self, bytes: u64) {
        self.bytes = bytes;
    }
}
