//! Where the retained events live: one log of every resource's events in delivery order
//! ((revision, resource, seq), the order watches deliver in), kept in the state's archive (on
//! disk, on a node) in chunks of at least [`CHUNK`] events, written once when full and never
//! changed. A chunk ends with a whole revision, so all the events of one entry are in one
//! chunk and the chunk of a revision is found from the first revisions of the chunks (8 bytes
//! a chunk on the heap). Each resource keeps on the heap only where its events are and what
//! they cost ([`Kept`], 16 bytes an event); the events themselves are read back from here.
//!
//! The global bound drops the oldest events first, from the log's cursor, which keeps the
//! chunk it is going through decoded; an event the per-resource bound dropped earlier is no
//! longer its resource's, and the cursor passes it. A copy of the log taken for a snapshot
//! holds the chunks written by then and its own copy of the rest, so it reads the log as it
//! was while apply writes past it; chunks the cursor has passed leave the archive after a
//! snapshot ([`crate::machine::Forgotten`]).

mod live;

use std::cell::RefCell;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use imbl::OrdMap;

use serde::{Deserialize, Serialize};

pub(crate) use live::{LogLoaded, LogWriting};

use super::{Event, Position};
use crate::archive::{chunk_key, copy_chunks, read_chunk, Archive, MemArchive, Space};
use crate::types::Name;

/// Events per chunk, at least (a chunk ends with a whole revision). About 3 KiB: sled keeps
/// values much larger than that resident (see `dedup::table`).
pub const CHUNK: usize = 16;

/// Where one retained event of a resource is, and what it costs ([`super::event_cost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    pub revision: u64,
    pub seq: u32,
    pub cost: u32,
}

impl Kept {
    pub fn position(&self) -> (u64, u32) {
        (self.revision, self.seq)
    }
}

/// An event as the log holds it: with its resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logged {
    pub resource: Name,
    pub event: Event,
}

impl Logged {
    fn order(&self) -> (u64, &str, u32) {
        (self.event.revision, self.resource.as_str(), self.event.seq)
    }
}

type Chunk = Arc<Vec<Logged>>;

/// A written chunk the log still reads: its number, and how many events in it a resource
/// still keeps.
#[derive(Clone, Copy, Debug)]
struct Sealed {
    seq: u64,
    live: u32,
}

/// The event log (see the module's doc).
pub struct EventLog {
    archive: Arc<dyn Archive>,
    /// The written chunks that hold an event a resource keeps, from the cursor's on, by their
    /// first revision. A chunk whose events are all dropped leaves (its events may be
    /// anywhere: a resource of an old event, kept, does not hold back the others).
    sealed: OrdMap<u64, Sealed>,
    /// The chunk being filled, its number, and how many of its events are kept; every lower
    /// number is written (or gone). Its events are in delivery order but for the revision
    /// being applied, sorted by [`EventLog::settle`] (`sorted` is how many are).
    open: Chunk,
    open_seq: u64,
    open_live: u32,
    sorted: usize,
    /// The cursor: the events of the first chunk (the open one when none is written) before
    /// this position are passed. That chunk is kept decoded here.
    cursor: usize,
    oldest: Option<(u64, Chunk)>,
    /// How many events are retained (their resources' own), and what they cost.
    len: u64,
    bytes: u64,
    /// Written chunks this log no longer reads: removed after the next snapshot.
    gone: Arc<Mutex<Vec<u64>>>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::in_archive(Arc::new(MemArchive::default()))
    }
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog")
            .field("open_seq", &self.open_seq)
            .field("sealed", &self.sealed.len())
            .field("cursor", &self.cursor)
            .field("len", &self.len)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl EventLog {
    /// An empty log kept in `archive`.
    pub(crate) fn in_archive(archive: Arc<dyn Archive>) -> EventLog {
        EventLog {
            archive,
            sealed: OrdMap::new(),
            open: Arc::default(),
            open_seq: 0,
            open_live: 0,
            sorted: 0,
            cursor: 0,
            oldest: None,
            len: 0,
            bytes: 0,
            gone: Arc::default(),
        }
    }

    /// The log as a snapshot reads it: the same events (O(1)). It shares the archive and
    /// reads only what was written before it; never appended to.
    pub(crate) fn snapshot_copy(&self) -> EventLog {
        EventLog {
            archive: self.archive.clone(),
            sealed: self.sealed.clone(),
            open: self.open.clone(),
            open_seq: self.open_seq,
            open_live: self.open_live,
            sorted: self.sorted,
            cursor: self.cursor,
            oldest: self.oldest.clone(),
            len: self.len,
            bytes: self.bytes,
            gone: self.gone.clone(),
        }
    }

    /// How many chunks the log reads (written and open).
    #[cfg(test)]
    pub fn chunks(&self) -> usize {
        self.sealed.len() + 1
    }

    /// How many events the chunks the log reads say are kept (tests: equals [`EventLog::len`]).
    pub fn live_in_chunks(&self) -> u64 {
        let sealed: u64 = self.sealed.values().map(|s| u64::from(s.live)).sum();
        sealed + u64::from(self.open_live)
    }

    /// Events retained, and what they cost.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends `event` (numbered, of `resource`): a resource now keeps it.
    pub(crate) fn append(&mut self, resource: &str, event: Event, cost: u64) {
        let revision = event.revision;
        if self
            .open
            .last()
            .is_some_and(|l| l.event.revision < revision)
        {
            self.settle();
            if self.open.len() >= CHUNK {
                self.seal();
            }
        }
        Arc::make_mut(&mut self.open).push(Logged {
            resource: Name::from(resource),
            event,
        });
        self.open_live += 1;
        self.len += 1;
        self.bytes += cost;
    }

    /// Puts the open chunk's newest revision in delivery order: an entry records its events
    /// in its own order, a revision's events sort by resource. Once per revision (at the
    /// next, and at the end of each entry), never before the cursor.
    pub(crate) fn settle(&mut self) {
        let len = self.open.len();
        let Some(newest) = self.open.last().map(|l| l.event.revision) else {
            return;
        };
        if self.sorted >= len {
            return;
        }
        // What is not sorted is of the newest revision: sorted with that revision's others.
        let floor = if self.sealed.is_empty() {
            self.cursor
        } else {
            0
        };
        let mut from = self.sorted;
        while from > floor && self.open[from - 1].event.revision == newest {
            from -= 1;
        }
        let from = from.max(floor);
        Arc::make_mut(&mut self.open)[from..].sort_by(|a, b| a.order().cmp(&b.order()));
        self.sorted = len;
    }

    /// Writes the open chunk to the archive and opens the next.
    fn seal(&mut self) {
        let bytes = postcard::to_allocvec(&*self.open).unwrap_or_default();
        self.archive
            .insert(Space::Events, &chunk_key(self.open_seq), &bytes);
        if let Some(first) = self.open.first() {
            let sealed = Sealed {
                seq: self.open_seq,
                live: self.open_live,
            };
            if self.sealed.is_empty() {
                // The cursor's chunk: kept decoded.
                self.oldest = Some((self.open_seq, self.open.clone()));
            }
            self.sealed.insert(first.event.revision, sealed);
            if self.open_live == 0 {
                self.drop_chunk(first.event.revision);
            }
        }
        self.open = Arc::default();
        self.open_seq += 1;
        self.open_live = 0;
        self.sorted = 0;
    }

    /// An event a resource no longer keeps (a bound dropped it): the event at `revision`.
    pub(crate) fn dropped(&mut self, revision: u64, cost: u64) {
        self.len = self.len.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(cost);
        if self
            .open
            .first()
            .is_some_and(|l| l.event.revision <= revision)
        {
            self.open_live = self.open_live.saturating_sub(1);
            return;
        }
        let Some((first, sealed)) = self.sealed.get_prev_mut(&revision) else {
            return;
        };
        sealed.live = sealed.live.saturating_sub(1);
        if sealed.live == 0 {
            let first = *first;
            self.drop_chunk(first);
        }
    }

    /// The written chunk that starts at `first` holds nothing kept: the log no longer reads
    /// it. Were it the cursor's, the cursor moves to the next.
    fn drop_chunk(&mut self, first: u64) {
        let at_cursor = self.sealed.get_min().is_some_and(|(f, _)| *f == first);
        if let Some(sealed) = self.sealed.remove(&first) {
            self.gone
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(sealed.seq);
        }
        if at_cursor {
            self.cursor = 0;
            self.oldest = None;
        }
    }

    /// The chunk of number `seq`: the open one, the cursor's (kept decoded), or one read
    /// from the archive.
    fn read_chunk(&self, seq: u64) -> Chunk {
        if seq == self.open_seq {
            return self.open.clone();
        }
        if let Some((at, chunk)) = &self.oldest {
            if *at == seq {
                return chunk.clone();
            }
        }
        Arc::new(read_chunk(&*self.archive, Space::Events, seq))
    }

    /// The number of the chunk that holds the events of `revision` (if a resource keeps
    /// any), or else the first after it.
    fn chunk_at(&self, revision: u64) -> u64 {
        if self
            .open
            .first()
            .is_some_and(|l| l.event.revision <= revision)
        {
            return self.open_seq;
        }
        match self.sealed.get_prev(&revision) {
            Some((_, sealed)) => sealed.seq,
            None => self.sealed.get_min().map_or(self.open_seq, |(_, s)| s.seq),
        }
    }

    /// The numbers of the chunks the log reads from `seq` on, in order, the open one last.
    fn chunks_from(&self, seq: u64) -> impl Iterator<Item = u64> + '_ {
        let written = self
            .sealed
            .values()
            .map(|s| s.seq)
            .filter(move |s| *s >= seq);
        written.chain(std::iter::once(self.open_seq))
    }

    /// The number of the cursor's chunk.
    fn cursor_chunk(&self) -> u64 {
        self.sealed.get_min().map_or(self.open_seq, |(_, s)| s.seq)
    }

    /// A reader of single events, which keeps the chunk it read last.
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            log: self,
            last: RefCell::new(None),
        }
    }

    /// Visits the log's events from `start` on, in delivery order, until `visit` returns
    /// false: those of every resource, including events a resource no longer keeps (the
    /// caller knows which it keeps).
    pub fn visit_from(&self, start: Bound<Position>, mut visit: impl FnMut(&Logged) -> bool) {
        let after = |l: &Logged| match &start {
            Bound::Included((r, n, s)) => l.order() >= (*r, n.as_str(), *s),
            Bound::Excluded((r, n, s)) => l.order() > (*r, n.as_str(), *s),
            Bound::Unbounded => true,
        };
        let first = match &start {
            Bound::Included((r, ..)) | Bound::Excluded((r, ..)) => self.chunk_at(*r),
            Bound::Unbounded => self.cursor_chunk(),
        };
        let cursor_chunk = self.cursor_chunk();
        for seq in self.chunks_from(first) {
            let chunk = self.read_chunk(seq);
            let from = if seq == cursor_chunk { self.cursor } else { 0 };
            let rest = chunk.get(from..).unwrap_or_default();
            let skip = rest.partition_point(|l| !after(l));
            for logged in &rest[skip..] {
                if !visit(logged) {
                    return;
                }
            }
        }
    }

    /// Takes the oldest event past the cursor that `kept` says a resource keeps, passing
    /// those no resource keeps; None when none is left. The caller drops it
    /// ([`EventLog::dropped`]).
    pub(crate) fn pop_oldest(&mut self, kept: impl Fn(&Logged) -> bool) -> Option<Logged> {
        loop {
            let seq = self.cursor_chunk();
            if seq == self.open_seq && self.sorted < self.open.len() {
                // The revision being applied: in delivery order first.
                self.settle();
            }
            let chunk = self.read_chunk(seq);
            if seq != self.open_seq && self.oldest.as_ref().is_none_or(|(at, _)| *at != seq) {
                // Kept decoded while the cursor goes through it.
                self.oldest = Some((seq, chunk.clone()));
            }
            let Some(logged) = chunk.get(self.cursor) else {
                if seq == self.open_seq {
                    return None;
                }
                // Gone through: the next chunk.
                if let Some((first, _)) = self.sealed.get_min() {
                    let first = *first;
                    self.drop_chunk(first);
                }
                continue;
            };
            self.cursor += 1;
            if kept(logged) {
                return Some(logged.clone());
            }
        }
    }

    /// Moves the log into `archive` (empty: a node's own, on disk): the chunks it still
    /// reads go there.
    pub(crate) fn move_into(&mut self, archive: Arc<dyn Archive>) {
        let seqs: Vec<u64> = self.sealed.values().map(|s| s.seq).collect();
        copy_chunks(&*self.archive, &*archive, Space::Events, seqs.into_iter());
        self.archive = archive;
        self.gone = Arc::default();
    }

    /// The numbers of the written chunks the log stopped reading since the last call: they
    /// leave the archive once no copy of the log reads them ([`crate::machine::Forgotten`]).
    pub(crate) fn take_gone(&self) -> Vec<u64> {
        std::mem::take(&mut *self.gone.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Reads single events of the log, keeping the chunk it read last: a resource's events are
/// often in the same chunk, and a snapshot reads resources in name order.
pub struct Reader<'a> {
    log: &'a EventLog,
    last: RefCell<Option<(u64, Chunk)>>,
}

impl Reader<'_> {
    /// The event of `resource` at `position`, if the log holds it.
    pub fn get(&self, resource: &str, (revision, seq): (u64, u32)) -> Option<Event> {
        let at = self.log.chunk_at(revision);
        let chunk = {
            let mut last = self.last.borrow_mut();
            match &*last {
                Some((seq, chunk)) if *seq == at => chunk.clone(),
                _ => {
                    let chunk = self.log.read_chunk(at);
                    *last = Some((at, chunk.clone()));
                    chunk
                }
            }
        };
        let wanted = (revision, resource, seq);
        // Sorted but for an entry whose events the cursor passed while it recorded more.
        let found = match chunk.binary_search_by(|l| l.order().cmp(&wanted)) {
            Ok(found) => found,
            Err(_) => chunk.iter().position(|l| l.order() == wanted)?,
        };
        Some(chunk[found].event.clone())
    }

    /// The events at `kept`, in its order (a resource's, or part of it).
    pub fn events<'k>(
        &'k self,
        resource: &'k str,
        kept: impl IntoIterator<Item = &'k Kept> + 'k,
    ) -> impl Iterator<Item = Event> + 'k {
        kept.into_iter()
            .filter_map(move |k| self.get(resource, k.position()))
    }
}
