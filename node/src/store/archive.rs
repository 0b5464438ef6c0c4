//! The state's archive on disk (`lease::archive`): what the state remembers but seldom reads
//! (exactly-once records) in a sled database of its own under the data directory, not on
//! the heap.
//!
//! It is not a source of truth: every start empties it and fills it again from the snapshot
//! the node loads, then apply writes it as the log is replayed; nothing in it is ever fsynced.
//! An installed snapshot gets a tree of its own (a generation), and the tree it replaces goes
//! once no copy of the old state reads it. A write that fails stops the node: the state must
//! never answer from a partial archive.

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::lease::archive::{tagged, tagged_range, Archive, Space, Visit};

/// sled's page cache for the archive: what is read and written often (the window's newest
/// records) stays in memory, the rest is read back from the file.
const CACHE_BYTES: u64 = 32 << 20;

/// The node's archives: one sled database, a tree per generation.
pub struct Archives {
    db: sled::Db,
    next: AtomicU64,
}

impl Archives {
    /// Opens the archive database in `dir`, emptied.
    pub fn open(dir: &Path) -> anyhow::Result<Archives> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(None)
            .open()?;
        Ok(Archives {
            db,
            next: AtomicU64::new(1),
        })
    }

    /// A new, empty archive.
    pub fn fresh(&self) -> anyhow::Result<Arc<dyn Archive>> {
        let name = format!("generation.{}", self.next.fetch_add(1, Ordering::Relaxed));
        let tree = self.db.open_tree(&name)?;
        Ok(Arc::new(SledArchive {
            db: self.db.clone(),
            tree,
            name,
        }))
    }
}

/// One generation: a sled tree, its keys prefixed by their space's tag.
struct SledArchive {
    db: sled::Db,
    tree: sled::Tree,
    name: String,
}

/// A failed write or read of the archive: the node cannot go on answering.
fn fatal(error: sled::Error) -> ! {
    tracing::error!(%error, "the state's archive failed: stopping (a restart rebuilds it from the snapshot and the log)");
    std::process::abort()
}

impl Archive for SledArchive {
    fn get(&self, space: Space, key: &[u8]) -> Option<Vec<u8>> {
        match self.tree.get(tagged(space, key)) {
            Ok(value) => value.map(|v| v.to_vec()),
            Err(error) => fatal(error),
        }
    }

    fn insert(&self, space: Space, key: &[u8], value: &[u8]) {
        if let Err(error) = self.tree.insert(tagged(space, key), value) {
            fatal(error);
        }
    }

    fn remove(&self, space: Space, key: &[u8]) {
        if let Err(error) = self.tree.remove(tagged(space, key)) {
            fatal(error);
        }
    }

    fn scan(
        &self,
        space: Space,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        visit: Visit<'_>,
    ) {
        let mut range = self.tree.range::<Vec<u8>, _>(tagged_range(space, from, to));
        loop {
            let next = match reverse {
                false => range.next(),
                true => range.next_back(),
            };
            match next {
                None => return,
                Some(Err(error)) => fatal(error),
                Some(Ok((key, value))) => {
                    if !visit(&key[1..], &value) {
                        return;
                    }
                }
            }
        }
    }
}

impl Drop for SledArchive {
    fn drop(&mut self) {
        if let Err(error) = self.db.drop_tree(&self.name) {
            tracing::warn!(%error, tree = %self.name, "an old archive was not removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_reads_back_in_order_and_goes_when_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let archives = Archives::open(&dir.path().join("archive")).expect("opens");
        let archive = archives.fresh().expect("fresh");
        archive.insert(Space::ExactlyOnce, b"b", b"1");
        archive.insert(Space::ExactlyOnce, b"a", b"2");
        archive.insert(Space::ExactlyOnce, b"c", b"3");
        archive.remove(Space::ExactlyOnce, b"c");
        assert_eq!(archive.get(Space::ExactlyOnce, b"a"), Some(b"2".to_vec()));
        assert_eq!(archive.get(Space::ExactlyOnce, b"c"), None);
        let mut seen = Vec::new();
        archive.scan(
            Space::ExactlyOnce,
            Bound::Unbounded,
            Bound::Included(b"b"),
            true,
            &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                true
            },
        );
        assert_eq!(
            seen,
            [
                (b"b".to_vec(), b"1".to_vec()),
                (b"a".to_vec(), b"2".to_vec())
            ]
        );
        let other = archives.fresh().expect("another");
        let mut empty = true;
        other.scan(
            Space::ExactlyOnce,
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            &mut |_, _| {
                empty = false;
                false
            },
        );
        assert!(empty);
        drop(archive);
        assert_eq!(
            archives
                .db
                .tree_names()
                .iter()
                .filter(|n| n.starts_with(b"generation."))
                .count(),
            1
        );
    }
}
