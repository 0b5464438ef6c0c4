//! The state as snapshots hold it: the O(1) copy a snapshot encodes and the derived indexes
//! rebuilt on load. The readers of older formats are in `lease::legacy`.

use std::collections::BTreeSet;

use super::super::history::Retention;
use super::super::types::Name;
use super::super::waiting::wait_due_key;
use super::{due_key, LeaseIndex, State};

impl State {
    /// What a snapshot holds: the replicated fields, without the derived indexes (loading
    /// rebuilds them). O(1): the resources and the exactly-once records are persistent
    /// maps, shared with this state until apply changes them.
    pub fn snapshot_copy(&self) -> State {
        State {
            clock: self.clock.clone(),
            resources: self.resources.clone(),
            dedup: self.dedup.snapshot_copy(),
            dropped_through: self.dropped_through,
            quotas: self.quotas.replicated(),
            dropped_last: self.dropped_last.clone(),
            sessions: self.sessions.clone(),
            groups: self.groups.clone(),
            history_total: self.history_total,
            history_total_bytes: self.history_total_bytes,
            rules: self.rules,
            ..State::with_default_policy(self.default_policy.clone())
        }
    }

    /// Rebuilds the derived indexes after deserializing a snapshot.
    pub fn restored(mut self) -> Self {
        // First: each lease names its session again, and a lease on a session is not due.
        self.restore_sessions();
        let mut due = BTreeSet::new();
        let mut wait_due = BTreeSet::new();
        let mut reopen = BTreeSet::new();
        let mut booking_ends = BTreeSet::new();
        let mut by_holder = LeaseIndex::default();
        let mut by_principal = LeaseIndex::default();
        for (name, rs) in &self.resources {
            let grace_ms = self.policy_of(name).renewal_grace_ms;
            for l in &rs.leases {
                if l.session.is_none() {
                    due.insert(due_key(l, grace_ms));
                }
                by_holder.insert(&l.holder, l);
                by_principal.insert(&l.principal, l);
            }
            for w in &rs.rare().waiters {
                wait_due.insert(wait_due_key(name, w));
            }
            for b in &rs.rare().bookings {
                booking_ends.insert((b.end_wall_ms(), name.clone()));
            }
            if rs.rare().closed_until_ms > self.clock.now_ms() {
                reopen.insert((rs.rare().closed_until_ms, name.clone()));
            }
        }
        self.recount_usage();
        self.due = due;
        self.wait_due = wait_due;
        self.reopen = reopen;
        self.booking_ends = booking_ends;
        self.by_holder = by_holder;
        self.by_principal = by_principal;
        self.retention = Retention::rebuild(self.resources.iter().map(|(n, rs)| (n, &rs.history)));
        if self.dropped_last.is_none() {
            // A format before the position was kept: every resource of that revision counts
            // as dropped (`~` sorts after every name), so a watch is told `compacted` rather
            // than miss an event.
            self.dropped_last = self
                .dropped_through
                .map(|(revision, seq)| (revision, Name::from("~"), seq));
        }
        // A trim newer than the global watermark is the per-resource bound's.
        self.trims = self
            .resources
            .iter()
            .filter_map(|(name, rs)| {
                let (revision, seq) = rs.trimmed_through()?;
                let position = (revision, name.clone(), seq);
                (Some(&position) > self.dropped_last.as_ref()).then_some(position)
            })
            .collect();
        self
    }
}
