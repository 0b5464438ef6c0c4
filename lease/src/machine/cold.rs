//! Idle resources off the heap. An ad-hoc resource with no lease, waiter, booking or lock
//! delay left keeps only what it remembers: its ended leases, its revision and its retained
//! events. Once an entry leaves it so, it goes cold: that is written once into the state's
//! archive (from rules version 4 into a slot of a chunk, which is written once full:
//! [`chunks`]), and the heap keeps a stub of 32 bytes by name ([`Cold`], in [`super::stubs`]' buckets). Using it again (an
//! acquire, a registration, a wait) warms it back; every read that needs what it remembers
//! (a History page, a renew or validate of an ended lease, GetResource, listings, watches)
//! reads it from the archive.
//!
//! A cold resource's value never changes while it is cold. The global history bound drops
//! its events in delivery order like any other's, so which of them it still keeps follows
//! from the stub and the newest position the bound dropped; the bound forgets it when it drops
//! its newest event. A copy of the state taken for a snapshot holds its own stubs and reads
//! the values as they were; values no stub names any more are removed once a newer snapshot
//! is kept ([`super::Forgotten`]).

mod chunks;
mod parts;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::super::history::{Kept, Logged};
use super::buckets::Buckets;
use super::resource::{packed, Ended, ResourceState};
use super::State;
use crate::archive::{chunk_key, copy_chunks, read_chunk, Archive, MemArchive, Space};
use crate::types::Name;
use chunks::{in_chunk, Chunks};
pub(crate) use parts::{ColdLoaded, ColdParts, StubList};

/// What the heap keeps of a cold resource: 32 bytes (two (revision, seq) positions as
/// tuples would be padded to 40).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cold {
    /// The number of its value in the archive: a key of its own, or (with the bit
    /// `chunks::IN_CHUNK`, from rules version 4) a slot of a chunk.
    archived: u64,
    /// Where its events were trimmed through when it went cold ((0, 0): nowhere), and its
    /// newest event: revisions, then seqs.
    revisions: [u64; 2],
    seqs: [u32; 2],
}

impl Cold {
    fn new(archived: u64, trimmed: (u64, u32), last: (u64, u32)) -> Cold {
        Cold {
            archived,
            revisions: [trimmed.0, last.0],
            seqs: [trimmed.1, last.1],
        }
    }

    fn trimmed(&self) -> (u64, u32) {
        (self.revisions[0], self.seqs[0])
    }

    fn last(&self) -> (u64, u32) {
        (self.revisions[1], self.seqs[1])
    }

    /// Whether `logged` (of this resource, from the event log) is an event it keeps, as far as
    /// the stub knows: the global bound's drops are the caller's to know.
    fn keeps(&self, logged: &Logged) -> bool {
        let position = logged.event.position();
        position > self.trimmed() && position <= self.last()
    }
}

/// What the archive keeps of a cold resource.
#[derive(Serialize, Deserialize)]
struct ColdValue {
    ended: thin_vec::ThinVec<Ended>,
    revision: u64,
    trimmed: Option<(u64, u32)>,
    /// (revision, seq, cost) of each retained event, oldest first.
    history: Vec<(u64, u32, u32)>,
}

/// The cold resources (see the module's doc).
pub(crate) struct ColdStore {
    archive: Arc<dyn Archive>,
    stubs: Buckets<Cold>,
    next: u64,
    /// The chunks of slots (rules version 4).
    chunks: Chunks,
    /// Values, and chunks, no stub of this state names any more: removed after the next
    /// snapshot.
    gone: Arc<Mutex<Gone>>,
}

/// What a store forgot: values of their own, and chunks of slots.
#[derive(Default)]
pub(crate) struct Gone {
    pub(crate) values: Vec<u64>,
    pub(crate) chunks: Vec<u64>,
}

impl Default for ColdStore {
    fn default() -> Self {
        ColdStore::in_archive(Arc::new(MemArchive::default()))
    }
}

impl std::fmt::Debug for ColdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdStore")
            .field("resources", &self.stubs.len())
            .field("next", &self.next)
            .finish()
    }
}

impl ColdStore {
    /// An empty store kept in `archive`.
    pub(crate) fn in_archive(archive: Arc<dyn Archive>) -> ColdStore {
        ColdStore {
            archive,
            stubs: Buckets::default(),
            next: 0,
            chunks: Chunks::default(),
            gone: Arc::default(),
        }
    }

    /// The store as a snapshot reads it: its own stubs (O(1)), the same archive, a copy of
    /// the chunks' counts and open chunk.
    pub(crate) fn snapshot_copy(&self) -> ColdStore {
        ColdStore {
            archive: self.archive.clone(),
            stubs: self.stubs.clone(),
            next: self.next,
            chunks: self.chunks.clone(),
            gone: self.gone.clone(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.stubs.len()
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.stubs.contains_key(name)
    }

    pub(crate) fn stub(&self, name: &str) -> Option<&Cold> {
        self.stubs.get(name)
    }

    /// The cold resources from `start` on, by name.
    pub(crate) fn names_from(
        &self,
        start: std::ops::Bound<Name>,
    ) -> impl Iterator<Item = (&Name, &Cold)> + '_ {
        self.stubs.range_from(start)
    }

    /// Where each cold resource's events were trimmed through when it went cold.
    pub(crate) fn trims(&self) -> impl Iterator<Item = (&Name, (u64, u32))> + '_ {
        self.stubs
            .iter()
            .filter(|(_, stub)| stub.trimmed() != (0, 0))
            .map(|(name, stub)| (name, stub.trimmed()))
    }

    fn read(&self, cold: &Cold) -> ColdValue {
        if !in_chunk(cold.archived) {
            return read_chunk(&*self.archive, Space::Cold, cold.archived);
        }
        self.chunks.read(&*self.archive, cold.archived, self.next)
    }

    /// Writes `rs` (idle, keeping at least one event) as the cold resource `name`: in a slot
    /// of a chunk once the rules say so (`in_chunks`), else as a value of its own.
    fn put(&mut self, name: Name, rs: &ResourceState, in_chunks: bool) {
        let (Some(first), Some(last)) = (rs.history.front(), rs.history.back()) else {
            return;
        };
        let value = ColdValue {
            ended: rs.ended.clone(),
            revision: rs.revision,
            trimmed: rs.trimmed_through(),
            history: rs
                .history
                .iter()
                .map(|k| (k.revision, k.seq, k.cost))
                .collect(),
        };
        let bytes = postcard::to_allocvec(&value).unwrap_or_default();
        let number = match in_chunks {
            true => self.chunks.put(&*self.archive, self.next, bytes),
            false => {
                let key = chunk_key(self.next);
                self.archive.insert(Space::Cold, &key, &bytes);
                self.next
            }
        };
        let trimmed = rs.trimmed_through().unwrap_or((0, 0));
        debug_assert!(first.position() > trimmed);
        let stub = Cold::new(number, trimmed, last.position());
        self.next += 1;
        if let Some(old) = self.stubs.insert(name, stub) {
            self.forget_value(&old);
        }
    }

    /// Forgets the cold resource `name`: its value goes after the next snapshot.
    fn remove(&mut self, name: &str) -> Option<Cold> {
        let stub = self.stubs.remove(name)?;
        self.forget_value(&stub);
        Some(stub)
    }

    fn forget_value(&mut self, stub: &Cold) {
        let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        match in_chunk(stub.archived) {
            false => gone.values.push(stub.archived),
            true => gone
                .chunks
                .extend(self.chunks.forget(stub.archived, self.next)),
        }
    }

    /// Moves the store into `archive` (empty: a node's own, on disk).
    pub(crate) fn move_into(&mut self, archive: Arc<dyn Archive>) {
        let values = self.archived_values();
        copy_chunks(&*self.archive, &*archive, Space::Cold, values.into_iter());
        let chunks = self.archived_chunks();
        copy_chunks(
            &*self.archive,
            &*archive,
            Space::ColdChunks,
            chunks.into_iter(),
        );
        self.archive = archive;
        self.gone = Arc::default();
    }

    /// The values and chunks no stub names any more, since the last call: they leave the
    /// archive once no copy of the store reads them ([`super::Forgotten`]).
    pub(crate) fn take_gone(&self) -> Gone {
        std::mem::take(&mut *self.gone.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The most events a resource keeps and still goes cold. One with more is used often: going
/// cold and back at every acquire and release would rewrite them each time, and what all
/// resources keep is bounded anyway (16 bytes an event, [`super::super::history::TOTAL`]).
pub(crate) const COLD_EVENTS_MAX: usize = 64;

impl ResourceState {
    /// Nothing left but what it remembers: an ad-hoc resource with no lease, waiter, booking
    /// or lock delay, keeping a few events (with none it is forgotten).
    fn coolable(&self) -> bool {
        self.leases.is_empty()
            && *self.rare() == Default::default()
            && (1..=COLD_EVENTS_MAX).contains(&self.history.len())
    }
}

impl State {
    /// The resource `name` as it stands, hot or cold (read from the archive), if the state
    /// knows it.
    pub(crate) fn resource_ref(&self, name: &str) -> Option<Arc<ResourceState>> {
        match self.resources.get(name) {
            Some(rs) => Some(rs.clone()),
            None => self.cold_resource(name).map(Arc::new),
        }
    }

    /// The idle resources whose value is a key of its own in the archive, and those whose
    /// value is a slot of a chunk (rules version 4).
    pub fn idle_layout(&self) -> (usize, usize) {
        let stubs = self.cold.stubs.iter();
        let in_chunks = stubs.filter(|(_, c)| in_chunk(c.archived)).count();
        (self.cold.len() - in_chunks, in_chunks)
    }

    /// Whether the state knows the resource `name`, hot or cold.
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.resources.contains_key(name) || self.cold.contains(name)
    }

    /// The cold resource `name` as it stands: the events the global bound has dropped since it
    /// went cold are dropped from it too.
    fn cold_resource(&self, name: &str) -> Option<ResourceState> {
        let stub = self.cold.stub(name)?;
        let value = self.cold.read(stub);
        let mut rs = ResourceState::default();
        rs.ended = value.ended;
        rs.revision = value.revision;
        let mut trimmed = value.trimmed;
        for (revision, seq, cost) in value.history {
            let position = (revision, Name::from(name), seq);
            if Some(&position) <= self.dropped_last.as_ref() {
                trimmed = trimmed.max(Some((revision, seq)));
                continue;
            }
            rs.history.push_lean(Kept {
                revision,
                seq,
                cost,
            });
            rs.history_bytes = rs.history_bytes.saturating_add(cost);
        }
        rs.set_trimmed(trimmed.and_then(packed));
        Some(rs)
    }

    /// Every resource, hot or cold, from `start` on by name, as it stands (cold ones read
    /// from the archive).
    pub(crate) fn all_resources_from(
        &self,
        start: std::ops::Bound<Name>,
    ) -> impl Iterator<Item = (Name, Arc<ResourceState>)> + '_ {
        let mut hot = self.resources.range_from(start.clone()).peekable();
        let mut cold = self.cold.names_from(start).peekable();
        std::iter::from_fn(move || {
            let take_hot = match (hot.peek(), cold.peek()) {
                (Some((h, _)), Some((c, _))) => h <= c,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            if take_hot {
                hot.next().map(|(name, rs)| (name.clone(), rs.clone()))
            } else {
                let (name, _) = cold.next()?;
                let rs = self.cold_resource(name)?;
                Some((name.clone(), Arc::new(rs)))
            }
        })
    }

    /// Takes the cold resource `name` back onto the heap, if it is cold.
    pub(super) fn warm(&mut self, name: &str) {
        let Some(rs) = self.cold_resource(name) else {
            return;
        };
        self.cold.remove(name);
        self.resources.insert(Name::from(name), Arc::new(rs));
    }

    /// Sends the resources this entry recorded events of and left idle to the archive.
    pub(super) fn cool_idle(&mut self) {
        let in_chunks = self.rules >= crate::rules::COLD_CHUNKS;
        let mut names: Vec<&Name> = self.effects.events.iter().map(|(name, _)| name).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let Some(rs) = self.resources.get(name.as_str()) else {
                continue;
            };
            if rs.coolable() {
                let rs = rs.clone();
                self.resources.remove(name.as_str());
                self.cold.put(name.clone(), &rs, in_chunks);
            }
        }
    }

    /// Sends every idle resource to the archive (a state just loaded).
    pub(super) fn cool_all_idle(&mut self) {
        let idle: Vec<Name> = self
            .resources
            .iter()
            .filter(|(_, rs)| rs.coolable())
            .map(|(name, _)| name.clone())
            .collect();
        for name in idle {
            if let Some(rs) = self.resources.remove(name.as_str()) {
                self.cold
                    .put(name, &rs, self.rules >= crate::rules::COLD_CHUNKS);
            }
        }
    }

    /// The global bound dropped `logged`, an event of the cold resource `name`: when it was
    /// its newest, the resource is forgotten.
    pub(super) fn dropped_cold(&mut self, logged: &Logged) -> Option<()> {
        let stub = self.cold.stub(&logged.resource)?;
        if stub.last() == logged.event.position() {
            self.cold.remove(&logged.resource);
        }
        Some(())
    }
}

/// Whether a cold resource of `cold` keeps `logged` (see [`super::kept_by`]).
pub(super) fn cold_keeps(cold: &ColdStore, logged: &Logged) -> bool {
    cold.stub(&logged.resource)
        .is_some_and(|stub| stub.keeps(logged))
}
