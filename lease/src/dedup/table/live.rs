//! The exactly-once table in a snapshot of format 9: the open chunk, the decided waits and
//! where the window is, not the records the archive holds (those travel as the archive's own
//! entries). Loading builds the index again from the chunks, and counts the records and what
//! each principal's cost as it goes.

use std::collections::BTreeMap;
use std::ops::Bound;
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
    /// A written chunk is decoded borrowing its bytes: only the key, whose record it is and
    /// what the record costs are read.
    pub(crate) fn index_again(&mut self) -> Result<Vec<(Name, u64)>, String> {
        let (first_seq, first_pos) = self.cursor;
        if first_seq > self.open_seq || unused(self.open_seq) || self.open.len() > CHUNK {
            return Err(format!(
                "the exactly-once table's place {first_seq} is past its open chunk {}",
                self.open_seq
            ));
        }
        let mut tally = Tally::default();
        // Sized once for every record the chunks can hold, not doubled on the way.
        if let Some(index) = &mut self.index {
            let chunks = (self.open_seq - first_seq + 1) as usize;
            Arc::make_mut(index).reserve(chunks.saturating_mul(CHUNK));
        }
        let past = |seq| format!("the exactly-once table's place is past chunk {seq}");
        let broken = |seq| format!("exactly-once chunk {seq} does not decode");
        // The written chunks in one ordered pass over the archive, not a lookup each.
        let mut wanted = (first_seq..self.open_seq)
            .filter(|seq| !unused(*seq))
            .peekable();
        let mut failed = None;
        let archive = self.archive.clone();
        let (from, to) = (chunk_key(first_seq), chunk_key(self.open_seq));
        archive.scan(
            Space::ExactlyOnce,
            Bound::Included(&from[..]),
            Bound::Excluded(&to[..]),
            false,
            &mut |key, bytes| {
                let Some(&seq) = wanted.peek() else {
                    return false;
                };
                match key.cmp(&chunk_key(seq)[..]) {
                    // A number the table never used: passed.
                    std::cmp::Ordering::Less => return true,
                    // The chunk it reads is missing.
                    std::cmp::Ordering::Greater => {
                        failed = Some(broken(seq));
                        return false;
                    }
                    std::cmp::Ordering::Equal => {}
                }
                wanted.next();
                let start = if seq == first_seq { first_pos } else { 0 };
                let chunk = postcard::from_bytes::<Vec<RecSeen>>(bytes).ok();
                let Some(chunk) = chunk else {
                    failed = Some(broken(seq));
                    return false;
                };
                let Some(records) = chunk.get(start..) else {
                    failed = Some(past(seq));
                    return false;
                };
                for rec in records {
                    self.index_one(&rec.key, seq, rec.principal, rec.kept.len(), &mut tally);
                }
                true
            },
        );
        if let Some(seq) = wanted.next().filter(|_| failed.is_none()) {
            failed = Some(broken(seq));
        }
        if let Some(failed) = failed {
            return Err(failed);
        }
        let open = self.open.clone();
        let start = if self.open_seq == first_seq {
            first_pos
        } else {
            0
        };
        for rec in open.get(start..).ok_or_else(|| past(self.open_seq))? {
            let (key, record) = (&rec.key, &rec.record);
            self.index_one(
                key,
                self.open_seq,
                &record.principal,
                record.kept.len(),
                &mut tally,
            );
        }
        self.len = tally.len;
        self.bytes = tally.bytes;
        Ok(tally.by_principal())
    }

    /// [`Dedup::index_again`] for one record of chunk `seq`: `principal`'s, its outcome of
    /// `kept` bytes unless a decided wait replaced it.
    fn index_one(
        &mut self,
        key: &Digest128,
        seq: u64,
        principal: &str,
        kept: usize,
        tally: &mut Tally,
    ) {
        let sharing = self.sharing(key);
        if let Some(index) = &mut self.index {
            Arc::make_mut(index).insert(key, low(seq), sharing);
        }
        let (principal, cost) = match self.resolved.get(key) {
            Some(resolved) => (resolved.principal.as_str(), resolved.cost()),
            None => (principal, Remembered::cost_of(kept)),
        };
        tally.add(principal, cost);
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

/// A record of a written chunk as [`Dedup::index_again`] reads it: [`Rec`]'s fields in
/// their order, borrowed from the chunk's bytes (postcard writes an outcome's bytes as
/// their length and the bytes, whether a slice or a sequence of `u8`).
#[derive(Deserialize)]
struct RecSeen<'a> {
    key: Digest128,
    #[serde(borrow)]
    principal: &'a str,
    _op: Digest128,
    kept: &'a [u8],
    _at_ms: u64,
}

/// The records counted, and what each principal's cost (records come in runs of one
/// principal's: the last one is added to without a lookup).
#[derive(Default)]
struct Tally {
    len: u64,
    bytes: u64,
    usage: BTreeMap<Name, u64>,
    run: Option<(Name, u64)>,
}

impl Tally {
    fn add(&mut self, principal: &str, cost: u64) {
        self.len += 1;
        self.bytes += cost;
        // Records converted from format 4 belong to nobody: they count in the total.
        if principal.is_empty() {
            return;
        }
        match &mut self.run {
            Some((name, bytes)) if name == principal => *bytes += cost,
            run => {
                if let Some((name, bytes)) = run.replace((principal.into(), cost)) {
                    *self.usage.entry(name).or_default() += bytes;
                }
            }
        }
    }

    fn by_principal(mut self) -> Vec<(Name, u64)> {
        if let Some((name, bytes)) = self.run.take() {
            *self.usage.entry(name).or_default() += bytes;
        }
        self.usage.into_iter().collect()
    }
}
