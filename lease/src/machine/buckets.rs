//! A persistent ordered map from names, in buckets: runs of up to [`BUCKET`] entries in
//! order, each in one exactly sized allocation, shared with a snapshot's copy until either
//! changes it. The hot resources ([`super::State`]) and the cold resources' stubs
//! ([`super::cold`]) are kept in one. A persistent ordered map of the entries themselves
//! costs a tree node per few dozen entries, and its leaves are half empty when names come
//! mostly in order (a soak's fresh names, a scale run's `scale/<n>`): 80 bytes a resource
//! beside its 32-byte entry, about 150 a stub beside its 56. A bucket costs its entries and a
//! few words. Cloning the map (a snapshot's copy) is O(1); a change copies one bucket if a
//! copy still shares it.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;

use crate::types::Name;

/// Most names in a bucket: a change rewrites at most this many entries (3.5 KiB of stubs,
/// 2 KiB of resources).
const BUCKET: usize = 64;

type Bucket<V> = Arc<Vec<(Name, V)>>;

/// An ordered map from a name to a small `V` (a pointer, a stub), in buckets keyed by their
/// first name.
#[derive(Clone, Debug)]
pub(crate) struct Buckets<V: Clone> {
    buckets: OrdMap<Name, Bucket<V>>,
    len: usize,
}

impl<V: Clone> Default for Buckets<V> {
    fn default() -> Self {
        Buckets {
            buckets: OrdMap::new(),
            len: 0,
        }
    }
}

impl<V: Clone> Buckets<V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bucket `name` belongs in: the last whose first name is not after it, else the
    /// first.
    fn bucket_of(&self, name: &str) -> Option<(&Name, &Bucket<V>)> {
        self.buckets
            .get_prev(name)
            .or_else(|| self.buckets.get_min().map(|(k, v)| (k, v)))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        let (_, bucket) = self.bucket_of(name)?;
        let at = bucket
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&bucket[at].1)
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The value of `name`, to change: its bucket (and the map's path to it) is copied first
    /// if a copy shares it. A name the map does not hold copies nothing.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        // A name before the first bucket's first name is in none.
        let (key, bucket) = self.buckets.get_prev(name)?;
        let at = bucket
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        let key = key.clone();
        let bucket = self.buckets.get_mut(&key)?;
        Some(&mut Arc::make_mut(bucket)[at].1)
    }

    /// The value of `name`, to change, `make`'s if it had none.
    pub(crate) fn get_or_insert_with(&mut self, name: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.contains_key(name) {
            self.insert(Name::from(name), make());
        }
        match self.get_mut(name) {
            Some(value) => value,
            None => unreachable!("{name} was just inserted"),
        }
    }

    /// Takes the bucket keyed `key` out to change it, unshared (copied if a copy shares it).
    fn take(&mut self, key: &Name) -> Vec<(Name, V)> {
        let bucket = self.buckets.remove(key).unwrap_or_default();
        Arc::try_unwrap(bucket).unwrap_or_else(|shared| (*shared).clone())
    }

    /// Puts `entries` (in order) back as buckets of at most [`BUCKET`], each sized exactly.
    fn put_back(&mut self, mut entries: Vec<(Name, V)>) {
        while entries.len() > BUCKET {
            let rest = entries.split_off(entries.len() / 2);
            self.put_one(entries);
            entries = rest;
        }
        self.put_one(entries);
    }

    fn put_one(&mut self, mut entries: Vec<(Name, V)>) {
        if let Some((first, _)) = entries.first() {
            let key = first.clone();
            entries.shrink_to_fit();
            self.buckets.insert(key, Arc::new(entries));
        }
    }

    /// Sets `name` to `value`; returns the value it had.
    pub(crate) fn insert(&mut self, name: Name, value: V) -> Option<V> {
        let found = self.bucket_of(&name).map(|(k, _)| k.clone());
        let Some((key, bucket)) =
            found.and_then(|key| Some((key.clone(), self.buckets.get_mut(&key)?)))
        else {
            self.len += 1;
            self.put_one(vec![(name, value)]);
            return None;
        };
        let at = match bucket.binary_search_by(|(n, _)| n.cmp(&name)) {
            Ok(at) => return Some(std::mem::replace(&mut Arc::make_mut(bucket)[at].1, value)),
            Err(at) => at,
        };
        self.len += 1;
        // In place when the bucket keeps its first name and has room; else taken out,
        // re-keyed and split as need be.
        if at > 0 && bucket.len() < BUCKET {
            let entries = Arc::make_mut(bucket);
            entries.reserve_exact(1);
            entries.insert(at, (name, value));
            return None;
        }
        let mut entries = self.take(&key);
        entries.reserve_exact(1);
        entries.insert(at, (name, value));
        self.put_back(entries);
        None
    }

    /// Removes `name`; returns its value. A bucket left with few names joins the next.
    pub(crate) fn remove(&mut self, name: &str) -> Option<V> {
        let (key, bucket) = self.bucket_of(name)?;
        let at = bucket
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        let key = key.clone();
        if at > 0 && bucket.len() > BUCKET / 4 {
            // In place: the bucket keeps its first name and enough names.
            let entries = Arc::make_mut(self.buckets.get_mut(&key)?);
            let (_, value) = entries.remove(at);
            entries.shrink_to_fit();
            self.len -= 1;
            return Some(value);
        }
        let mut entries = self.take(&key);
        let (_, value) = entries.remove(at);
        self.len -= 1;
        if entries.len() < BUCKET / 4 {
            let next = self
                .buckets
                .get_next(&key)
                .map(|(k, b)| (k.clone(), b.len()));
            if let Some((next, len)) = next.filter(|(_, len)| entries.len() + len <= BUCKET) {
                entries.reserve_exact(len);
                entries.extend(self.take(&next));
            }
        }
        self.put_back(entries);
        Some(value)
    }

    /// Every value, by name.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, value)| value)
    }

    /// Every entry, by name: as many as the map holds, said up front (an encoder asks).
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = (&Name, &V)> + '_ {
        Counted {
            entries: (self.buckets.values()).flat_map(|bucket| bucket.iter().map(|(n, v)| (n, v))),
            left: self.len,
        }
    }

    /// The entries from `start` on, by name.
    pub(crate) fn range_from(&self, start: Bound<Name>) -> impl Iterator<Item = (&Name, &V)> + '_ {
        let from = match &start {
            Bound::Included(name) | Bound::Excluded(name) => {
                self.bucket_of(name).map(|(k, _)| k.clone())
            }
            Bound::Unbounded => None,
        };
        let buckets = match from {
            Some(key) => self.buckets.range(key..),
            None => self.buckets.range::<_, Name>(..),
        };
        buckets
            .flat_map(|(_, bucket)| bucket.iter().map(|(n, v)| (n, v)))
            .skip_while(move |(name, _)| match &start {
                Bound::Included(s) => *name < s,
                Bound::Excluded(s) => *name <= s,
                Bound::Unbounded => false,
            })
    }
}

/// Entries and how many are left.
struct Counted<I> {
    entries: I,
    left: usize,
}

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let entry = self.entries.next()?;
        self.left = self.left.saturating_sub(1);
        Some(entry)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator> ExactSizeIterator for Counted<I> {}

impl<V: Clone> FromIterator<(Name, V)> for Buckets<V> {
    /// From entries in any order; a name given twice keeps its last value.
    fn from_iter<I: IntoIterator<Item = (Name, V)>>(entries: I) -> Self {
        let mut deduped: Vec<(Name, V)> = entries.into_iter().collect();
        // A snapshot's are in order already: nothing to sort or drop.
        if !deduped.windows(2).all(|w| w[0].0 < w[1].0) {
            // Stable: equal names keep their order; of each, the last value stays (in the
            // first's place, which `dedup_by` keeps).
            deduped.sort_by(|a, b| a.0.cmp(&b.0));
            deduped.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(&mut later.1, &mut kept.1);
                }
                same
            });
        }
        let mut stubs = Buckets {
            len: deduped.len(),
            ..Buckets::default()
        };
        let mut rest = deduped.into_iter().peekable();
        while rest.peek().is_some() {
            // Three quarters full: room to grow before the first split.
            stubs.put_one(rest.by_ref().take(BUCKET * 3 / 4).collect());
        }
        stubs
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A short name (inline) or, for odd `n`, one longer than a `Name` holds inline.
    fn name(n: u64) -> Name {
        match n % 2 {
            0 => Name::from(format!("r/{n}")),
            _ => Name::from(format!("r/{n}/a-name-longer-than-twenty-four-bytes")),
        }
    }

    /// The buckets agree with a plain ordered map under random inserts and removes, from a
    /// map collected at once, through copies taken on the way (which keep what they saw), and
    /// every bucket is in order, non-empty, at most BUCKET long and keyed by its first name.
    #[test]
    fn buckets_behave_as_an_ordered_map() {
        let first: Vec<(Name, u64)> = (0..1_000u64).map(|n| (name(n * 3), n)).collect();
        let mut stubs: Buckets<u64> = first.iter().cloned().collect();
        let mut model: BTreeMap<Name, u64> = first.into_iter().collect();
        let mut copies = Vec::new();
        let mut x: u64 = 12345;
        for step in 0..40_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let name = name(x % 3_000);
            if x % 5 < 2 {
                assert_eq!(stubs.insert(name.clone(), step), model.insert(name, step));
            } else if x % 5 == 2 {
                // Changed in place, or made: never seen by the copies taken before.
                *stubs.get_or_insert_with(&name, || step) += 1;
                *model.entry(name.clone()).or_insert(step) += 1;
                assert_eq!(stubs.get_mut(&name).copied(), model.get(&name).copied());
            } else {
                assert_eq!(stubs.remove(&name), model.remove(&name));
            }
            if step % 5_000 == 0 {
                copies.push((stubs.clone(), model.clone()));
            }
        }
        copies.push((stubs, model));
        for (stubs, model) in &copies {
            assert_eq!(stubs.len(), model.len());
            assert_eq!(stubs.iter().len(), model.len());
            let all: Vec<(Name, u64)> = stubs.iter().map(|(n, v)| (n.clone(), *v)).collect();
            let expected: Vec<(Name, u64)> = model.iter().map(|(n, v)| (n.clone(), *v)).collect();
            assert_eq!(all, expected);
            for (key, bucket) in stubs.buckets.iter() {
                assert!(!bucket.is_empty() && bucket.len() <= BUCKET);
                assert_eq!(&bucket[0].0, key);
                assert!(bucket.windows(2).all(|w| w[0].0 < w[1].0));
            }
            for probe in ["", "r/1", "r/1500", "r/2999", "r/5", "r/7/b", "s"] {
                let probe = Name::from(probe);
                for bound in [
                    Bound::Included(probe.clone()),
                    Bound::Excluded(probe.clone()),
                ] {
                    let got: Vec<&Name> = stubs.range_from(bound.clone()).map(|(n, _)| n).collect();
                    let want: Vec<&Name> = model
                        .range((bound, Bound::Unbounded))
                        .map(|(n, _)| n)
                        .collect();
                    assert_eq!(got, want);
                }
                assert_eq!(stubs.get(&probe), model.get(&probe));
            }
        }
        let rebuilt: Buckets<u64> = copies[0].1.clone().into_iter().collect();
        assert!(rebuilt.iter().eq(copies[0].0.iter()));
    }

    /// A name given twice to `from_iter` keeps its last value.
    #[test]
    fn collected_twice_keeps_the_last() {
        let stubs: Buckets<u32> = [("b".into(), 1), ("a".into(), 2), ("b".into(), 3)]
            .into_iter()
            .collect();
        assert_eq!(stubs.len(), 2);
        assert_eq!(stubs.get("b"), Some(&3));
    }
}
