//! Where one resource's retained events are, oldest first.

use std::collections::VecDeque;
use std::iter::Chain;
use std::slice::Iter;

use super::Kept;
use crate::machine::PushLean;

/// A resource's [`Kept`] positions, oldest first. Most resources keep one event while they
/// live (their grant): it sits inline, where a `VecDeque` would take an allocation of its own
/// (16 bytes, 16 MB at a million leases). From the second event on they are a `VecDeque`,
/// which a hot resource (up to [`super::PER_RESOURCE`] events) drops from the front of.
#[derive(Clone, Debug, Default)]
pub struct KeptEvents(Repr);

#[derive(Clone, Debug)]
enum Repr {
    One(Kept),
    Many(VecDeque<Kept>),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Many(VecDeque::new())
    }
}

// No bigger than the `VecDeque` alone: the inline event fits beside its capacity's niche.
const _: () = assert!(std::mem::size_of::<KeptEvents>() <= 32);

/// The positions in order.
pub type KeptIter<'a> = Chain<Iter<'a, Kept>, Iter<'a, Kept>>;

impl KeptEvents {
    /// The positions as two slices, the first then the second, like `VecDeque::as_slices`.
    fn as_slices(&self) -> (&[Kept], &[Kept]) {
        match &self.0 {
            Repr::One(kept) => (std::slice::from_ref(kept), &[]),
            Repr::Many(all) => all.as_slices(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::One(_) => 1,
            Repr::Many(all) => all.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn front(&self) -> Option<&Kept> {
        self.iter().next()
    }

    pub fn back(&self) -> Option<&Kept> {
        self.iter().next_back()
    }

    pub fn iter(&self) -> KeptIter<'_> {
        self.range_from(0)
    }

    /// The positions from the `from`th on (none if there are fewer).
    pub fn range_from(&self, from: usize) -> KeptIter<'_> {
        let (first, second) = self.as_slices();
        let split = from.min(first.len());
        let rest = (from - split).min(second.len());
        first[split..].iter().chain(second[rest..].iter())
    }

    /// How many positions from the front `pred` holds for, the positions partitioned by it.
    pub fn partition_point(&self, mut pred: impl FnMut(&Kept) -> bool) -> usize {
        let (first, second) = self.as_slices();
        let point = first.partition_point(&mut pred);
        if point < first.len() {
            point
        } else {
            point + second.partition_point(pred)
        }
    }

    /// Keeps `kept` after the others (growing by half, as [`PushLean`] does).
    pub fn push_lean(&mut self, kept: Kept) {
        match &mut self.0 {
            Repr::Many(all) if all.is_empty() => self.0 = Repr::One(kept),
            Repr::One(first) => {
                let mut all = VecDeque::with_capacity(2);
                all.push_back(*first);
                all.push_back(kept);
                self.0 = Repr::Many(all);
            }
            Repr::Many(all) => all.push_lean(kept),
        }
    }

    /// Drops the oldest position and returns it.
    pub fn pop_front(&mut self) -> Option<Kept> {
        match &mut self.0 {
            Repr::One(kept) => {
                let kept = *kept;
                self.0 = Repr::default();
                Some(kept)
            }
            Repr::Many(all) => all.pop_front(),
        }
    }

    /// Positions in this order, each kept exactly sized (as a snapshot's load makes them).
    pub(crate) fn from_exact(kept: impl ExactSizeIterator<Item = Kept>) -> Self {
        let mut kept = kept.peekable();
        match (kept.len(), kept.peek().copied()) {
            (1, Some(one)) => KeptEvents(Repr::One(one)),
            _ => KeptEvents(Repr::Many(kept.collect())),
        }
    }
}

impl PartialEq for KeptEvents {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for KeptEvents {}

impl<'a> IntoIterator for &'a KeptEvents {
    type Item = &'a Kept;
    type IntoIter = KeptIter<'a>;

    fn into_iter(self) -> KeptIter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(revision: u64) -> Kept {
        Kept {
            revision,
            seq: 0,
            cost: 200,
        }
    }

    /// Whatever is pushed and popped, the positions read as a `VecDeque` doing the same.
    #[test]
    fn reads_as_a_deque() {
        let mut events = KeptEvents::default();
        let mut model = VecDeque::new();
        // Pushes and pops that pass through none, one (inline) and many, and wrap the deque.
        let steps = [
            1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1,
        ];
        for (n, push) in steps.into_iter().enumerate() {
            if push == 1 {
                events.push_lean(kept(n as u64 + 1));
                model.push_back(kept(n as u64 + 1));
            } else {
                assert_eq!(events.pop_front(), model.pop_front());
            }
            assert_eq!(events.len(), model.len());
            assert!(events.iter().eq(model.iter()));
            assert!(events.iter().rev().eq(model.iter().rev()));
            assert_eq!(events.front(), model.front());
            assert_eq!(events.back(), model.back());
            for from in 0..=model.len() + 1 {
                assert!(events.range_from(from).eq(model.iter().skip(from)));
            }
            for bound in 0..=steps.len() as u64 + 1 {
                assert_eq!(
                    events.partition_point(|k| k.revision <= bound),
                    model.partition_point(|k| k.revision <= bound)
                );
            }
        }
    }

    #[test]
    fn one_event_is_inline_and_equal_to_one_in_a_deque() {
        let one = KeptEvents::from_exact([kept(7)].into_iter());
        assert!(matches!(one.0, Repr::One(_)));
        let mut grown = KeptEvents::from_exact([kept(6), kept(7)].into_iter());
        grown.pop_front();
        assert!(matches!(grown.0, Repr::Many(_)));
        assert_eq!(one, grown);
        assert_ne!(one, KeptEvents::default());
    }
}
