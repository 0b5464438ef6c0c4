//! The exactly-once table's index on the heap: from a remembered key to the chunk that holds
//! it, 12 bytes a record (`table`).

use std::collections::BTreeMap;

use super::Digest128;

/// Which chunk holds each remembered key: by the key's first 8 bytes (8 + 4 bytes an entry,
/// not 16 + 8). Two live keys that share those bytes (by chance, 2^-64 a pair; on purpose,
/// about 2^32 hashes of work a pair) both go to `shared`, by the whole key.
#[derive(Clone, Default)]
pub(super) struct Index {
    pub(super) by_prefix: foldhash::HashMap<[u32; 2], u32>,
    shared: BTreeMap<Digest128, u32>,
}

/// The `by_prefix` value of a prefix that more than one live key has: see `shared`.
pub(super) const SHARED: u32 = u32::MAX;

pub(super) fn prefix(key: &Digest128) -> [u32; 2] {
    let word = |at: usize| u32::from_le_bytes([key[at], key[at + 1], key[at + 2], key[at + 3]]);
    [word(0), word(4)]
}

impl Index {
    /// The chunk that may hold `key` (another key of the same prefix, if not `shared`).
    pub(super) fn get(&self, key: &Digest128) -> Option<u32> {
        match *self.by_prefix.get(&prefix(key))? {
            SHARED => self.shared.get(key).copied(),
            seq => Some(seq),
        }
    }

    /// The shared keys of `key`'s prefix.
    fn sharing_prefix<'a>(&'a self, key: &Digest128) -> impl Iterator<Item = &'a Digest128> {
        let mut from = [0u8; 16];
        from[..8].copy_from_slice(&key[..8]);
        let mut to = [0xffu8; 16];
        to[..8].copy_from_slice(&key[..8]);
        self.shared.range(from..=to).map(|(k, _)| k)
    }

    /// `key` is in chunk `seq`; `other` is the live key its prefix stands for now, if another.
    pub(super) fn insert(&mut self, key: &Digest128, seq: u32, other: Option<(Digest128, u32)>) {
        let p = prefix(key);
        match (self.by_prefix.get(&p).copied(), other) {
            (Some(SHARED), _) => {
                self.shared.insert(*key, seq);
            }
            (Some(_), Some((other, other_seq))) => {
                self.by_prefix.insert(p, SHARED);
                self.shared.insert(other, other_seq);
                self.shared.insert(*key, seq);
            }
            _ => {
                self.by_prefix.insert(p, seq);
            }
        }
    }

    /// `key`, remembered in chunk `seq`, is forgotten (unless remembered again since).
    pub(super) fn remove(&mut self, key: &Digest128, seq: u32) {
        let p = prefix(key);
        match self.by_prefix.get(&p).copied() {
            Some(SHARED) => {
                if self.shared.get(key) == Some(&seq) {
                    self.shared.remove(key);
                }
                if self.sharing_prefix(key).next().is_none() {
                    self.by_prefix.remove(&p);
                }
            }
            Some(at) if at == seq => {
                self.by_prefix.remove(&p);
            }
            _ => {}
        }
    }
}
