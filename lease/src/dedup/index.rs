//! The exactly-once table's index on the heap: from a remembered key to the chunk that holds
//! it, one 8-byte slot a record (`table`).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use super::Digest128;

/// Bits of a key the index keeps: the first [`PREFIX_BITS`] of its digest.
const PREFIX_BITS: u32 = 39;
/// Bits of a chunk's number the index keeps: its low [`LOW_BITS`] (`table`'s `low`).
pub(super) const LOW_BITS: u32 = 24;
/// The slot's bit that says more than one live key has its prefix.
const SHARED_BIT: u64 = 1 << LOW_BITS;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;

/// One key's place in the index, in 64 bits: its prefix, whether that prefix is shared, the
/// low bits of its chunk's number. Equal and hashed by the prefix alone, so that the set
/// finds a slot from a key's prefix.
#[derive(Clone, Copy, Debug)]
struct Slot(u64);

impl Slot {
    fn new(prefix: u64, at: At) -> Slot {
        let low = match at {
            At::Chunk(low) => u64::from(low) & LOW_MASK,
            At::Shared => SHARED_BIT,
        };
        Slot(prefix << (LOW_BITS + 1) | low)
    }

    /// A slot to look `prefix` up with.
    fn of(prefix: u64) -> Slot {
        Slot::new(prefix, At::Shared)
    }

    fn prefix(self) -> u64 {
        self.0 >> (LOW_BITS + 1)
    }

    fn at(self) -> At {
        match self.0 & SHARED_BIT {
            0 => At::Chunk((self.0 & LOW_MASK) as u32),
            _ => At::Shared,
        }
    }
}

impl PartialEq for Slot {
    fn eq(&self, other: &Slot) -> bool {
        self.prefix() == other.prefix()
    }
}

impl Eq for Slot {}

impl Hash for Slot {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.prefix());
    }
}

/// What the index holds for a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum At {
    /// One live key has it, in the chunk with these low bits.
    Chunk(u32),
    /// More than one live key has it: see `shared`.
    Shared,
}

/// Which chunk holds each remembered key: by the key's first 39 bits, in 8-byte slots (the
/// whole key and a chunk number would take 24). Two live keys that share those bits (by
/// chance, about 2^-39 a pair: a few pairs in ten minutes of millions of records; on purpose,
/// about 2^39 ÷ (live keys) hashes of work a pair) both go to `shared`, by the whole key.
#[derive(Clone, Default)]
pub(super) struct Index {
    by_prefix: foldhash::HashSet<Slot>,
    shared: BTreeMap<Digest128, u32>,
    /// How many slots `by_prefix`'s allocation holds (the most its `capacity` has shown
    /// since it was allocated: erased slots lower it until a rehash).
    room: usize,
}

/// A key's prefix as the index keeps it.
pub(super) fn prefix(key: &Digest128) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&key[..8]);
    u64::from_be_bytes(first) >> (64 - PREFIX_BITS)
}

impl Index {
    /// What the index holds for `key`'s prefix, if any live key has it.
    pub(super) fn at(&self, key: &Digest128) -> Option<At> {
        self.by_prefix
            .get(&Slot::of(prefix(key)))
            .map(|slot| slot.at())
    }

    /// The chunk that may hold `key` (another key of the same prefix, if not `shared`).
    pub(super) fn get(&self, key: &Digest128) -> Option<u32> {
        match self.at(key)? {
            At::Shared => self.shared.get(key).copied(),
            At::Chunk(low) => Some(low),
        }
    }

    /// The shared keys of `key`'s prefix.
    fn sharing_prefix<'a>(&'a self, key: &Digest128) -> impl Iterator<Item = &'a Digest128> {
        let p = prefix(key);
        let mut from = [0u8; 16];
        from[..8].copy_from_slice(&(p << (64 - PREFIX_BITS)).to_be_bytes());
        let mut to = [0xffu8; 16];
        to[..8].copy_from_slice(
            &((p << (64 - PREFIX_BITS)) | (u64::MAX >> PREFIX_BITS)).to_be_bytes(),
        );
        self.shared.range(from..=to).map(|(k, _)| k)
    }

    fn set(&mut self, key: &Digest128, at: At) {
        self.make_room();
        self.by_prefix.replace(Slot::new(prefix(key), at));
        // Right after a resize no slot is deleted: the capacity is the whole room.
        self.room = self.room.max(self.by_prefix.capacity());
    }

    /// The set's table (hashbrown's) marks some erased slots deleted rather than empty, and
    /// a deleted slot is not room for a new key. When they have used its room up, the table
    /// rehashes at its size if it is at most half full, and otherwise doubles: under a steady
    /// window of records (as many forgotten as remembered, more than half the room live), the
    /// index doubles at a moment nothing chooses, long after its window filled (a soak's
    /// nodes all stepped up 40 MiB 27 minutes in). Here the set is rebuilt at its size
    /// instead whenever that frees an eighth of its room or more; only a set really full
    /// grows. The rebuild copies each slot once (tens of ms for millions), once in every many
    /// forgotten keys.
    fn make_room(&mut self) {
        // `room` was read after every insert, reserve and rebuild: erasing only lowers the
        // capacity.
        let (len, capacity) = (self.by_prefix.len(), self.by_prefix.capacity());
        // Room left; or under half full, which hashbrown rehashes in place (it does when one
        // more key leaves it at most half full); or a rebuild would free less than an eighth
        // (so really full; tables under 8 slots have no deleted ones).
        if capacity > len || len < self.room / 2 || (self.room - len) * 8 < self.room.max(8) {
            return;
        }
        let full = std::mem::replace(
            &mut self.by_prefix,
            foldhash::HashSet::with_capacity_and_hasher(self.room, Default::default()),
        );
        self.by_prefix.extend(full);
        self.room = self.by_prefix.capacity();
    }

    /// `key` is in the chunk with low bits `low` (below 2^[`LOW_BITS`]); `other` is the live
    /// key its prefix stands for now, if another.
    pub(super) fn insert(&mut self, key: &Digest128, low: u32, other: Option<(Digest128, u32)>) {
        debug_assert!(u64::from(low) <= LOW_MASK);
        match (self.at(key), other) {
            (Some(At::Shared), _) => {
                self.shared.insert(*key, low);
            }
            (Some(_), Some((other, other_low))) => {
                self.set(key, At::Shared);
                self.shared.insert(other, other_low);
                self.shared.insert(*key, low);
            }
            _ => self.set(key, At::Chunk(low)),
        }
    }

    /// `key`, remembered in the chunk with low bits `low`, is forgotten (unless remembered
    /// again since).
    pub(super) fn remove(&mut self, key: &Digest128, low: u32) {
        match self.at(key) {
            Some(At::Shared) => {
                if self.shared.get(key) == Some(&low) {
                    self.shared.remove(key);
                }
                if self.sharing_prefix(key).next().is_none() {
                    self.by_prefix.remove(&Slot::of(prefix(key)));
                }
            }
            Some(At::Chunk(at)) if at == low => {
                self.by_prefix.remove(&Slot::of(prefix(key)));
            }
            _ => {}
        }
    }

    /// Room for `more` keys beyond those held (a table being indexed again from its chunks).
    pub(super) fn reserve(&mut self, more: usize) {
        self.by_prefix.reserve(more);
        self.room = self.room.max(self.by_prefix.capacity());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot keeps its prefix and place apart, for every place, and compares by prefix.
    #[test]
    fn a_slot_keeps_prefix_and_place() {
        let key = [0xabu8; 16];
        let p = prefix(&key);
        assert_eq!(p >> PREFIX_BITS, 0, "39 bits");
        for at in [
            At::Chunk(0),
            At::Chunk(LOW_MASK as u32),
            At::Chunk(77),
            At::Shared,
        ] {
            let slot = Slot::new(p, at);
            assert_eq!((slot.prefix(), slot.at()), (p, at));
            assert_eq!(slot, Slot::of(p));
        }
        assert_ne!(Slot::of(p), Slot::of(p ^ 1));
    }

    /// Keys that differ only past the prefix share a slot; `sharing_prefix` finds exactly
    /// the shared keys of the prefix, at both ends of its range.
    #[test]
    fn keys_past_the_prefix_share_a_slot() {
        let mut index = Index::default();
        let a = [0x12u8; 16];
        let mut b = a;
        b[4] ^= 0x01; // bit 39 and beyond: the 40th bit is byte 4's lowest
        let mut c = a;
        c[4] ^= 0x02; // the 39th bit: another prefix
        assert_eq!(prefix(&a), prefix(&b));
        assert_ne!(prefix(&a), prefix(&c));
        index.insert(&a, 5, None);
        index.insert(&b, 6, Some((a, 5)));
        index.insert(&c, 7, None);
        assert_eq!(index.at(&a), Some(At::Shared));
        assert_eq!(
            (index.get(&a), index.get(&b), index.get(&c)),
            (Some(5), Some(6), Some(7))
        );
        assert_eq!(index.sharing_prefix(&a).count(), 2);
        index.remove(&a, 5);
        assert_eq!((index.get(&a), index.get(&b)), (None, Some(6)));
        index.remove(&b, 6);
        assert_eq!(index.at(&b), None);
        assert_eq!(index.get(&c), Some(7));
    }

    /// A steady window of keys, more than half the set's room, as many forgotten as
    /// remembered: the set keeps its size (hashbrown alone doubles it once erased slots have
    /// used its room up), and every key of the window is still found.
    #[test]
    fn a_steady_window_keeps_the_index_at_its_size() {
        const WINDOW: u64 = 3_000;
        let key = |i: u64| {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
            key[8..].copy_from_slice(&i.to_be_bytes());
            key
        };
        let low = |i: u64| (i % (1 << LOW_BITS)) as u32;
        let mut index = Index::default();
        for i in 0..WINDOW {
            index.insert(&key(i), low(i), None);
        }
        let room = index.by_prefix.capacity();
        assert!(
            WINDOW as usize > room / 2 && WINDOW as usize <= room - room / 8,
            "the window is where a rebuild frees room: more than half, at most 7/8 of {room}"
        );
        for i in WINDOW..200 * WINDOW {
            index.insert(&key(i), low(i), None);
            index.remove(&key(i - WINDOW), low(i - WINDOW));
            assert!(
                index.by_prefix.capacity() <= room,
                "the set grew past {room} slots after {i} keys"
            );
        }
        for i in 199 * WINDOW..200 * WINDOW {
            assert_eq!(index.get(&key(i)), Some(low(i)));
        }
        assert_eq!(index.get(&key(199 * WINDOW - 1)), None);
    }
}
