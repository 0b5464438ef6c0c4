//! Expiry: reclaiming what is past its grace (SPEC §4.4), and the bookkeeping of every lease
//! that ends, reclaimed or released.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::super::history::{self, Event, EventKind};
use super::super::types::{Held, LeaseId, LeaseStatus, LeaseView, Name};
use super::resource::Leases;
use super::{Ended, PushLean, State, ENDED_KEPT};

/// Due leases one entry reclaims at most, besides those of the resources its commands name: a
/// mass expiry is reclaimed over several entries (the leader proposes a `Reclaim` while any
/// lease is due), so that no entry holds the state for long. A lease past its grace that
/// waits for its turn holds nothing: a command on its resource reclaims it first, and reads
/// judge expiry by the clock.
pub const RECLAIMS_PER_ENTRY: usize = 1024;

impl State {
    /// Reclaims the live leases whose expiry and grace have passed on the lease clock, the
    /// longest due first, up to what is left of the entry's [`RECLAIMS_PER_ENTRY`].
    pub(super) fn settle_due(&mut self, index: u64) -> Vec<LeaseView> {
        let now_ms = self.clock.now_ms();
        let mut budget = RECLAIMS_PER_ENTRY.saturating_sub(self.effects.reclaimed);
        // What is due by now, by resource, so that each resource's leases are filtered once
        // however many of them expire together.
        let mut due: BTreeMap<Name, BTreeSet<LeaseId>> = BTreeMap::new();
        // Sessions past their grace, taken in due order with the leases: each ends whole.
        let mut sessions = Vec::new();
        while budget > 0 {
            let lease_due = self.indexes.next_lease_due_ms();
            let session_due = self
                .indexes
                .next_session_due_ms()
                .filter(|ms| *ms <= now_ms);
            if let Some(session_due_ms) = session_due {
                if lease_due.is_none_or(|lease_ms| session_due_ms < lease_ms) {
                    let Some(id) = self.indexes.take_session_due(now_ms) else {
                        break;
                    };
                    let carried = self
                        .session(id)
                        .map_or(0, |s| s.leases.len() + s.waits.len());
                    budget = budget.saturating_sub(carried.max(1));
                    sessions.push(id);
                    continue;
                }
            }
            let Some((name, lease_id)) = self.indexes.take_lease_due(now_ms) else {
                break;
            };
            due.entry(name).or_default().insert(lease_id);
            budget -= 1;
        }
        self.effects.reclaimed += due.values().map(BTreeSet::len).sum::<usize>();
        let mut reclaimed = self.end_sessions(index, &sessions);
        for (name, lease_ids) in due {
            let Some(rs) = self.resources.get_mut(&name).map(Arc::make_mut) else {
                continue;
            };
            let (gone, kept): (Leases, Leases) = std::mem::take(&mut rs.leases)
                .into_iter()
                .partition(|l| lease_ids.contains(&l.lease_id()));
            rs.leases = kept;
            for lease in gone {
                let actor = history::SYSTEM_ACTOR;
                let ended = self.lease_ended(index, actor, &name, lease, LeaseStatus::Reclaimed);
                reclaimed.push(ended);
            }
        }
        reclaimed
    }

    /// Reclaims the due leases of `name`, which a command is about to read or change: whatever
    /// the per-entry cap left for later, no command sees a lease past its grace.
    pub(super) fn settle_resource(&mut self, index: u64, name: &str) {
        // When nothing anywhere is due (the first of each due index is later), nothing of
        // this resource is: it is not looked up (at a million resources, most of a µs).
        let now_ms = self.clock.now_ms();
        let due_by_now = |due_ms: Option<u64>| due_ms.is_some_and(|due_ms| due_ms <= now_ms);
        if due_by_now(self.next_session_due_ms()) {
            self.settle_sessions_of(index, name);
        }
        if !due_by_now(self.indexes.next_lease_due_ms()) {
            return;
        }
        let Some(rs) = self.resources.get(name) else {
            return;
        };
        let grace_ms = self.policy_in(rs).renewal_grace_ms;
        // A lease on a session ends with its session (settled above).
        let is_due =
            |l: &Held| l.session.is_none() && l.expires_at_ms.saturating_add(grace_ms) <= now_ms;
        if !rs.leases.iter().any(is_due) {
            return;
        }
        let Some(rs) = self.resources.get_mut(name).map(Arc::make_mut) else {
            return;
        };
        let (gone, kept): (Leases, Leases) =
            std::mem::take(&mut rs.leases).into_iter().partition(is_due);
        rs.leases = kept;
        for lease in gone {
            let actor = history::SYSTEM_ACTOR;
            self.lease_ended(index, actor, name, lease, LeaseStatus::Reclaimed);
        }
    }

    /// Ends a live lease with `status` (released or reclaimed); returns how it looked then.
    pub(crate) fn end_lease(
        &mut self,
        index: u64,
        actor: &str,
        name: &str,
        lease_id: LeaseId,
        status: LeaseStatus,
    ) -> Option<LeaseView> {
        let rs = self.resources.get_mut(name).map(Arc::make_mut)?;
        let at = rs.leases.iter().position(|l| l.lease_id() == lease_id)?;
        let lease = rs.leases.remove(at);
        Some(self.lease_ended(index, actor, name, lease, status))
    }

    /// The bookkeeping of a lease just taken out of its resource's live list: expiry index,
    /// lock delay, revision, the ended list and history.
    fn lease_ended(
        &mut self,
        index: u64,
        actor: &str,
        name: &str,
        lease: Held,
        status: LeaseStatus,
    ) -> LeaseView {
        let now_ms = self.clock.now_ms();
        let mut lease = lease.into_lease(name);
        // A lease on a session ended when the session said.
        lease.expires_at_ms = self.expiry_of(&lease);
        let name = lease.resource.clone();
        let (policy, ad_hoc) = self.policy_and_ad_hoc(&name);
        let (grace_ms, lock_delay_ms) = (policy.renewal_grace_ms, policy.lock_delay_ms);
        self.count_lease(&name, &lease, ad_hoc, -1);
        self.indexes.untrack_lease(&name, &lease, grace_ms);
        if let Some(rs) = self.resources.get_mut(&name).map(Arc::make_mut) {
            if status == LeaseStatus::Reclaimed && lock_delay_ms > 0 {
                let was_ms = rs.rare().closed_until_ms;
                rs.rare_mut().closed_until_ms = was_ms.max(now_ms.saturating_add(lock_delay_ms));
                self.indexes
                    .closed_until(&name, was_ms, rs.rare().closed_until_ms);
            }
            rs.revision = index;
        }
        self.effects.touched.insert(name.clone());
        let was = if now_ms < lease.expires_at_ms {
            LeaseStatus::Active
        } else {
            LeaseStatus::Grace
        };
        let event = Event::about(
            match status {
                LeaseStatus::Released => EventKind::Released,
                _ => EventKind::Reclaimed,
            },
            &lease,
            Some(was),
            Some(status),
        );
        let ended = Ended {
            lease,
            status,
            at_ms: now_ms,
            superseded_by: None,
        };
        let view = self.ended_view(&ended);
        self.remember_ended(&name, ended);
        self.record(index, actor, &name, event);
        view
    }

    /// Keeps an ended lease, without its metadata: the ended list outlives the history that
    /// bounds metadata by bytes, and how a lease ended needs none of it. Nor its session: a
    /// snapshot does not keep it (its history events do), and every node must show the same.
    pub(crate) fn remember_ended(&mut self, name: &str, mut ended: Ended) {
        ended.lease.metadata = Default::default();
        ended.lease.session = None;
        if let Some(rs) = self.resources.get_mut(name).map(Arc::make_mut) {
            rs.ended.push_lean(ended);
            while rs.ended.len() > ENDED_KEPT {
                rs.ended.remove(0);
            }
        }
    }

    /// Starts tracking a granted lease's expiry.
    pub(crate) fn track_due(&mut self, resource: &str, lease: &Held) {
        let grace_ms = self.policy_of(resource).renewal_grace_ms;
        self.indexes.track_lease(resource, lease, grace_ms);
    }

    pub(crate) fn untrack_due(&mut self, resource: &str, lease: &Held) {
        let grace_ms = self.policy_of(resource).renewal_grace_ms;
        self.indexes.untrack_lease(resource, lease, grace_ms);
    }
}
