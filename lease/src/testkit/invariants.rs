//! The invariants of SPEC §1 and §4 that hold after every entry, whatever the entries were:
//! checked by the node's property test of its request pipeline after each step.

use std::collections::{BTreeMap, BTreeSet};

use crate::machine::State;
use crate::types::{LeaseId, Mode, Name};

/// What the checks remember from one entry to the next.
#[derive(Default)]
pub struct Invariants {
    /// Per resource: the highest token of an exclusive lease ever live there.
    exclusive_high: BTreeMap<Name, u64>,
    /// Lease ids live after the previous entry.
    live_before: BTreeSet<LeaseId>,
    now_before_ms: u64,
}

impl Invariants {
    /// Checks `state` after the entry at `index`, the `n`th step of a run.
    pub fn check(&mut self, state: &State, index: u64, n: usize) {
        let now_ms = state.clock().now_ms();
        assert!(
            now_ms >= self.now_before_ms,
            "step {n}: the lease clock ran backwards"
        );
        self.now_before_ms = now_ms;
        let mut live = BTreeSet::new();
        let mut count = 0;
        for (name, rs) in state.resources.iter() {
            let policy = state.policy_of(name);
            let leases = &rs.leases;
            count += leases.len();
            if leases.iter().any(|l| l.mode == Mode::Exclusive) {
                assert_eq!(
                    leases.len(),
                    1,
                    "step {n}: {name}: exclusive shares: {leases:?}"
                );
            } else {
                for l in leases {
                    assert!(
                        policy.shared_modes.contains(&l.mode),
                        "step {n}: {name}: {l:?}"
                    );
                }
            }
            let units: u128 = leases.iter().map(|l| u128::from(l.units)).sum();
            assert!(
                units <= u128::from(policy.total_units),
                "step {n}: {name}: {units} units"
            );
            let holders: BTreeSet<&str> = leases.iter().map(|l| l.holder.as_str()).collect();
            assert_eq!(
                holders.len(),
                leases.len(),
                "step {n}: {name}: a holder twice"
            );
            let high = self.exclusive_high.get(name).copied().unwrap_or(0);
            for l in leases {
                assert!(
                    (1..=index).contains(&l.fencing_token),
                    "step {n}: {name}: token {} at index {index}",
                    l.fencing_token
                );
                if !self.live_before.contains(&l.lease_id()) {
                    // Granted (or transferred) by this entry: its token is this index, above
                    // every exclusive tenure the resource had.
                    assert_eq!(l.fencing_token, index, "step {n}: {name}: new lease {l:?}");
                    assert!(
                        l.fencing_token > high,
                        "step {n}: {name}: token not above {high}"
                    );
                }
                live.insert(l.lease_id());
                // Validate judges the live tenure by the committed clock.
                let v = state.validate(name, &l.lease_id().to_string(), l.fencing_token, None);
                let expected = if now_ms < l.expires_at_ms {
                    (true, "ok")
                } else {
                    (false, "lease expired")
                };
                assert_eq!((v.valid, v.reason.as_str()), expected, "step {n}: {l:?}");
            }
            if let Some(top) = leases
                .iter()
                .filter(|l| l.mode == Mode::Exclusive)
                .map(|l| l.fencing_token)
                .max()
            {
                self.exclusive_high.insert(name.clone(), high.max(top));
            }
            assert!(
                rs.revision <= index,
                "step {n}: {name}: revision from the future"
            );
            assert!(
                rs.history
                    .iter()
                    .zip(rs.history.iter().skip(1))
                    .all(|(a, b)| { a.revision <= b.revision && a.position() < b.position() }),
                "step {n}: {name}: history out of order"
            );
        }
        assert_eq!(state.live_leases(), count, "step {n}: live_leases()");
        check_event_log(state, n);
        check_waiting_rooms(state, n);
        // What apply keeps to find what time decides next, and listings, is what a snapshot
        // loaded here would build again.
        assert_eq!(
            state.snapshot_copy().restored().indexes,
            state.indexes,
            "step {n}: derived indexes"
        );
        self.live_before = live;
    }
}

/// Waiting rooms (SPEC §4.7): a waiter is never left behind room it could use (admission
/// happens in the entry that frees it), never outlives its wait_timeout, never holds a
/// lease on the same resource, and waits once.
fn check_waiting_rooms(state: &State, n: usize) {
    let now_ms = state.clock().now_ms();
    let mut waiting = 0;
    for (name, rs) in state.resources.iter() {
        waiting += rs.rare().waiters.len();
        if let Some(head) = rs.rare().waiters.front() {
            assert!(
                state
                    .blocked(name, head.mode, head.units, head.ttl_ms, &head.holder)
                    .is_some(),
                "step {n}: {name}: head waiter {head:?} fits but was not admitted"
            );
        }
        let holders: BTreeSet<&str> = rs
            .rare()
            .waiters
            .iter()
            .map(|w| w.holder.as_str())
            .collect();
        assert_eq!(
            holders.len(),
            rs.rare().waiters.len(),
            "step {n}: {name}: waits twice"
        );
        for w in &rs.rare().waiters {
            assert!(
                w.deadline_ms > now_ms,
                "step {n}: {name}: {w:?} outlived its wait"
            );
            assert!(
                rs.leases.iter().all(|l| l.holder != w.holder),
                "step {n}: {name}: {w:?} waits and holds"
            );
        }
    }
    assert_eq!(state.waiters(), waiting, "step {n}: waiters()");
}

/// The event log counts what the resources keep, holds every event they keep where they say,
/// and the same events read again in delivery order (a prefix watch's way).
pub fn check_event_log(state: &State, n: usize) {
    let reader = state.log.reader();
    let (mut len, mut bytes) = (0, 0);
    let mut kept = Vec::new();
    for (name, rs) in state.all_resources_from(std::ops::Bound::Unbounded) {
        len += rs.history.len() as u64;
        let costs: u64 = rs.history.iter().map(|k| u64::from(k.cost)).sum();
        bytes += costs;
        assert_eq!(
            costs,
            u64::from(rs.history_bytes),
            "step {n}: {name}: bytes"
        );
        for k in &rs.history {
            let event = reader.get(&name, k.position());
            let event = event.unwrap_or_else(|| panic!("step {n}: {name}: {k:?} not in the log"));
            assert_eq!(
                u64::from(k.cost),
                crate::history::event_cost(&event),
                "step {n}: {name}: cost"
            );
            kept.push((event.revision, name.clone(), event.seq));
        }
    }
    assert_eq!(
        (state.log.len(), state.log.bytes()),
        (len, bytes),
        "step {n}: log counts"
    );
    assert_eq!(
        state.log.live_in_chunks(),
        len,
        "step {n}: kept events by chunk"
    );
    kept.sort();
    let mut visited = Vec::new();
    state.log.visit_from(std::ops::Bound::Unbounded, |l| {
        if crate::machine::kept_by(&state.resources, &state.cold, l) {
            visited.push((l.event.revision, l.resource.clone(), l.event.seq));
        }
        true
    });
    assert_eq!(visited, kept, "step {n}: the log's delivery order");
}
