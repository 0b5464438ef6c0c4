//! SPEC §4.11 against a plain reference: whatever the entries, the events each resource keeps
//! in the event log (`history::log`) are the newest of all it recorded, in delivery order, as a
//! list of every event with the oldest dropped first would keep; and a snapshot taken at any
//! step restores the same events and goes on the same way.

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::testkit::invariants::check_event_log;

const NAMES: [&str; 5] = ["a", "ab", "b", "b2", "c"];

#[derive(Clone, Debug)]
enum Step {
    Acquire {
        resource: usize,
        metadata: usize,
    },
    Release(usize),
    Renew(usize),
    /// Every free resource in one entry, in reverse name order: one revision's events
    /// recorded out of delivery order.
    AcquireAll,
    Elapse(u64),
    Snapshot,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..NAMES.len(), 0..3usize)
            .prop_map(|(resource, metadata)| Step::Acquire { resource, metadata }),
        3 => (0..NAMES.len()).prop_map(Step::Release),
        3 => (0..NAMES.len()).prop_map(Step::Renew),
        1 => Just(Step::AcquireAll),
        1 => (1..3_000u64).prop_map(Step::Elapse),
        1 => Just(Step::Snapshot),
    ]
}

/// Every event recorded, by delivery position; the global bounds drop the oldest.
#[derive(Default)]
struct Reference(BTreeMap<(u64, String, u32), Event>);

impl Reference {
    fn bound(&mut self, total: usize, total_bytes: u64) {
        let bytes = |r: &Reference| r.0.values().map(crate::history::event_cost).sum::<u64>();
        while self.0.len() > total || bytes(self) > total_bytes {
            self.0.pop_first();
        }
    }

    fn events(&self, resource: &str) -> Vec<Event> {
        let of = self.0.iter().filter(|((_, name, _), _)| name == resource);
        of.map(|(_, e)| e.clone()).collect()
    }
}

fn run(total: usize, total_bytes: u64, steps: &[Step]) {
    let mut log = Log::new();
    let bound = |log: &mut Log| {
        log.state.history_total = total;
        log.state.history_total_bytes = total_bytes;
    };
    bound(&mut log);
    let mut reference = Reference::default();
    let mut held: BTreeMap<usize, LeaseView> = BTreeMap::new();
    for (n, step) in steps.iter().enumerate() {
        let reply = match step {
            Step::Acquire { resource, metadata } => {
                let op = AcquireOp {
                    metadata: [("m".to_string(), "x".repeat(metadata * 300))].into(),
                    ..acq_ttl(NAMES[*resource], "h", 5_000)
                };
                let reply = log.acquire(ALICE, op);
                if let Reply::Lease(view) = &reply {
                    held.insert(*resource, view.clone());
                }
                Some(reply)
            }
            Step::Release(resource) => held
                .remove(resource)
                .map(|view| log.release(ALICE, release_of(&view))),
            Step::Renew(resource) => held
                .get(resource)
                .map(|view| log.renew(ALICE, renew_of(view, None))),
            Step::AcquireAll => {
                let free: Vec<usize> = (0..NAMES.len())
                    .rev()
                    .filter(|r| !held.contains_key(r))
                    .collect();
                let op = crate::command::AcquireManyOp {
                    holder: "h".into(),
                    claims: free
                        .iter()
                        .map(|r| crate::command::Claim {
                            resource: NAMES[*r].to_string(),
                            mode: Mode::Exclusive,
                            units: 0,
                        })
                        .collect(),
                    ttl_ms: Some(5_000),
                    session_id: None,
                    metadata: Default::default(),
                    wait_ms: None,
                };
                let reply = log.propose(ALICE, Op::AcquireMany(op));
                if let Reply::Many(outcome) = &reply {
                    for view in &outcome.leases {
                        let at = NAMES
                            .iter()
                            .position(|n| *n == view.lease.resource.as_str());
                        held.insert(at.expect("one of ours"), view.clone());
                    }
                }
                Some(reply)
            }
            Step::Elapse(ms) => {
                log.elapse(*ms);
                Some(log.tick())
            }
            Step::Snapshot => {
                log.restore_from_snapshot();
                bound(&mut log);
                None
            }
        };
        if reply.is_some() {
            for (name, event) in &log.state.effects().events {
                let position = (event.revision, name.to_string(), event.seq);
                reference.0.insert(position, event.clone());
            }
            reference.bound(total, total_bytes);
        }
        check_event_log(&log.state, n);
        for name in NAMES {
            assert_eq!(log.events(name), reference.events(name), "step {n}: {name}");
        }
    }
    log.restore_from_snapshot();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Small bounds: the log's cursor passes chunks, events the per-resource view dropped,
    /// and resources forgotten and made again.
    #[test]
    fn s4_11_the_event_log_keeps_what_a_plain_list_keeps(
        total in 1..60usize,
        total_bytes in prop_oneof![Just(u64::MAX), 2_000..20_000u64],
        steps in vec(step(), 1..150),
    ) {
        run(total, total_bytes, &steps);
    }
}
