//! Cold values in chunks (rules version 4, `crate::rules::COLD_CHUNKS`). One archive key a
//! value made every idle resource an insert into the archive's ordered store and, minutes
//! later, a removal: on a node's sled, page splits and merges on the tree's right edge that
//! the store's segment cleaning rides on. From version 4 the values go into numbered slots,
//! [`CHUNK`] to a chunk: the open chunk stays on the heap (and in the snapshot's live
//! section) until its last slot is filled, then it is written once as one key; it leaves
//! once no stub names any of its slots. The store's one counter numbers values and slots
//! alike, so the first chunk after the raise starts part way in (its slots before are empty).

use foldhash::{HashMap, HashMapExt};
use serde::de::DeserializeOwned;

use crate::archive::{chunk_key, Archive, Bytes, Space};

/// Slots in a chunk.
pub(super) const CHUNK: u64 = 16;

/// The bit of a stub's number that says it names a slot of a chunk, not a value of its own.
pub(super) const IN_CHUNK: u64 = 1 << 63;

/// Whether a stub's `number` names a slot.
pub(super) fn in_chunk(number: u64) -> bool {
    number & IN_CHUNK != 0
}

/// The chunk of the slot `number` names, and its place there.
pub(super) fn place(number: u64) -> (u64, usize) {
    let slot = number & !IN_CHUNK;
    (slot / CHUNK, (slot % CHUNK) as usize)
}

/// The chunks of a store: the open one and how many slots of each stubs still name. A copy
/// (a snapshot's) copies the counts: about 16 bytes a chunk in the archive (tens of µs for
/// the 20,000 chunks of a soak's end state).
#[derive(Clone, Default)]
pub(super) struct Chunks {
    /// The open chunk's slots so far (chunk `next / CHUNK` of the store's next number; empty
    /// where no value was put).
    open: Vec<Vec<u8>>,
    /// Slots of the open chunk stubs name.
    open_live: u8,
    /// Slots stubs name, by chunk in the archive: a chunk with none is not kept.
    live: HashMap<u64, u8>,
}

impl Chunks {
    /// The chunks whose slots `numbers` (every stub's) name, `open` the open chunk's slots
    /// (`next`: the store's next number).
    pub(super) fn of(numbers: impl Iterator<Item = u64>, open: Vec<Vec<u8>>, next: u64) -> Chunks {
        let mut live = HashMap::new();
        for number in numbers.filter(|n| in_chunk(*n)) {
            let count = live.entry(place(number).0).or_insert(0u8);
            *count = count.saturating_add(1);
        }
        Chunks {
            open,
            open_live: live.remove(&(next / CHUNK)).unwrap_or(0),
            live,
        }
    }

    /// Puts `value` in slot `next` (the store's next number) and returns the number its stub
    /// keeps; a chunk whose last slot that was goes to `archive` (a stub names that slot, so
    /// it is read).
    pub(super) fn put(&mut self, archive: &dyn Archive, next: u64, value: Vec<u8>) -> u64 {
        let (chunk, at) = place(next);
        if self.open.is_empty() {
            self.open.resize(at, Vec::new());
        }
        debug_assert_eq!(self.open.len(), at);
        self.open.push(value);
        self.open_live += 1;
        if at as u64 == CHUNK - 1 {
            let slots = std::mem::take(&mut self.open);
            archive.insert(Space::ColdChunks, &chunk_key(chunk), &encode(&slots));
            self.live.insert(chunk, std::mem::take(&mut self.open_live));
        }
        IN_CHUNK | next
    }

    /// A stub no longer names slot `number` (`next`: the store's next number). Returns its
    /// chunk when that was the chunk's last named slot and the chunk is in the archive.
    pub(super) fn forget(&mut self, number: u64, next: u64) -> Option<u64> {
        let (chunk, _) = place(number);
        if chunk == next / CHUNK {
            self.open_live = self.open_live.saturating_sub(1);
            return None;
        }
        let count = self.live.get_mut(&chunk)?;
        *count = count.saturating_sub(1);
        if *count > 0 {
            return None;
        }
        self.live.remove(&chunk);
        Some(chunk)
    }

    /// The value in slot `number`, from the open chunk or from `archive` (`next`: the
    /// store's next number), decoded where it lies. One the archive lost or that does not
    /// decode stops the node, as `read_chunk` says.
    pub(super) fn read<T: DeserializeOwned>(
        &self,
        archive: &dyn Archive,
        number: u64,
        next: u64,
    ) -> T {
        let (chunk, at) = place(number);
        let decoded = if chunk == next / CHUNK {
            let value = self.open.get(at).filter(|v| !v.is_empty());
            value.map(|v| postcard::from_bytes(v))
        } else {
            let Some(bytes) = archive.get(Space::ColdChunks, &chunk_key(chunk)) else {
                panic!(
                    "chunk {chunk} of {:?} is not in the archive",
                    Space::ColdChunks
                );
            };
            let slot = slots(&bytes).and_then(|slots| slots.get(at).map(|s| s.0));
            slot.filter(|v| !v.is_empty()).map(postcard::from_bytes)
        };
        match decoded {
            Some(Ok(value)) => value,
            Some(Err(error)) => panic!("cold slot {number} does not decode: {error}"),
            None => panic!("slot {at} of cold chunk {chunk} is empty"),
        }
    }

    /// The open chunk's slots, as a snapshot carries them.
    pub(super) fn open(&self) -> &[Vec<u8>] {
        &self.open
    }

    /// The chunks in the archive that stubs name, in order.
    pub(super) fn archived(&self) -> Vec<u64> {
        let mut chunks: Vec<u64> = self.live.keys().copied().collect();
        chunks.sort_unstable();
        chunks
    }

    /// Whether the chunks agree with the stubs' `numbers` and the store's `next` number: the
    /// open chunk as long as the slots put in it, and every slot a stub names there filled.
    pub(super) fn check(&self, numbers: impl Iterator<Item = u64>, next: u64) -> bool {
        let open_len = self.open.is_empty() || self.open.len() as u64 == next % CHUNK;
        open_len
            && numbers.filter(|n| in_chunk(*n)).all(|n| {
                let (chunk, at) = place(n);
                (n & !IN_CHUNK) < next
                    && (chunk < next / CHUNK || self.open.get(at).is_some_and(|v| !v.is_empty()))
            })
    }
}

/// A chunk's encoding: its slots, each a value's bytes (empty where none was put).
fn encode(slots: &[Vec<u8>]) -> Vec<u8> {
    let slots: Vec<Bytes<'_>> = slots.iter().map(|s| Bytes(s)).collect();
    postcard::to_allocvec(&slots).unwrap_or_default()
}

/// A chunk's slots, borrowed from its bytes; `None` if it is not [`CHUNK`] of them.
pub(super) fn slots(bytes: &[u8]) -> Option<Vec<Bytes<'_>>> {
    let slots = postcard::from_bytes::<Vec<Bytes<'_>>>(bytes).ok();
    slots.filter(|s| s.len() as u64 == CHUNK)
}
