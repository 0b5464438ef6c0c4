//! The state's derived indexes: what apply keeps beside the replicated fields so that the next
//! thing time decides (a reclaim, a wait's timeout, a lock delay's end, a booking's end, a
//! session's end) and a listing by holder or principal are one ordered lookup away. Snapshots
//! do not hold them: `State::restored` builds them again through the same methods apply uses,
//! and the property test holds the two equal after every step.
//!
//! The fields are private: each index changes only through the methods below, which own its
//! key's shape (a lease's due key, a waiter's) and keep what goes together together (a live
//! lease is listed under its holder and its principal at once).

use std::collections::BTreeSet;

use super::super::types::{Held, LeaseId, Name, WrittenOrder};
use super::super::waiting::Waiter;
use super::index::{LeaseIndex, LeaseIndexLoading};
use super::packed::PackedSet;

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// (expires_at + grace, resource, lease id) of every live lease not on a session: the
    /// next reclaim is first.
    due: PackedSet<DueKey>,
    /// Live leases on sessions (due with their session, so not in `due`).
    on_sessions: usize,
    /// (expires_at + grace, session) of every live session.
    session_due: BTreeSet<(u64, u64)>,
    /// (timeout, resource, wait id) of every waiter.
    wait_due: BTreeSet<(u64, Name, u64)>,
    /// (lock delay end, resource) of resources a reclaim closed, until the delay ends.
    reopen: BTreeSet<(u64, Name)>,
    /// (window end on the wall clock, resource) of every booking.
    booking_ends: BTreeSet<(u64, Name)>,
    /// The live leases of each holder and of each principal, in `ListLeases` order.
    by_holder: LeaseIndex,
    by_principal: LeaseIndex,
}

/// The key that orders a live lease for reclaim: (due, resource, lease id). The key's order
/// decides which due leases an entry reclaims when more are due than it may reclaim, and
/// every release must pick the same ones: the id sorts as its written form
/// ([`WrittenOrder`]: as text, `lse_1000_0` before `lse_999_0`), as the text it once was.
type DueKey = (u64, Name, WrittenOrder);

fn due_key(resource: &str, lease: &Held, grace_ms: u64) -> DueKey {
    (
        lease.expires_at_ms.saturating_add(grace_ms),
        Name::from(resource),
        WrittenOrder(lease.lease_id()),
    )
}

fn wait_key(resource: &str, waiter: &Waiter) -> (u64, Name, u64) {
    (waiter.deadline_ms, resource.into(), waiter.wait_id)
}

/// Takes the first of `set` if `due` says it is due.
fn take_first<T: Ord + Clone>(set: &mut BTreeSet<T>, due: impl Fn(&T) -> bool) -> Option<T> {
    if set.first().is_some_and(due) {
        set.pop_first()
    } else {
        None
    }
}

/// Every live lease's place in the indexes, gathered to build them at once when a snapshot
/// loads: sorted and cut into full runs, instead of one insert a lease.
#[derive(Default)]
pub(crate) struct LeasesLoading {
    due: Vec<DueKey>,
    by_holder: LeaseIndexLoading,
    by_principal: LeaseIndexLoading,
}

impl LeasesLoading {
    /// Room for about `leases` leases.
    pub(crate) fn with_capacity(leases: usize) -> LeasesLoading {
        LeasesLoading {
            due: Vec::with_capacity(leases),
            ..LeasesLoading::default()
        }
    }

    /// A live lease, as [`Indexes::list`] and (not on a session) [`Indexes::track_lease`]
    /// would take it.
    pub(crate) fn add(&mut self, resource: &str, lease: &Held, grace_ms: u64) {
        if lease.session.is_none() {
            self.due.push(due_key(resource, lease, grace_ms));
        }
        self.by_holder.add(&lease.holder, resource);
        self.by_principal.add(&lease.principal, resource);
    }
}

impl Indexes {
    // Live leases.

    /// The live leases' indexes, none yet, built from every lease at once.
    pub(crate) fn load_leases(&mut self, loading: LeasesLoading) {
        debug_assert!(self.due.len() == 0 && self.by_holder == LeaseIndex::default());
        self.due = loading.due.into_iter().collect();
        self.by_holder = LeaseIndex::built(loading.by_holder);
        self.by_principal = LeaseIndex::built(loading.by_principal);
    }

    /// A live lease begins (`sign` 1) or ends (-1): listed under its holder and principal.
    pub(crate) fn list(&mut self, resource: &str, lease: &Held, sign: i64) {
        if sign > 0 {
            self.by_holder.insert(&lease.holder, resource);
            self.by_principal.insert(&lease.principal, resource);
        } else {
            self.by_holder.remove(&lease.holder, resource);
            self.by_principal.remove(&lease.principal, resource);
        }
    }

    pub(crate) fn by_holder(&self) -> &LeaseIndex {
        &self.by_holder
    }

    pub(crate) fn by_principal(&self) -> &LeaseIndex {
        &self.by_principal
    }

    /// A lease not on a session is due for reclaim at its end plus `grace_ms`.
    pub(crate) fn track_lease(&mut self, resource: &str, lease: &Held, grace_ms: u64) {
        self.due.insert(due_key(resource, lease, grace_ms));
    }

    pub(crate) fn untrack_lease(&mut self, resource: &str, lease: &Held, grace_ms: u64) {
        self.due.remove(&due_key(resource, lease, grace_ms));
    }

    pub(crate) fn next_lease_due_ms(&self) -> Option<u64> {
        self.due.first().map(|(due_ms, _, _)| *due_ms)
    }

    /// The first lease due at or before `now_ms`, no longer tracked: (resource, lease id).
    pub(crate) fn take_lease_due(&mut self, now_ms: u64) -> Option<(Name, LeaseId)> {
        let (due_ms, _, _) = self.due.first()?;
        if *due_ms > now_ms {
            return None;
        }
        self.due
            .pop_first()
            .map(|(_, name, lease_id)| (name, lease_id.0))
    }

    /// The leases due at or before `at_ms`, first due first: (resource, lease id).
    pub(crate) fn leases_due_by(&self, at_ms: u64) -> impl Iterator<Item = (&Name, LeaseId)> {
        self.due
            .iter()
            .take_while(move |(due_ms, _, _)| *due_ms <= at_ms)
            .map(|(_, name, lease_id)| (name, lease_id.0))
    }

    /// Live leases, on sessions or not.
    pub(crate) fn live_leases(&self) -> usize {
        self.due.len() + self.on_sessions
    }

    /// `n` live leases joined (`sign` 1) or left (-1) a session.
    pub(crate) fn on_sessions(&mut self, n: usize, sign: i64) {
        if sign > 0 {
            self.on_sessions += n;
        } else {
            self.on_sessions = self.on_sessions.saturating_sub(n);
        }
    }

    // Sessions.

    pub(crate) fn track_session(&mut self, key: (u64, u64)) {
        self.session_due.insert(key);
    }

    /// Whether it was tracked.
    pub(crate) fn untrack_session(&mut self, key: &(u64, u64)) -> bool {
        self.session_due.remove(key)
    }

    pub(crate) fn next_session_due_ms(&self) -> Option<u64> {
        self.session_due.first().map(|(due_ms, _)| *due_ms)
    }

    /// The first session due at or before `now_ms`, no longer tracked.
    pub(crate) fn take_session_due(&mut self, now_ms: u64) -> Option<u64> {
        take_first(&mut self.session_due, |(due_ms, _)| *due_ms <= now_ms).map(|(_, id)| id)
    }

    // Waits.

    pub(crate) fn track_wait(&mut self, resource: &str, waiter: &Waiter) {
        self.wait_due.insert(wait_key(resource, waiter));
    }

    pub(crate) fn untrack_wait(&mut self, resource: &str, waiter: &Waiter) {
        self.wait_due.remove(&wait_key(resource, waiter));
    }

    pub(crate) fn next_wait_timeout_ms(&self) -> Option<u64> {
        self.wait_due.first().map(|(ms, _, _)| *ms)
    }

    /// The first wait timed out at or before `now_ms`, no longer tracked: (resource, wait id).
    pub(crate) fn take_wait_timeout(&mut self, now_ms: u64) -> Option<(Name, u64)> {
        take_first(&mut self.wait_due, |(ms, _, _)| *ms <= now_ms)
            .map(|(_, resource, wait_id)| (resource, wait_id))
    }

    /// Waiters in all waiting rooms.
    pub(crate) fn waiters(&self) -> usize {
        self.wait_due.len()
    }

    // Lock delays.

    /// `resource`'s lock delay ends at `until_ms` (it ended at `was_ms` before, if it had one).
    pub(crate) fn closed_until(&mut self, resource: &Name, was_ms: u64, until_ms: u64) {
        self.reopen.remove(&(was_ms, resource.clone()));
        self.reopen.insert((until_ms, resource.clone()));
    }

    /// `resource` is forgotten: its lock delay (ending at `until_ms`) with it.
    pub(crate) fn forget_closed(&mut self, resource: &Name, until_ms: u64) {
        self.reopen.remove(&(until_ms, resource.clone()));
    }

    /// The resources whose lock delay ends, soonest first, with when.
    pub(crate) fn closed(&self) -> impl Iterator<Item = &(u64, Name)> {
        self.reopen.iter()
    }

    /// The first resource whose lock delay ended at or before `now_ms`, no longer tracked.
    pub(crate) fn take_reopened(&mut self, now_ms: u64) -> Option<Name> {
        take_first(&mut self.reopen, |(until_ms, _)| *until_ms <= now_ms).map(|(_, name)| name)
    }

    // Bookings.

    pub(crate) fn track_booking(&mut self, resource: &str, end_wall_ms: u64) {
        self.booking_ends.insert((end_wall_ms, resource.into()));
    }

    pub(crate) fn untrack_booking(&mut self, resource: &str, end_wall_ms: u64) {
        self.booking_ends.remove(&(end_wall_ms, resource.into()));
    }

    /// The first resource with a booking whose window ended at or before `now_wall_ms`, no
    /// longer tracked (one key a booking: a resource with two comes twice).
    pub(crate) fn take_booking_ended(&mut self, now_wall_ms: u64) -> Option<Name> {
        take_first(&mut self.booking_ends, |(end, _)| *end <= now_wall_ms).map(|(_, name)| name)
    }
}
