//! The live leases of each holder and of each principal, in `ListLeases` order.

use std::collections::BTreeSet;

use super::super::types::{lease_order, Lease, Name};

/// Live leases by one of their names (holder or principal): (name, resource, lease order), so
/// that a listing of one holder's or principal's leases reads only those, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::lease) struct LeaseIndex(BTreeSet<(Name, Name, (u64, u32))>);

impl LeaseIndex {
    fn key(name: &str, lease: &Lease) -> (Name, Name, (u64, u32)) {
        // Every lease id is made by the server (`lse_<index>_<position>`) and parses.
        let order = lease_order(&lease.lease_id).unwrap_or((u64::MAX, u32::MAX));
        (Name::from(name), lease.resource.clone(), order)
    }

    pub(in crate::lease) fn insert(&mut self, name: &str, lease: &Lease) {
        self.0.insert(Self::key(name, lease));
    }

    pub(in crate::lease) fn remove(&mut self, name: &str, lease: &Lease) {
        self.0.remove(&Self::key(name, lease));
    }

    /// The (resource, lease order) of `name`'s leases after `after`, in order.
    pub(in crate::lease) fn of<'a>(
        &'a self,
        name: &'a str,
        after: Option<(&str, (u64, u32))>,
    ) -> impl Iterator<Item = (&'a Name, (u64, u32))> + 'a {
        let start = match after {
            Some((resource, order)) => {
                std::ops::Bound::Excluded((Name::from(name), Name::from(resource), order))
            }
            None => std::ops::Bound::Included((Name::from(name), Name::default(), (0, 0))),
        };
        self.0
            .range((start, std::ops::Bound::Unbounded))
            .take_while(move |(n, _, _)| n == name)
            .map(|(_, resource, order)| (resource, *order))
    }
}
