//! The live leases of each holder and of each principal, in `ListLeases` order.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use super::super::types::Name;
use super::packed::PackedSet;

/// Live leases by one of their names (holder or principal), so that a listing of one
/// holder's or principal's leases reads only those, in its order: the resources where the
/// name has leases, in order; a listing reads each resource's leases of the name from the
/// resource (a few: a holder holds at most one lease of a resource).
///
/// Two levels, the name once, and an entry per (name, resource) is the resource's name alone
/// (24 bytes; its lease order too was 40). A name with one resource, the common case of
/// holders, keeps it inline instead of in a tree node of its own. A principal whose holders
/// hold several leases of one resource has one entry for them, and the leases past the first
/// counted in `more`. The form is canonical (one resource is always `One`, `more` holds no
/// zero), so an index rebuilt from a snapshot equals the one apply maintained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaseIndex {
    names: BTreeMap<Name, Postings>,
    /// (name, resource) → the name's leases of the resource past the first.
    more: BTreeMap<(Name, Name), u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Postings {
    One(Name),
    Many(PackedSet<Name>),
}

/// The leases of an index to build at once (a snapshot's load), in any order: each name's
/// resources are sorted when the index is built, and the names then (a hash map while a
/// million leases are added, one lookup each).
#[derive(Default)]
pub(crate) struct LeaseIndexLoading(HashMap<Name, Vec<Name>>);

impl LeaseIndexLoading {
    /// A lease of `name`'s on `resource`.
    pub(crate) fn add(&mut self, name: &str, resource: &str) {
        let resource = Name::from(resource);
        match self.0.get_mut(name) {
            Some(resources) => resources.push(resource),
            None => {
                self.0.insert(Name::from(name), vec![resource]);
            }
        }
    }
}

impl LeaseIndex {
    /// A lease of `name`'s on `resource` begins.
    pub(crate) fn insert(&mut self, name: &str, resource: &str) {
        let Some(postings) = self.names.get_mut(name) else {
            let one = Postings::One(Name::from(resource));
            self.names.insert(Name::from(name), one);
            return;
        };
        let new = match postings {
            Postings::Many(set) => set.insert(Name::from(resource)),
            Postings::One(first) if first != resource => {
                let set = PackedSet::from_iter([first.clone(), Name::from(resource)]);
                *postings = Postings::Many(set);
                true
            }
            Postings::One(_) => false,
        };
        if !new {
            let key = (Name::from(name), Name::from(resource));
            *self.more.entry(key).or_default() += 1;
        }
    }

    /// A lease of `name`'s on `resource` ends.
    pub(crate) fn remove(&mut self, name: &str, resource: &str) {
        // Nearly always empty: no key is made for it then (two names, a lease's end).
        if !self.more.is_empty() {
            let key = (Name::from(name), Name::from(resource));
            if let Some(more) = self.more.get_mut(&key) {
                *more -= 1;
                if *more == 0 {
                    self.more.remove(&key);
                }
                return;
            }
        }
        let Some(postings) = self.names.get_mut(name) else {
            return;
        };
        match postings {
            Postings::One(only) if only == resource => {
                self.names.remove(name);
            }
            Postings::One(_) => {}
            Postings::Many(set) => {
                set.remove(&Name::from(resource));
                if set.len() == 1 {
                    let last = set.pop_first().expect("one left");
                    *postings = Postings::One(last);
                }
            }
        }
    }

    /// The index of every lease `loading` was given, built at once.
    pub(crate) fn built(loading: LeaseIndexLoading) -> LeaseIndex {
        let mut more = BTreeMap::new();
        let names = (loading.0.into_iter())
            .map(|(name, mut resources)| {
                resources.sort_unstable();
                // A resource listed again is one more lease of the name's there.
                for pair in resources.windows(2).filter(|pair| pair[0] == pair[1]) {
                    let key = (name.clone(), pair[0].clone());
                    *more.entry(key).or_insert(0) += 1;
                }
                resources.dedup();
                let postings = match resources.len() {
                    1 => Postings::One(resources.pop().expect("one")),
                    _ => Postings::Many(resources.into_iter().collect()),
                };
                (name, postings)
            })
            .collect();
        LeaseIndex { names, more }
    }

    /// The resources where `name` has leases, from `from` on (itself included), in order.
    pub(crate) fn of<'a>(
        &'a self,
        name: &str,
        from: Option<&str>,
    ) -> impl Iterator<Item = &'a Name> + 'a {
        let (one, many) = match self.names.get(name) {
            None => (None, None),
            Some(Postings::One(resource)) => (Some(resource), None),
            Some(Postings::Many(set)) => {
                let bound = from.map_or(Bound::Unbounded, |from| Bound::Included(from.into()));
                (None, Some(set.beyond(bound)))
            }
        };
        let one = one.filter(|resource| from.is_none_or(|from| resource.as_str() >= from));
        one.into_iter().chain(many.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(index: &LeaseIndex, name: &str, from: Option<&str>) -> Vec<String> {
        index.of(name, from).map(|r| r.to_string()).collect()
    }

    #[test]
    fn a_name_lists_its_resources_in_order_from_a_cursor() {
        let mut index = LeaseIndex::default();
        for resource in ["b", "a", "d", "c"] {
            index.insert("h", resource);
        }
        index.insert("other", "a");
        assert_eq!(listed(&index, "h", None), ["a", "b", "c", "d"]);
        assert_eq!(
            listed(&index, "h", Some("b")),
            ["b", "c", "d"],
            "the cursor's own"
        );
        assert_eq!(listed(&index, "h", Some("bb")), ["c", "d"]);
        assert_eq!(listed(&index, "h", Some("e")), Vec::<String>::new());
        assert_eq!(listed(&index, "other", Some("a")), ["a"]);
        assert_eq!(listed(&index, "other", Some("b")), Vec::<String>::new());
        assert!(index.of("nobody", None).next().is_none());
    }

    #[test]
    fn the_form_is_canonical_whatever_came_and_went() {
        let mut maintained = LeaseIndex::default();
        for resource in ["a", "b", "c", "b", "b"] {
            maintained.insert("p", resource);
        }
        assert_eq!(
            listed(&maintained, "p", None),
            ["a", "b", "c"],
            "one entry a resource"
        );
        for resource in ["a", "c", "c", "b"] {
            maintained.remove("p", resource);
        }
        let mut loading = LeaseIndexLoading::default();
        loading.add("p", "b");
        loading.add("p", "b");
        let rebuilt = LeaseIndex::built(loading);
        assert_eq!(
            maintained, rebuilt,
            "one resource left is kept inline, counted once more"
        );
        assert_eq!(listed(&rebuilt, "p", None), ["b"]);
        maintained.remove("p", "b");
        assert_eq!(
            listed(&maintained, "p", None),
            ["b"],
            "one lease of two ended"
        );
        maintained.remove("p", "b");
        assert_eq!(
            maintained,
            LeaseIndex::default(),
            "a name without leases is gone"
        );
    }
}
