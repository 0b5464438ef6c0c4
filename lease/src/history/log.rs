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
//! snapshot ([`EventLog::remove_forgotten`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Event, Position};
use crate::archive::{
    chunk_key, copy_chunks, read_chunk, remove_chunks_below, Archive, MemArchive, Space,
};
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

/// The event log (see the module's doc).
pub struct EventLog {
    archive: Arc<dyn Archive>,
    /// The first revision of each written chunk from the cursor's on.
    firsts: VecDeque<u64>,
    /// The chunk being filled, and its number; every lower one is in the archive.
    open: Chunk,
    open_seq: u64,
    /// The cursor: events before (chunk, position) are passed. The chunk it is in is kept
    /// decoded here.
    cursor: (u64, usize),
    oldest: Option<(u64, Chunk)>,
    /// How many events are retained (their resources' own), and what they cost.
    len: u64,
    bytes: u64,
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
            firsts: VecDeque::new(),
            open: Arc::default(),
            open_seq: 0,
            cursor: (0, 0),
            oldest: None,
            len: 0,
            bytes: 0,
        }
    }

    /// The log as a snapshot reads it: the same events (O(chunks)). It shares the archive
    /// and reads only what was written before it; never appended to.
    pub(crate) fn snapshot_copy(&self) -> EventLog {
        EventLog {
            archive: self.archive.clone(),
            firsts: self.firsts.clone(),
            open: self.open.clone(),
            open_seq: self.open_seq,
            cursor: self.cursor,
            oldest: self.oldest.clone(),
            len: self.len,
            bytes: self.bytes,
        }
    }

    /// Events retained, and what they cost.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends `event` (numbered, of `resource`): a resource now keeps it.
    pub(crate) fn append(&mut self, resource: &str, event: Event, cost: u64) {
        let revision = event.revision;
        if self.open.len() >= CHUNK
            && self
                .open
                .last()
                .is_some_and(|l| l.event.revision < revision)
        {
            self.seal();
        }
        let logged = Logged {
            resource: Name::from(resource),
            event,
        };
        // In delivery order: an entry records its events in its own order, a revision's
        // events sort by resource. Never before the cursor.
        let floor = if self.cursor.0 == self.open_seq {
            self.cursor.1
        } else {
            0
        };
        let open = Arc::make_mut(&mut self.open);
        let mut at = open.len();
        while at > floor && open[at - 1].order() > logged.order() {
            at -= 1;
        }
        open.insert(at, logged);
        self.kept(cost);
    }

    /// Writes the open chunk to the archive and opens the next.
    fn seal(&mut self) {
        let bytes = postcard::to_allocvec(&*self.open).unwrap_or_default();
        self.archive
            .insert(Space::Events, &chunk_key(self.open_seq), &bytes);
        if let Some(first) = self.open.first() {
            self.firsts.push_back(first.event.revision);
        }
        if self.cursor.0 == self.open_seq {
            self.oldest = Some((self.open_seq, self.open.clone()));
        }
        self.open = Arc::default();
        self.open_seq += 1;
    }

    /// An event a resource keeps (appended, or counted again on load).
    pub(crate) fn kept(&mut self, cost: u64) {
        self.len += 1;
        self.bytes += cost;
    }

    /// An event a resource no longer keeps (a bound dropped it).
    pub(crate) fn dropped(&mut self, cost: u64) {
        self.len = self.len.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(cost);
    }

    /// The chunk of number `seq`: the open one, the cursor's (kept decoded), or one read
    /// from the archive. A chunk the log still reads that the archive does not hold is a
    /// broken archive: nothing can be answered from it (a restart builds it again).
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

    /// The number of the chunk that holds the events of `revision`, or the first chunk after
    /// it; None if every chunk is older.
    fn chunk_at(&self, revision: u64) -> Option<u64> {
        if self
            .open
            .first()
            .is_some_and(|l| l.event.revision <= revision)
        {
            return Some(self.open_seq);
        }
        let after = self.firsts.partition_point(|first| *first <= revision);
        let seq = self.cursor.0 + after.saturating_sub(1) as u64;
        (seq <= self.open_seq).then_some(seq)
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
            Bound::Included((r, ..)) | Bound::Excluded((r, ..)) => {
                self.chunk_at(*r).unwrap_or(self.cursor.0)
            }
            Bound::Unbounded => self.cursor.0,
        };
        for seq in first.max(self.cursor.0)..=self.open_seq {
            let chunk = self.read_chunk(seq);
            let from = if seq == self.cursor.0 {
                self.cursor.1
            } else {
                0
            };
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
    /// those no resource keeps; None when none is left.
    pub(crate) fn pop_oldest(&mut self, kept: impl Fn(&Logged) -> bool) -> Option<Logged> {
        loop {
            let (seq, pos) = self.cursor;
            let chunk = self.read_chunk(seq);
            if seq != self.open_seq && self.oldest.as_ref().is_none_or(|(at, _)| *at != seq) {
                // Kept decoded while the cursor goes through it.
                self.oldest = Some((seq, chunk.clone()));
            }
            let Some(logged) = chunk.get(pos) else {
                if seq >= self.open_seq {
                    return None;
                }
                // Gone through: the next chunk.
                self.cursor = (seq + 1, 0);
                self.firsts.pop_front();
                self.oldest = None;
                continue;
            };
            self.cursor = (seq, pos + 1);
            if kept(logged) {
                return Some(logged.clone());
            }
        }
    }

    /// Moves the log into `archive` (empty: a node's own, on disk): the chunks it still
    /// reads go there.
    pub(crate) fn move_into(&mut self, archive: Arc<dyn Archive>) {
        let seqs = self.cursor.0..self.open_seq;
        copy_chunks(&*self.archive, &*archive, Space::Events, seqs);
        self.archive = archive;
    }

    /// Removes from the archive the chunks the cursor has gone through. Only for the newest
    /// log of a node, once no older copy reads the archive (a snapshot's is done).
    pub fn remove_forgotten(&self) {
        remove_chunks_below(&*self.archive, Space::Events, self.cursor.0);
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
        let at = self.log.chunk_at(revision)?;
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
