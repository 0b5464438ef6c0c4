//! Where the state keeps what it must remember but seldom reads: an ordered key-value store
//! beside the state, not on its heap. The node gives it one on disk (sled); tests, and a state
//! just decoded, use `MemArchive`.
//!
//! What `apply` writes there is written once and never changed (see `dedup::table`), so a copy
//! of the state taken for a snapshot goes on reading the archive as it was while apply writes
//! past it, and what apply decides stays a function of the state and the entry. What nothing
//! can read any more is removed when the node says so (after a snapshot), never by apply.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::RwLock;

/// The parts of an archive, each its own ordered key space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Space {
    /// Exactly-once records, in chunks by sequence number (`dedup`).
    ExactlyOnce,
    /// Retained events, in chunks in delivery order (`history::log`).
    Events,
    /// Idle resources (`machine::cold`), one value a key, by number (rules versions 1 to 3).
    Cold,
    /// Idle resources in chunks of slots, by chunk number (rules version 4,
    /// `crate::rules::COLD_CHUNKS`).
    ColdChunks,
    /// Tests of the archive itself.
    #[cfg(test)]
    Other,
}

impl Space {
    /// The space whose tag is `tag` ([`Space::tag`]).
    pub(crate) fn of_tag(tag: u8) -> Option<Space> {
        [
            Space::ExactlyOnce,
            Space::Events,
            Space::Cold,
            Space::ColdChunks,
        ]
        .into_iter()
        .find(|space| space.tag() == tag)
    }

    /// The byte that puts a key in its space, in a store that has one key space (and an
    /// entry in a snapshot of format 9 or 10).
    pub(crate) fn tag(self) -> u8 {
        match self {
            Space::ExactlyOnce => 1,
            Space::Events => 3,
            Space::Cold => 4,
            Space::ColdChunks => 5,
            #[cfg(test)]
            Space::Other => 2,
        }
    }
}

/// What a scan is told of each entry; it returns whether to go on.
pub type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> bool;

/// An ordered store the state keeps cold data in. Writes cannot fail as far as the state is
/// concerned: a store that cannot write stops the node (which restarts from its snapshot and
/// log), it never answers differently.
pub trait Archive: Send + Sync {
    fn get(&self, space: Space, key: &[u8]) -> Option<Vec<u8>>;
    fn insert(&self, space: Space, key: &[u8], value: &[u8]);
    fn remove(&self, space: Space, key: &[u8]);
    /// Visits the entries of `space` with keys in (`from`, `to`), in key order or reversed,
    /// until `visit` returns false.
    fn scan(
        &self,
        space: Space,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        visit: Visit<'_>,
    );
}

impl fmt::Debug for dyn Archive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Archive")
    }
}

/// The key of chunk number `seq` in a space of numbered chunks: ordered by number.
pub(crate) fn chunk_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Chunk number `seq` of `space`, decoded. A chunk a state still reads that the archive does
/// not hold, or that does not decode, is a broken archive: nothing can be answered from it,
/// so this stops the node (a node whose own snapshot reads a lost entry finds it at its next
/// start and halts: its data is then taken again from the leader).
pub(crate) fn read_chunk<T: serde::de::DeserializeOwned>(
    archive: &dyn Archive,
    space: Space,
    seq: u64,
) -> T {
    let bytes = archive.get(space, &chunk_key(seq));
    match bytes.map(|b| postcard::from_bytes(&b)) {
        Some(Ok(chunk)) => chunk,
        Some(Err(error)) => panic!("chunk {seq} of {space:?} does not decode: {error}"),
        None => panic!("chunk {seq} of {space:?} is not in the archive"),
    }
}

/// Copies the chunks numbered `seqs` of `space` (keyed by their number, big-endian) from
/// `from` to `to`: what a state just decoded moves into a node's own archive.
pub(crate) fn copy_chunks(
    from: &dyn Archive,
    to: &dyn Archive,
    space: Space,
    seqs: impl Iterator<Item = u64>,
) {
    for seq in seqs {
        if let Some(bytes) = from.get(space, &chunk_key(seq)) {
            to.insert(space, &chunk_key(seq), &bytes);
        }
    }
}

/// Removes the chunks of `space` numbered below `end` (keyed by their number, big-endian).
pub(crate) fn remove_chunks_below(archive: &dyn Archive, space: Space, end: u64) {
    let mut gone = Vec::new();
    archive.scan(
        space,
        Bound::Unbounded,
        Bound::Excluded(&chunk_key(end)),
        false,
        &mut |k, _| {
            gone.push(k.to_vec());
            true
        },
    );
    for key in gone {
        archive.remove(space, &key);
    }
}

/// `key` of `space` in a store with one key space: the space's tag, then the key.
pub fn tagged(space: Space, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(space.tag());
    out.extend_from_slice(key);
    out
}

/// The keys of `space` between `from` and `to`, tagged ([`tagged`]).
pub fn tagged_range(
    space: Space,
    from: Bound<&[u8]>,
    to: Bound<&[u8]>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let from = match from {
        Bound::Included(k) => Bound::Included(tagged(space, k)),
        Bound::Excluded(k) => Bound::Excluded(tagged(space, k)),
        Bound::Unbounded => Bound::Included(vec![space.tag()]),
    };
    let to = match to {
        Bound::Included(k) => Bound::Included(tagged(space, k)),
        Bound::Excluded(k) => Bound::Excluded(tagged(space, k)),
        Bound::Unbounded => Bound::Excluded(vec![space.tag() + 1]),
    };
    (from, to)
}

/// Bytes written as one run (not byte by byte, as a slice would be), read back borrowed.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl serde::Serialize for Bytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Bytes<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'a [u8]>::deserialize(deserializer).map(Bytes)
    }
}

/// A new, empty archive on the heap (a node that keeps none on disk).
pub fn on_the_heap() -> std::sync::Arc<dyn Archive> {
    std::sync::Arc::new(MemArchive::default())
}

/// Entries [`MemArchive::scan`] copies out at a time.
const SCAN_BATCH: usize = 64;

/// An archive on the heap: tests, tools, and a state just decoded before the node moves it
/// into its own.
#[derive(Default)]
pub(crate) struct MemArchive(RwLock<BTreeMap<Vec<u8>, Vec<u8>>>);

impl Archive for MemArchive {
    fn get(&self, space: Space, key: &[u8]) -> Option<Vec<u8>> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.get(&tagged(space, key)).cloned()
    }

    fn insert(&self, space: Space, key: &[u8], value: &[u8]) {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        map.insert(tagged(space, key), value.to_vec());
    }

    fn remove(&self, space: Space, key: &[u8]) {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        map.remove(&tagged(space, key));
    }

    fn scan(
        &self,
        space: Space,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        visit: Visit<'_>,
    ) {
        // Copied out under the lock a batch at a time and visited after: a visit may read
        // the archive again, and a scan of the whole archive holds one batch, not a copy of
        // everything it reads.
        let (mut from, mut to) = tagged_range(space, from, to);
        loop {
            let batch: Vec<(Vec<u8>, Vec<u8>)> = {
                let map = self.0.read().unwrap_or_else(|p| p.into_inner());
                let range = map.range((from.clone(), to.clone()));
                let copy = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
                match reverse {
                    false => range.take(SCAN_BATCH).map(copy).collect(),
                    true => range.rev().take(SCAN_BATCH).map(copy).collect(),
                }
            };
            let Some((last, _)) = batch.last() else {
                return;
            };
            let next = Bound::Excluded(last.clone());
            for (key, value) in &batch {
                if !visit(&key[1..], value) {
                    return;
                }
            }
            match reverse {
                false => from = next,
                true => to = next,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(archive: &MemArchive, space: Space, reverse: bool) -> Vec<Vec<u8>> {
        let mut seen = Vec::new();
        archive.scan(
            space,
            Bound::Unbounded,
            Bound::Unbounded,
            reverse,
            &mut |k, _| {
                seen.push(k.to_vec());
                true
            },
        );
        seen
    }

    #[test]
    fn spaces_are_apart_and_scans_run_both_ways_and_stop_when_told() {
        let archive = MemArchive::default();
        archive.insert(Space::ExactlyOnce, b"b", b"1");
        archive.insert(Space::ExactlyOnce, b"a", b"2");
        archive.insert(Space::Other, b"a", b"3");
        assert_eq!(keys(&archive, Space::ExactlyOnce, false), [b"a", b"b"]);
        assert_eq!(keys(&archive, Space::ExactlyOnce, true), [b"b", b"a"]);
        assert_eq!(keys(&archive, Space::Other, false), [b"a"]);
        let mut first = Vec::new();
        archive.scan(
            Space::ExactlyOnce,
            Bound::Excluded(b"a"),
            Bound::Unbounded,
            false,
            &mut |k, v| {
                first.push((k.to_vec(), v.to_vec()));
                false
            },
        );
        assert_eq!(first, [(b"b".to_vec(), b"1".to_vec())]);
        archive.remove(Space::ExactlyOnce, b"a");
        assert_eq!(keys(&archive, Space::ExactlyOnce, false), [b"b"]);
    }

    /// A scan longer than a batch visits every entry in its bounds once, in order both ways,
    /// and a visit may read and write the archive meanwhile.
    #[test]
    fn a_scan_past_a_batch_sees_each_entry_once_and_may_use_the_archive() {
        let archive = MemArchive::default();
        let n = 3 * SCAN_BATCH as u64 + 5;
        for k in 0..n {
            archive.insert(Space::ExactlyOnce, &chunk_key(k), &k.to_le_bytes());
        }
        let (from, to) = (chunk_key(3), chunk_key(n - 2));
        for reverse in [false, true] {
            let mut seen = Vec::new();
            archive.scan(
                Space::ExactlyOnce,
                Bound::Included(&from),
                Bound::Excluded(&to),
                reverse,
                &mut |key, value| {
                    assert_eq!(archive.get(Space::ExactlyOnce, key).as_deref(), Some(value));
                    archive.insert(Space::Other, key, value);
                    seen.push(u64::from_be_bytes(key.try_into().expect("8 bytes")));
                    true
                },
            );
            let mut wanted: Vec<u64> = (3..n - 2).collect();
            if reverse {
                wanted.reverse();
            }
            assert_eq!(seen, wanted, "reverse: {reverse}");
        }
        assert_eq!(keys(&archive, Space::Other, false).len() as u64, n - 5);
    }
}
