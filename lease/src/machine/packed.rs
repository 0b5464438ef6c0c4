//! An ordered set for the large derived indexes (the due leases, a principal's leases): its
//! items in sorted runs of up to [`BUCKET`], each run one exactly sized allocation, the runs
//! found by their first item.
//!
//! A `BTreeSet` leaves its nodes a half to two thirds full, and half when items come in
//! order, as the due keys of leases granted one after another do: at a million leases its
//! due index took ≈ 105 bytes a 56-byte key. Here a run that an append overfills keeps its
//! items and the newcomer starts the next one, a run overfilled in the middle splits in
//! two, a run that removes leave under a quarter full joins a neighbour that has room, and a
//! run is only ever as large as what it holds (mimalloc grows a block in place within its
//! size class). An insert or remove moves at most two runs' items.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Items per run, at most.
const BUCKET: usize = 64;

#[derive(Clone, Debug)]
pub(crate) struct PackedSet<T> {
    /// Each run by its first item.
    runs: BTreeMap<T, Vec<T>>,
    len: usize,
}

impl<T> Default for PackedSet<T> {
    fn default() -> Self {
        PackedSet {
            runs: BTreeMap::new(),
            len: 0,
        }
    }
}

/// The same items, however they are split into runs.
impl<T: Ord> PartialEq for PackedSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Ord> Eq for PackedSet<T> {}

/// Built at once: sorted, and cut into full runs.
impl<T: Ord + Clone> FromIterator<T> for PackedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut items: Vec<T> = items.into_iter().collect();
        items.sort_unstable();
        items.dedup();
        let len = items.len();
        let mut rest = items.into_iter().peekable();
        // In order: the map is built at once from its sorted entries.
        let runs = std::iter::from_fn(|| {
            rest.peek()?;
            let run: Vec<T> = rest.by_ref().take(BUCKET).collect();
            Some((run[0].clone(), run))
        })
        .collect();
        PackedSet { runs, len }
    }
}

impl<T: Ord> PackedSet<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn first(&self) -> Option<&T> {
        self.runs.first_key_value().map(|(first, _)| first)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.runs.values().flatten()
    }
}

impl<T: Ord + Clone> PackedSet<T> {
    /// The items past `bound` (at or after an `Included` item, after an `Excluded` one, all of
    /// them when `Unbounded`), in order.
    pub(crate) fn beyond(&self, bound: Bound<T>) -> impl Iterator<Item = &T> + '_ {
        let from = match &bound {
            Bound::Included(item) | Bound::Excluded(item) => self.run_key(item),
            Bound::Unbounded => None,
        };
        let runs = match from {
            Some(key) => self.runs.range((Bound::Included(key), Bound::Unbounded)),
            None => self.runs.range::<T, _>(..),
        };
        runs.flat_map(|(_, run)| run)
            .skip_while(move |item| match &bound {
                Bound::Included(from) => *item < from,
                Bound::Excluded(after) => *item <= after,
                Bound::Unbounded => false,
            })
    }

    /// The first item of the run that holds `item` or would: the last run starting at or
    /// before it (None: it comes before every run).
    fn run_key(&self, item: &T) -> Option<&T> {
        self.runs.range(..=item).next_back().map(|(key, _)| key)
    }

    /// Whether `item` was not there.
    pub(crate) fn insert(&mut self, item: T) -> bool {
        // The run that holds it or would, found once: the last starting at or before it, or
        // the first.
        let found = match self.runs.range_mut(..=&item).next_back() {
            Some(found) => Some(found),
            None => self.runs.iter_mut().next(),
        };
        let Some((key, run)) = found else {
            self.runs.insert(item.clone(), vec![item]);
            self.len = 1;
            return true;
        };
        let Err(at) = run.binary_search(&item) else {
            return false;
        };
        if run.len() == run.capacity() {
            run.reserve_exact(1);
        }
        run.insert(at, item);
        self.len += 1;
        if at > 0 && run.len() <= BUCKET {
            return true;
        }
        // A new first item (the run is found by it) or one too many: taken out to change.
        let key = key.clone();
        let last = self.runs.last_key_value().is_some_and(|(k, _)| *k == key);
        let Some(mut run) = self.runs.remove(&key) else {
            return true;
        };
        if run.len() > BUCKET {
            // Appended to the last run: it stays full and the newcomer begins the next.
            let keep = if last && at + 1 == run.len() {
                BUCKET
            } else {
                run.len() / 2
            };
            let tail = run.split_off(keep);
            run.shrink_to_fit();
            self.runs.insert(tail[0].clone(), tail);
        }
        self.runs.insert(run[0].clone(), run);
        true
    }

    /// Whether `item` was there.
    pub(crate) fn remove(&mut self, item: &T) -> bool {
        let Some((key, run)) = self.runs.range_mut(..=item).next_back() else {
            return false;
        };
        let Ok(at) = run.binary_search(item) else {
            return false;
        };
        run.remove(at);
        self.len -= 1;
        if at > 0 && run.len() >= BUCKET / 4 {
            if run.len() * 2 < run.capacity() {
                run.shrink_to_fit();
            }
            return true;
        }
        // A new first item (the run is found by it), or a run so small that it joins a
        // neighbour: taken out to change.
        let key = key.clone();
        let Some(mut run) = self.runs.remove(&key) else {
            return true;
        };
        let before = self.runs.range_mut(..&key).next_back();
        match before {
            Some((_, previous)) if previous.len() + run.len() <= BUCKET => {
                previous.reserve_exact(run.len());
                previous.append(&mut run);
            }
            _ => {
                let after = (self
                    .runs
                    .range::<T, _>((Bound::Excluded(&key), Bound::Unbounded)))
                .next()
                .filter(|(_, next)| next.len() + run.len() <= BUCKET)
                .map(|(next, _)| next.clone());
                if let Some(next) = after.and_then(|next| self.runs.remove(&next)) {
                    run.reserve_exact(next.len());
                    run.extend(next);
                }
                if run.len() * 2 < run.capacity() {
                    run.shrink_to_fit();
                }
                if let Some(first) = run.first() {
                    self.runs.insert(first.clone(), run);
                }
            }
        }
        true
    }

    /// Checks what the set keeps of itself (tests): every run holds 1 to [`BUCKET`] items in
    /// order, is found by its first, and ends before the next begins; the count is theirs.
    #[cfg(test)]
    fn check(&self) {
        let mut last: Option<&T> = None;
        let mut len = 0;
        for (key, run) in &self.runs {
            assert!(!run.is_empty() && run.len() <= BUCKET);
            assert!(key == &run[0]);
            assert!(run.windows(2).all(|w| w[0] < w[1]));
            assert!(last.is_none_or(|last| last < &run[0]));
            last = run.last();
            len += run.len();
        }
        assert_eq!(len, self.len);
    }

    pub(crate) fn pop_first(&mut self) -> Option<T> {
        let first = self.first()?.clone();
        self.remove(&first);
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A deterministic sequence of inserts and removes: the set answers as a `BTreeSet` does.
    #[test]
    fn it_holds_what_a_btree_set_holds_through_inserts_removes_and_appends() {
        let (mut packed, mut plain) = (PackedSet::default(), BTreeSet::new());
        let mut x: u64 = 1;
        for step in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Appends in order (due keys), then random inserts and removes.
            let item = match step % 4 {
                0 => 1_000_000 + step,
                _ => (x >> 33) % 3_000,
            };
            if step % 3 == 2 {
                assert_eq!(packed.remove(&item), plain.remove(&item), "remove {item}");
            } else {
                assert_eq!(packed.insert(item), plain.insert(item), "insert {item}");
            }
            if step % 97 == 0 {
                assert_eq!(packed.pop_first(), plain.pop_first());
            }
            assert_eq!(packed.len(), plain.len());
            assert_eq!(packed.first(), plain.first());
            packed.check();
        }
        assert!(packed.iter().eq(plain.iter()));
        let items = [0, 1_500, 2_999, 1_000_000, u64::MAX];
        // Items that are there and items that are not, each both ways.
        let bounds = (items.into_iter().chain(plain.iter().copied().step_by(37)))
            .flat_map(|item| [Bound::Included(item), Bound::Excluded(item)])
            .chain([Bound::Unbounded]);
        for bound in bounds {
            let expected: Vec<_> = plain.range((bound, Bound::Unbounded)).collect();
            assert!(packed.beyond(bound).eq(expected), "beyond {bound:?}");
        }
        let built: PackedSet<u64> = plain.iter().rev().copied().collect();
        assert_eq!(built, packed, "built at once or item by item: equal");
        assert!(packed
            .runs
            .values()
            .all(|run| !run.is_empty() && run.len() <= BUCKET));
        assert!(packed.runs.iter().all(|(key, run)| *key == run[0]));
    }

    #[test]
    fn runs_emptied_by_removes_join_their_neighbours() {
        let mut packed: PackedSet<u64> = (0..64 * 64).collect();
        // Every item but one in eight goes, from the middle of each run.
        for i in (0..64 * 64).filter(|i| i % 8 != 0) {
            assert!(packed.remove(&i));
            packed.check();
        }
        assert_eq!(packed.len(), 512);
        assert!(
            packed.runs.len() <= 512 / (BUCKET / 4),
            "{} runs",
            packed.runs.len()
        );
    }

    #[test]
    fn items_appended_in_order_fill_their_runs() {
        let mut packed = PackedSet::default();
        for i in 0..10 * BUCKET as u64 {
            packed.insert(i);
        }
        assert_eq!(packed.runs.len(), 10);
        assert!(packed.runs.values().all(|run| run.len() == BUCKET));
        assert!(packed.runs.values().all(|run| run.capacity() == BUCKET));
    }
}
