//! Admission from the waiting room (SPEC §4.7): the entry that frees capacity, or whose time
//! ends a wait, lets the head of each touched room in, in that same entry, whose index is the
//! admitted lease's token.

use std::sync::Arc;

use super::history::{self, Event, EventKind};
use super::machine::State;
use super::types::{AcquireOutcome, Held, Lease, LeaseView, Name, Refusal};
use super::waiting::Waiter;

impl State {
    /// Ends every wait whose timeout has passed on the lease clock.
    pub(super) fn settle_waits(&mut self, index: u64) {
        let now_ms = self.clock.now_ms();
        while let Some((resource, wait_id)) = self.indexes.take_wait_timeout(now_ms) {
            let at = self
                .resources
                .get(&resource)
                .and_then(|rs| rs.rare().waiters.iter().position(|w| w.wait_id == wait_id));
            if let Some(at) = at {
                self.end_wait(
                    index,
                    history::SYSTEM_ACTOR,
                    &resource,
                    at,
                    Refusal::WaitTimeout,
                );
            }
        }
        while let Some(resource) = self.indexes.take_reopened(now_ms) {
            self.effects.touched.insert(resource);
        }
    }

    /// Admits waiters of every resource this entry touched, head first, while they fit. A
    /// multi-wait admitted touches its other rooms, whose next waiters are considered too.
    pub(super) fn admit_touched(&mut self, index: u64) {
        while let Some(resource) = self.effects.touched.pop_first() {
            self.admit(index, &resource);
        }
    }

    pub(super) fn admit(&mut self, index: u64, resource: &str) {
        loop {
            let Some(rs) = self.resources.get(resource) else {
                return;
            };
            let Some(head) = rs.rare().waiters.front() else {
                return;
            };
            // A wait on a session past its grace (that the reclaim budget left for later) is
            // never admitted: its session ends now, and the wait with it.
            if let Some(id) = head.session {
                let count = rs.rare().waiters.len();
                self.settle_session(index, id.get());
                let left = self
                    .resources
                    .get(resource)
                    .map_or(0, |rs| rs.rare().waiters.len());
                if left < count {
                    continue;
                }
            }
            let Some(rs) = self.resources.get(resource) else {
                return;
            };
            let Some(head) = rs.rare().waiters.front() else {
                return;
            };
            // A multi-wait at the head is admitted in every room at once, or waits on.
            if let Some(id) = self.group_of(head) {
                if self.admit_group(index, id) {
                    continue;
                }
                return;
            }
            if self.refusal_of_head(resource, head).is_some() {
                return;
            }
            let Some(waiter) = self
                .resources
                .get_mut(resource)
                .map(Arc::make_mut)
                .and_then(|rs| rs.rare_mut().waiters.pop_front())
            else {
                return;
            };
            self.indexes.untrack_wait(resource, &waiter);
            self.count_waiter(resource, &waiter, -1);
            let principal = waiter.principal.clone();
            let lease = self.lease_from(index, resource, waiter.clone());
            let view = self.grant(index, &principal, lease, EventKind::Admitted);
            self.wait_satisfied(resource, waiter, view);
        }
    }

    /// Why the head of `resource`'s room cannot be admitted now, if it cannot.
    pub(super) fn refusal_of_head(&self, resource: &str, head: &Waiter) -> Option<Refusal> {
        // A lease on a session has no end of its own: every booking ahead is in its way.
        let reach_ms = match head.session {
            Some(_) => u64::MAX,
            None => head.ttl_ms,
        };
        self.blocked(resource, head.mode, head.units, reach_ms, &head.holder)
    }

    /// The lease a claim (a wait, or a request made one) gets when granted by entry `index`.
    pub(super) fn lease_from(&mut self, index: u64, resource: &str, claim: Waiter) -> Lease {
        let now_ms = self.clock.now_ms();
        Lease {
            resource: Name::from(resource),
            held: Held {
                position: self.next_position(),
                holder: claim.holder,
                principal: claim.principal,
                mode: claim.mode,
                units: claim.units,
                fencing_token: index,
                acquired_at_ms: now_ms,
                expires_at_ms: now_ms.saturating_add(claim.ttl_ms),
                ttl_ms: claim.ttl_ms,
                acquired_wall_ms: self.clock.wall_ms(),
                metadata: claim.metadata,
                idempotency_key: claim.idempotency_key.map(Box::new),
                session: claim.session,
            },
        }
    }

    /// A holder that waits here just got a lease on the resource (a transfer to it): its
    /// wait is over, admitted with that lease, and history says so.
    pub(super) fn waiter_got_lease(
        &mut self,
        index: u64,
        actor: &str,
        resource: &str,
        view: LeaseView,
    ) {
        let Some((position, waiter)) = self.waiting(resource, &view.lease.holder) else {
            return;
        };
        let at = position as usize - 1;
        // A wait on a session asked for a lease that lives on the session, and the transferred
        // lease is the holder's own (SPEC §4.24); a multi-wait asked for all of its resources
        // together (SPEC §4.25).
        if waiter.mode != view.lease.mode
            || waiter.units != view.lease.units
            || waiter.session.is_some()
            || self.group_of(waiter).is_some()
        {
            // It holds the resource now, but not as it asked: its wait is over, unanswered.
            self.end_wait(index, actor, resource, at, Refusal::WaitCancelled);
            return;
        }
        let Some(rs) = self.resources.get_mut(resource).map(Arc::make_mut) else {
            return;
        };
        if let Some(waiter) = rs.rare_mut().waiters.remove(at) {
            self.indexes.untrack_wait(resource, &waiter);
            self.count_waiter(resource, &waiter, -1);
            let event = Event::about(EventKind::Admitted, &view.lease, None, Some(view.status));
            self.record(index, actor, resource, event);
            self.wait_satisfied(resource, waiter, view);
            // The next waiter is the head now.
            self.effects.touched.insert(Name::from(resource));
        }
    }

    pub(super) fn wait_satisfied(&mut self, resource: &str, waiter: Waiter, view: LeaseView) {
        self.wait_ended(resource, waiter, AcquireOutcome::granted(view));
    }
}
