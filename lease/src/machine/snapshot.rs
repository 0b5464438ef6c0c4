//! The state as snapshots hold it: the O(1) copy a snapshot encodes and the derived indexes
//! rebuilt on load. The readers of older formats are in `lease::legacy`.

use super::super::history::Event;
use super::super::types::Name;
use super::indexes::{Indexes, LeasesLoading};
use super::State;

impl State {
    /// What a snapshot holds: the replicated fields, without the derived indexes (loading
    /// rebuilds them). O(1) but for the event log's chunk list and the cold chunks' counts
    /// (a few bytes a chunk of 16 idle resources): the resources are a
    /// persistent map, shared with this state until apply changes them, and the exactly-once
    /// records and the events are in the archive.
    pub fn snapshot_copy(&self) -> State {
        State {
            clock: self.clock.clone(),
            resources: self.resources.clone(),
            dedup: self.dedup.snapshot_copy(),
            log: self.log.snapshot_copy(),
            cold: self.cold.snapshot_copy(),
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

    /// Rebuilds the derived indexes of a copy ([`State::snapshot_copy`]).
    pub fn restored(self) -> Self {
        self.rebuilt()
    }

    /// Rebuilds the derived indexes after deserializing a snapshot, and puts the events its
    /// resources held (`loaded`, see [`super::stored::decoding`]) in the event log, in
    /// delivery order.
    pub(crate) fn restored_with(mut self, mut loaded: Vec<(Name, Event)>) -> Self {
        loaded.sort_by(|(a, x), (b, y)| (x.revision, a, x.seq).cmp(&(y.revision, b, y.seq)));
        for (name, event) in loaded {
            let Some(rs) = self.resources.get_mut(&name).map(std::sync::Arc::make_mut) else {
                continue;
            };
            let kept = rs.keep_loaded(&event);
            self.log.append(&name, event, kept.cost.into());
        }
        self.log.settle();
        let mut state = self.rebuilt();
        state.cool_all_idle();
        state
    }

    /// The derived indexes built again.
    fn rebuilt(self) -> Self {
        self.rebuilt_with(None)
    }

    /// The derived indexes built again; with `exactly_once`, what each principal's
    /// exactly-once records cost, as a format-9 snapshot carries it (else counted from them).
    pub(super) fn rebuilt_with(mut self, exactly_once: Option<Vec<(Name, u64)>>) -> Self {
        // Built again through the methods apply keeps them with. First: each lease names its
        // session again, and a lease on a session is not due.
        self.indexes = Indexes::default();
        self.restore_sessions();
        // Most resources hold one lease: room for that many, not grown from none.
        let mut leases = LeasesLoading::with_capacity(self.resources.len());
        for (name, rs) in self.resources.iter() {
            let grace_ms = self.policy_in(rs).renewal_grace_ms;
            let indexes = &mut self.indexes;
            for l in &rs.leases {
                leases.add(name, l, grace_ms);
            }
            for w in &rs.rare().waiters {
                indexes.track_wait(name, w);
            }
            for b in &rs.rare().bookings {
                indexes.track_booking(name, b.end_wall_ms());
            }
            let closed_until_ms = rs.rare().closed_until_ms;
            if closed_until_ms > self.clock.now_ms() {
                indexes.closed_until(name, closed_until_ms, closed_until_ms);
            }
        }
        self.indexes.load_leases(leases);
        self.recount_usage_with(exactly_once);
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
            .filter_map(|(name, rs)| Some((name, rs.trimmed_through()?)))
            .chain(self.cold.trims())
            .map(|(name, (revision, seq))| (revision, name.clone(), seq))
            .filter(|position| Some(position) > self.dropped_last.as_ref())
            .collect();
        self
    }
}
