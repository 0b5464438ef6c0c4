//! The cold store in a snapshot's live section (formats 9 and 10), and the checks of one
//! just read.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use foldhash::{HashMap, HashMapExt};

use super::chunks::{in_chunk, place, slots, Chunks, CHUNK};
use super::{Cold, ColdStore, ColdValue};
use crate::archive::Archive;
use crate::machine::buckets::Buckets;
use crate::types::Name;

/// The cold store in a snapshot of format 9 or 10: its stubs as (name, number of the value
/// or, with the bit `chunks::IN_CHUNK`, of the slot, trimmed, newest event), and the next
/// number; the values travel as the archive's entries (and in format 10 the open chunk's
/// after the live section).
#[derive(Serialize, Deserialize)]
pub(crate) struct ColdParts<S> {
    next: u64,
    stubs: S,
}

/// The stubs, written from the store's map without a copy.
pub(crate) struct StubList<'a>(&'a Buckets<Cold>);

impl Serialize for StubList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for (name, c) in self.0.iter() {
            seq.serialize_element(&(name, c.archived, c.trimmed(), c.last()))?;
        }
        seq.end()
    }
}

type Stub = (Name, u64, (u64, u32), (u64, u32));

impl ColdStore {
    pub(crate) fn live(&self) -> ColdParts<StubList<'_>> {
        ColdParts {
            next: self.next,
            stubs: StubList(&self.stubs),
        }
    }

    /// The archive the store keeps its values in.
    pub(crate) fn archive(&self) -> &dyn Archive {
        &*self.archive
    }

    pub(crate) fn archive_shared(&self) -> Arc<dyn Archive> {
        self.archive.clone()
    }

    /// The store a snapshot wrote (`open`: the open chunk's slots, from format 10), its
    /// values in `archive`.
    pub(crate) fn from_live(
        parts: ColdParts<Vec<Stub>>,
        open: Vec<Vec<u8>>,
        archive: Arc<dyn Archive>,
    ) -> ColdStore {
        let stubs: Buckets<Cold> = parts
            .stubs
            .into_iter()
            .map(|(name, archived, trimmed, last)| (name, Cold::new(archived, trimmed, last)))
            .collect();
        let chunks = Chunks::of(stubs.iter().map(|(_, c)| c.archived), open, parts.next);
        ColdStore {
            archive,
            stubs,
            next: parts.next,
            chunks,
            gone: Arc::default(),
        }
    }

    /// The number the next value written gets: every key the store wrote is below it.
    pub(crate) fn next_number(&self) -> u64 {
        self.next
    }

    /// The chunks' end: every chunk the store wrote is below it (the open one's number).
    pub(crate) fn next_chunk(&self) -> u64 {
        self.next / CHUNK
    }

    /// The open chunk's slots (rules version 4), which a snapshot of format 10 carries.
    pub(crate) fn open_chunk(&self) -> &[Vec<u8>] {
        self.chunks.open()
    }

    /// The numbers of the values of their own the stubs name, in order.
    pub(crate) fn archived_values(&self) -> Vec<u64> {
        let mut all: Vec<u64> = (self.stubs.iter())
            .map(|(_, c)| c.archived)
            .filter(|n| !in_chunk(*n))
            .collect();
        all.sort_unstable();
        all
    }

    /// The numbers of the chunks in the archive the stubs name, in order.
    pub(crate) fn archived_chunks(&self) -> Vec<u64> {
        self.chunks.archived()
    }

    /// Whether `value` is a cold resource's (an archive entry of a snapshot just read).
    pub(crate) fn decodes(value: &[u8]) -> bool {
        postcard::from_bytes::<ColdValue>(value).is_ok()
    }

    /// Which slots of each chunk in the archive the stubs name, a bit a slot: what
    /// [`ColdStore::chunk_holds`] checks a chunk of a snapshot just read against.
    pub(crate) fn named_slots(&self) -> HashMap<u64, u16> {
        let mut named = HashMap::new();
        for (_, stub) in self.stubs.iter().filter(|(_, c)| in_chunk(c.archived)) {
            let (chunk, at) = place(stub.archived);
            *named.entry(chunk).or_insert(0u16) |= 1 << at;
        }
        named
    }

    /// Whether the entry `key`, `chunk` of the chunks' space, is a chunk of cold resources'
    /// slots, each empty or one's value, with a value in every slot a stub names (`named`).
    pub(crate) fn chunk_holds(named: &HashMap<u64, u16>, key: &[u8], chunk: &[u8]) -> bool {
        let Ok(number) = <[u8; 8]>::try_from(key).map(u64::from_be_bytes) else {
            return false;
        };
        let wanted = named.get(&number).copied().unwrap_or(0);
        slots(chunk).is_some_and(|slots| {
            slots
                .iter()
                .enumerate()
                .all(|(at, s)| match s.0.is_empty() {
                    true => wanted & (1 << at) == 0,
                    false => Self::decodes(s.0),
                })
        })
    }

    /// Checks a store just read at `rules`: each value and slot named once, all below the
    /// next number, slots and an open chunk only from rules version 4, the open chunk's slots
    /// as many as were put in it and each it names filled (and a value), and no resource both
    /// cold and among the `hot` ones. (The chunks in the archive are checked as they are
    /// read: [`ColdStore::chunk_holds`].)
    pub(crate) fn check_loaded(
        &self,
        hot: &crate::machine::ResourceMap,
        rules: u32,
    ) -> Result<(), String> {
        let mut numbers: Vec<u64> = self.stubs.iter().map(|(_, c)| c.archived).collect();
        numbers.sort_unstable();
        let named_once = numbers.windows(2).all(|w| w[0] < w[1]);
        let mut values = numbers.iter().filter(|n| !in_chunk(**n));
        let below_next = values.next_back().is_none_or(|last| *last < self.next);
        let slots = self.chunks.check(numbers.iter().copied(), self.next);
        let open = self.open_chunk().iter();
        let open_decodes = open.filter(|s| !s.is_empty()).all(|s| Self::decodes(s));
        let apart = self.stubs.iter().all(|(name, _)| !hot.contains_key(name));
        let chunked = !self.open_chunk().is_empty() || numbers.iter().any(|n| in_chunk(*n));
        let rules_allow = rules >= crate::rules::COLD_CHUNKS || !chunked;
        match named_once && below_next && slots && open_decodes && apart && rules_allow {
            true => Ok(()),
            false => Err("the cold resources' stubs do not agree with the state".into()),
        }
    }
}

/// The cold store as format 9 reads it.
pub(crate) type ColdLoaded = ColdParts<Vec<Stub>>;
