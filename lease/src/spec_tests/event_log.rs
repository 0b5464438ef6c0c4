//! SPEC §4.11 against a plain reference: whatever the entries, the events each resource keeps
//! in the event log (`history::log`) are the newest of all it recorded, in delivery order, as a
//! list of every event with the oldest dropped first would keep; and a snapshot taken at any
//! step restores the same events and goes on the same way.

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::history::EventKind;
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

fn run(total: usize, total_bytes: u64, rules: u32, steps: &[Step]) {
    let mut log = Log::new();
    super::rules::raise(&mut log, rules);
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
    /// and resources forgotten and made again; idle resources each a value of their own
    /// (rules 1) or in chunks (rules 4).
    #[test]
    fn s4_11_the_event_log_keeps_what_a_plain_list_keeps(
        total in 1..60usize,
        total_bytes in prop_oneof![Just(u64::MAX), 2_000..20_000u64],
        rules in prop_oneof![Just(1u32), Just(crate::rules::COLD_CHUNKS)],
        steps in vec(step(), 1..150),
    ) {
        run(total, total_bytes, rules, &steps);
    }
}

/// An idle resource leaves the heap (issue 39) and answers exactly as before: its ended lease,
/// its history, its view and listing; used again it comes back; the global bound forgets it
/// when it drops its newest event.
#[test]
fn s4_11_an_idle_resource_goes_cold_and_answers_the_same() {
    let mut log = Log::new();
    let view = granted(&log.acquire(ALICE, acq_ttl("idle", "h", 5_000)));
    let released = log.release(ALICE, release_of(&view));
    assert!(matches!(released, Reply::Lease(_)), "{released:?}");
    assert!(!log.state.resources.contains_key("idle"), "not on the heap");
    assert!(log.state.cold.contains("idle"), "in the archive");
    // What it remembers, read back.
    let kinds: Vec<EventKind> = log.events("idle").iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Acquired, EventKind::Released]);
    let v = log.validate(
        "idle",
        &view.lease.lease_id().to_name(),
        view.lease.fencing_token,
    );
    assert_eq!((v.valid, v.reason.as_str()), (false, "lease released"));
    assert!(v.lease.is_some(), "the ended lease is shown");
    let renewed = log.renew(ALICE, renew_of(&view, None));
    assert_eq!(
        rejection(&renewed),
        Rejection::LeaseNotFound(": it was released".into())
    );
    let shown = log.state.resource_view("idle");
    assert_eq!(shown.revision, view.lease.fencing_token + 1);
    match log.query(&Query::Resources {
        prefix: "id".into(),
        page_size: 0,
        after: None,
    }) {
        Answer::Resources { resources, .. } => {
            assert_eq!(resources.len(), 1);
            assert_eq!(resources[0].revision, shown.revision);
        }
        other => panic!("{other:?}"),
    }
    log.restore_from_snapshot();
    assert!(
        log.state.cold.contains("idle"),
        "cold again after a restore"
    );
    // Used again: back on the heap, with what it remembered.
    let again = granted(&log.acquire(ALICE, acq_ttl("idle", "h", 5_000)));
    assert!(log.state.resources.contains_key("idle") && !log.state.cold.contains("idle"));
    assert_eq!(log.events("idle").len(), 3);
    log.release(ALICE, release_of(&again));
    assert!(log.state.cold.contains("idle"));
    // The global bound drops its events; with the newest gone, it is forgotten.
    log.state.history_total = 1;
    granted(&log.acquire(ALICE, acq_ttl("other", "h", 5_000)));
    assert!(!log.state.knows("idle"), "forgotten");
    check_event_log(&log.state, 0);
}

/// The log reads only chunks that hold a kept event: what the per-resource bound drops goes
/// with its chunk, even behind an old event the global bound has not reached (a registered
/// resource's), so a renew-heavy resource keeps about its own bound's worth of chunks.
#[test]
fn s4_11_dropped_events_leave_the_log_behind_an_old_kept_one() {
    let mut log = Log::new();
    log.register("pinned", crate::policy::Policy::ad_hoc());
    let view = granted(&log.acquire(ALICE, acq_ttl("r", "h", 60_000)));
    for _ in 0..3 * crate::history::PER_RESOURCE {
        log.elapse(1);
        lease(&log.renew(ALICE, renew_of(&view, None)));
    }
    assert_eq!(log.events("pinned").len(), 1, "the old event is kept");
    let bound = crate::history::PER_RESOURCE / crate::history::CHUNK + 3;
    assert!(
        log.state.log.chunks() <= bound,
        "{} chunks",
        log.state.log.chunks()
    );
    check_event_log(&log.state, 0);
    log.restore_from_snapshot();
}
