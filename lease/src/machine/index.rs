//! The live leases of each holder and of each principal, in `ListLeases` order.

use std::collections::{BTreeMap, HashMap};

use super::super::types::{Held, Name};
use super::packed::PackedSet;

/// One lease in an index: (resource, lease order).
type Posting = (Name, (u64, u32));

/// Live leases by one of their names (holder or principal), so that a listing of one
/// holder's or principal's leases reads only those, in its order.
///
/// Two levels, the name once: an entry per lease is its resource and order (40 bytes), not
/// the name beside them again (64). A name with one lease, the common case of holders, keeps
/// it inline instead of in a tree node of its own. The form is canonical (one lease is
/// always `One`), so an index rebuilt from a snapshot equals the one apply maintained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaseIndex(BTreeMap<Name, Postings>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Postings {
    One(Posting),
    Many(PackedSet<Posting>),
}

/// The leases of an index to build at once (a snapshot's load), in any order: each name's
/// postings are sorted when the index is built, and the names then (a hash map while a
/// million leases are added, one lookup each).
#[derive(Default)]
pub(crate) struct LeaseIndexLoading(HashMap<Name, Vec<Posting>>);

impl LeaseIndexLoading {
    pub(crate) fn add(&mut self, name: &str, resource: &str, lease: &Held) {
        let posting = LeaseIndex::posting(resource, lease);
        match self.0.get_mut(name) {
            Some(postings) => postings.push(posting),
            None => {
                self.0.insert(Name::from(name), vec![posting]);
            }
        }
    }
}

impl LeaseIndex {
    fn posting(resource: &str, lease: &Held) -> Posting {
        (Name::from(resource), (lease.fencing_token, lease.position))
    }

    pub(crate) fn insert(&mut self, name: &str, resource: &str, lease: &Held) {
        let posting = Self::posting(resource, lease);
        let Some(postings) = self.0.get_mut(name) else {
            self.0.insert(Name::from(name), Postings::One(posting));
            return;
        };
        match postings {
            Postings::Many(set) => {
                set.insert(posting);
            }
            Postings::One(first) if *first != posting => {
                let set = PackedSet::from_iter([first.clone(), posting]);
                *postings = Postings::Many(set);
            }
            Postings::One(_) => {}
        }
    }

    pub(crate) fn remove(&mut self, name: &str, resource: &str, lease: &Held) {
        let posting = Self::posting(resource, lease);
        let Some(postings) = self.0.get_mut(name) else {
            return;
        };
        match postings {
            Postings::One(only) if *only == posting => {
                self.0.remove(name);
            }
            Postings::One(_) => {}
            Postings::Many(set) => {
                set.remove(&posting);
                if set.len() == 1 {
                    let last = set.pop_first().expect("one left");
                    *postings = Postings::One(last);
                }
            }
        }
    }

    /// The index of every lease `loading` was given, built at once.
    pub(crate) fn built(loading: LeaseIndexLoading) -> LeaseIndex {
        LeaseIndex(
            (loading.0.into_iter())
                .map(|(name, postings)| {
                    let mut set: PackedSet<Posting> = postings.into_iter().collect();
                    // Canonical, as apply keeps it: one lease is `One`.
                    let postings = match set.len() {
                        1 => set.pop_first().map(Postings::One),
                        _ => None,
                    };
                    (name, postings.unwrap_or(Postings::Many(set)))
                })
                .collect(),
        )
    }

    /// The (resource, lease order) of `name`'s leases after `after`, in order.
    pub(crate) fn of<'a>(
        &'a self,
        name: &str,
        after: Option<(&str, (u64, u32))>,
    ) -> impl Iterator<Item = (&'a Name, (u64, u32))> + 'a {
        let beyond = move |(resource, order): &(&str, (u64, u32))| {
            after.is_none_or(|(r, o)| (*resource, *order) > (r, o))
        };
        let (one, many) = match self.0.get(name) {
            None => (None, None),
            Some(Postings::One((resource, order))) => (Some((resource, *order)), None),
            Some(Postings::Many(set)) => {
                let after = after.map(|(resource, order)| (Name::from(resource), order));
                (None, Some(set.after(after)))
            }
        };
        let one = one.filter(|(resource, order)| beyond(&(resource.as_str(), *order)));
        one.into_iter().chain(
            many.into_iter()
                .flatten()
                .map(|(resource, order)| (resource, *order)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Metadata, Mode};

    fn held(index: u64) -> Held {
        Held {
            position: 0,
            holder: "h".into(),
            principal: "p".into(),
            mode: Mode::Exclusive,
            units: 0,
            fencing_token: index,
            acquired_at_ms: 0,
            expires_at_ms: 1,
            ttl_ms: 1,
            acquired_wall_ms: 0,
            metadata: Metadata::default(),
            idempotency_key: None,
            session: None,
        }
    }

    fn listed(index: &LeaseIndex, after: Option<(&str, (u64, u32))>) -> Vec<(String, u64)> {
        index
            .of("h", after)
            .map(|(resource, (i, _))| (resource.to_string(), i))
            .collect()
    }

    #[test]
    fn a_name_lists_its_leases_by_resource_then_grant_order_after_a_cursor() {
        let mut index = LeaseIndex::default();
        for (resource, i) in [("b", 9), ("a", 30), ("b", 4), ("c", 1)] {
            index.insert("h", resource, &held(i));
        }
        index.insert("other", "a", &held(2));
        let all = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|(r, i)| (r.to_string(), *i)).collect()
        };
        assert_eq!(
            listed(&index, None),
            all(&[("a", 30), ("b", 4), ("b", 9), ("c", 1)])
        );
        assert_eq!(
            listed(&index, Some(("b", (4, 0)))),
            all(&[("b", 9), ("c", 1)])
        );
        assert_eq!(listed(&index, Some(("c", (1, 0)))), all(&[]));
        assert!(index.of("nobody", None).next().is_none());
    }

    #[test]
    fn the_form_is_canonical_whatever_came_and_went() {
        let mut maintained = LeaseIndex::default();
        for (resource, i) in [("a", 1), ("b", 2), ("c", 3)] {
            maintained.insert("h", resource, &held(i));
        }
        maintained.insert("h", "b", &held(2));
        maintained.remove("h", "a", &held(1));
        maintained.remove("h", "c", &held(3));
        maintained.remove("h", "c", &held(3));
        let mut rebuilt = LeaseIndex::default();
        rebuilt.insert("h", "b", &held(2));
        assert_eq!(maintained, rebuilt, "one lease left is kept inline");
        assert_eq!(listed(&rebuilt, Some(("a", (9, 0)))), vec![("b".into(), 2)]);
        assert_eq!(listed(&rebuilt, Some(("b", (2, 0)))), vec![]);

        maintained.remove("h", "b", &held(2));
        assert_eq!(
            maintained,
            LeaseIndex::default(),
            "a name without leases is gone"
        );
    }
}
