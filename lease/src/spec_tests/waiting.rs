//! SPEC §4.7 (waiting room) and §4.1's no-barging rule, driven through `apply`.

use super::*;
use crate::command::CancelWaitOp;
use crate::history::EventKind;
use crate::waiting::WaitOutcome;

fn wait(resource: &str, holder: &str, wait_ms: u64) -> AcquireOp {
    AcquireOp {
        wait_ms: Some(wait_ms),
        ..acq(resource, holder)
    }
}

/// A queued reply: (position, wait id).
#[track_caller]
fn queued(reply: &Reply) -> (u32, u64) {
    match reply {
        Reply::Acquire(o) if !o.granted && o.wait_id.is_some() => {
            (o.queue_position, o.wait_id.unwrap_or_default())
        }
        other => panic!("expected a queued acquire, got {other:?}"),
    }
}

/// The waits the last entry decided.
fn decided(log: &Log) -> Vec<WaitOutcome> {
    log.state.effects().waits.clone()
}

fn cancel(resource: &str, holder: &str) -> Op {
    Op::CancelWait(CancelWaitOp {
        resource: resource.into(),
        holder: holder.into(),
        wait_id: None,
    })
}

#[test]
fn s4_7_waiters_are_admitted_in_fifo_order_each_by_the_entry_that_frees_the_resource() {
    let mut log = Log::new();
    let mut current = granted(&log.acquire(ALICE, acq_ttl("r", "h0", 30_000)));
    let holders: Vec<String> = (1..=20).map(|k| format!("h{k}")).collect();
    for (k, h) in holders.iter().enumerate() {
        let (position, wait_id) = queued(&log.acquire(ALICE, wait("r", h, 60_000)));
        assert_eq!(position as usize, k + 1);
        assert_eq!(wait_id, log.index);
    }
    for h in &holders {
        log.release(ALICE, release_of(&current));
        let release_index = log.index;
        let waits = decided(&log);
        assert_eq!(waits.len(), 1, "one admission per release: {waits:?}");
        let admitted = waits[0].outcome.lease.clone().expect("admitted");
        assert_eq!(&admitted.lease.holder, h, "FIFO");
        assert_eq!(admitted.lease.fencing_token, release_index);
        assert_eq!(log.holders("r"), held(&[(h, release_index)]));
        // The release and the admission share one revision.
        let kinds = log.newest_events("r", 2);
        assert_eq!(
            kinds,
            vec![
                (release_index, EventKind::Admitted),
                (release_index, EventKind::Released)
            ]
        );
        current = admitted;
    }
    assert_eq!(log.state.waiters(), 0);
}

#[test]
fn s4_1_nobody_barges_past_a_waiter_even_into_room_the_head_cannot_use() {
    let mut log = Log::new();
    log.register("r", shared_policy(&[Mode::Read], 0));
    let reader = granted(&log.acquire(ALICE, shared("r", "reader", Mode::Read, 1)));
    queued(&log.acquire(ALICE, wait("r", "writer", 60_000)));
    // A second reader would fit beside the first, but a writer waits.
    let (refusal, holders) = refused(&log.acquire(BOB, shared("r", "late", Mode::Read, 1)));
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    assert_eq!(holders, held(&[("reader", reader.lease.fencing_token)]));
    // A waiting late reader queues behind the writer.
    let (position, _) = queued(&log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(60_000),
            ..shared("r", "late", Mode::Read, 1)
        },
    ));
    assert_eq!(position, 2);
    log.release(ALICE, release_of(&reader));
    assert_eq!(log.holders("r"), held(&[("writer", log.index)]));
}

#[test]
fn s4_7_shared_waiters_at_the_head_are_admitted_together_while_they_fit() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 3));
    let x = granted(&log.acquire(ALICE, acq("pool", "x")));
    for h in ["a", "b", "c"] {
        queued(&log.acquire(
            ALICE,
            AcquireOp {
                wait_ms: Some(60_000),
                ..shared("pool", h, Mode::Read, 1)
            },
        ));
    }
    queued(&log.acquire(
        ALICE,
        AcquireOp {
            wait_ms: Some(60_000),
            ..shared("pool", "d", Mode::Read, 1)
        },
    ));
    log.release(ALICE, release_of(&x));
    let index = log.index;
    // Three units: a, b and c fit; d waits, now at the head.
    assert_eq!(
        log.holders("pool"),
        held(&[("a", index), ("b", index), ("c", index)])
    );
    let ids: Vec<String> = log
        .state
        .resource_view("pool")
        .leases
        .iter()
        .map(|v| v.lease.lease_id().to_string())
        .collect();
    assert_eq!(
        ids,
        vec![
            format!("lse_{index}_0"),
            format!("lse_{index}_1"),
            format!("lse_{index}_2")
        ]
    );
    assert_eq!(log.state.waiting("pool", "d").map(|(p, _)| p), Some(1));
}

#[test]
fn s4_7_a_wait_times_out_by_an_entry_and_the_call_learns_wait_timeout() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    queued(&log.acquire(BOB, wait("r", "b", 2_000)));
    log.elapse(1_999);
    log.tick();
    assert!(decided(&log).is_empty(), "not yet");
    log.elapse(1);
    log.tick();
    let waits = decided(&log);
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].outcome.refusal, Some(Refusal::WaitTimeout));
    assert_eq!(waits[0].outcome.queue_position, 1);
    assert_eq!(
        log.events("r").last().map(|e| e.kind),
        Some(EventKind::WaitTimedOut)
    );
    assert_eq!(log.state.waiters(), 0);
}

#[test]
fn s4_7_the_leader_plans_a_tick_when_a_wait_times_out_even_with_no_lease_due() {
    use crate::expiry::{plan, Plan};
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 600_000)));
    queued(&log.acquire(BOB, wait("r", "b", 2_000)));
    let at = stamp_at;
    let now = log.mono_ms();
    assert_eq!(
        plan(&log.state, LEADER, at(now + 100), 500_000),
        Plan::Wait(1_900)
    );
    assert_eq!(
        plan(&log.state, LEADER, at(now + 2_000), 500_000),
        Plan::Propose(Op::Tick)
    );
}

#[test]
fn s4_7_cancel_wait_removes_the_wait_and_lets_the_next_waiter_in_if_it_fits() {
    let mut log = Log::new();
    log.register("r", shared_policy(&[Mode::Read], 0));
    granted(&log.acquire(ALICE, shared("r", "reader", Mode::Read, 1)));
    queued(&log.acquire(BOB, wait("r", "writer", 60_000)));
    queued(&log.acquire(
        ALICE,
        AcquireOp {
            wait_ms: Some(60_000),
            ..shared("r", "reader2", Mode::Read, 1)
        },
    ));
    // Only the waiter's principal (or an admin) may cancel it.
    assert!(matches!(
        rejection(&log.propose(ALICE, cancel("r", "writer"))),
        Rejection::InsufficientPermissions(_)
    ));
    let reply = log.propose(BOB, cancel("r", "writer"));
    let index = log.index;
    assert_eq!(
        reply,
        Reply::Cancelled {
            cancelled: true,
            revision: index
        }
    );
    // The removed head let the reader behind it in, in the same entry.
    let waits = decided(&log);
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert_eq!(waits[0].outcome.refusal, Some(Refusal::WaitCancelled));
    assert!(waits[1].outcome.granted);
    assert_eq!(log.holders("r")[1], ("reader2".to_string(), index));
    let reply = log.propose(BOB, cancel("r", "writer"));
    assert_eq!(
        reply,
        Reply::Cancelled {
            cancelled: false,
            revision: log.index
        }
    );
}

#[test]
fn s4_7_a_removal_naming_an_older_wait_leaves_a_newer_wait_of_the_holder_alone() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    let (_, first) = queued(&log.acquire(BOB, wait("r", "b", 1_000)));
    log.elapse(1_000);
    log.tick();
    let (_, second) = queued(&log.acquire(BOB, wait("r", "b", 60_000)));
    assert_ne!(first, second);
    let stale = Op::CancelWait(CancelWaitOp {
        resource: "r".into(),
        holder: "b".into(),
        wait_id: Some(first),
    });
    assert!(matches!(
        log.propose(BOB, stale),
        Reply::Cancelled {
            cancelled: false,
            ..
        }
    ));
    assert!(log.state.is_waiting("r", "b", second));
    // The same request id naming another wait is another request, not a retry.
    let named = |wait_id| {
        Op::CancelWait(CancelWaitOp {
            resource: "r".into(),
            holder: "b".into(),
            wait_id: Some(wait_id),
        })
    };
    let request = Some("cancel-1".to_string());
    log.propose_with(BOB, request.clone(), named(first));
    assert_eq!(
        invalid_field(&log.propose_with(BOB, request, named(second))),
        "request_id"
    );
    assert!(log.state.is_waiting("r", "b", second));
}

#[test]
fn s4_7_a_retried_wait_rejoins_its_place_and_a_retried_request_learns_the_outcome() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    queued(&log.acquire(ALICE, wait("r", "x", 60_000)));
    let request = || Some("req-b".to_string());
    let (position, wait_id) =
        queued(&log.propose_with(BOB, request(), Op::Acquire(wait("r", "b", 60_000))));
    assert_eq!(position, 2);
    // The same holder again (another call): the same wait.
    assert_eq!(
        queued(&log.acquire(BOB, wait("r", "b", 60_000))),
        (2, wait_id)
    );
    log.release(ALICE, release_of(&a));
    let x = log.holders("r");
    assert_eq!(x[0].0, "x");
    let x_lease = log.state.resource_view("r").leases[0].clone();
    log.release(ALICE, release_of(&x_lease));
    let admitted_at = log.index;
    // A retry of the queuing request answers with how the wait ended.
    let retried = granted(&log.propose_with(BOB, request(), Op::Acquire(wait("r", "b", 60_000))));
    assert_eq!(retried.lease.fencing_token, admitted_at);
}

#[test]
fn s4_4_a_lock_delay_keeps_waiters_out_until_the_entry_that_ends_it() {
    let mut log = Log::new();
    log.register("r", lock_delay_policy(5_000));
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 1_000)));
    queued(&log.acquire(BOB, wait("r", "b", 60_000)));
    log.elapse(1_000);
    log.tick(); // reclaims a; the resource stays closed for 5 s
    assert_eq!(log.holders("r"), vec![]);
    assert_eq!(log.state.waiting("r", "b").map(|(p, _)| p), Some(1));
    log.elapse(4_999);
    log.tick();
    assert_eq!(log.holders("r"), vec![]);
    log.elapse(1);
    log.tick();
    assert_eq!(log.holders("r"), held(&[("b", log.index)]));
}

#[test]
fn s4_7_a_full_waiting_room_answers_waiting_room_full() {
    let mut log = Log::new();
    log.register(
        "r",
        Policy {
            max_waiters: 2,
            ..Policy::registered()
        },
    );
    granted(&log.acquire(ALICE, acq("r", "a")));
    queued(&log.acquire(ALICE, wait("r", "b", 60_000)));
    queued(&log.acquire(ALICE, wait("r", "c", 60_000)));
    assert_eq!(
        rejection(&log.acquire(ALICE, wait("r", "d", 60_000))),
        Rejection::WaitingRoomFull { max_waiters: 2 }
    );
}

#[test]
fn s4_4_a_reclaim_admits_the_head_waiter_in_the_reclaiming_entry() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 1_000)));
    queued(&log.acquire(BOB, wait("r", "b", 60_000)));
    log.elapse(1_000);
    log.tick();
    let index = log.index;
    assert_eq!(log.holders("r"), held(&[("b", index)]));
    assert_eq!(
        log.newest_events("r", 2),
        vec![(index, EventKind::Admitted), (index, EventKind::Reclaimed)]
    );
}

#[test]
fn s4_11_a_waiting_ad_hoc_resource_is_not_forgotten() {
    let mut log = Log::new();
    log.state.history_total = 1;
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    queued(&log.acquire(BOB, wait("r", "b", 60_000)));
    granted(&log.acquire(ALICE, acq_ttl("other", "a", 60_000)));
    assert!(log.state.is_waiting("r", "b", 2));
}

#[test]
fn s4_7_a_transfer_to_a_waiting_holder_ends_its_wait_admitted_with_that_lease() {
    let mut log = Log::new();
    log.register("r", transferable());
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    queued(&log.acquire(ALICE, wait("r", "b", 60_000)));
    log.transfer(ALICE, transfer_of(&a, "b", None));
    let index = log.index;
    let waits = decided(&log);
    assert_eq!(waits.len(), 1);
    let lease = waits[0].outcome.lease.clone().expect("admitted");
    assert_eq!(
        (lease.lease.holder.as_str(), lease.lease.fencing_token),
        ("b", index)
    );
    assert_eq!(log.state.waiters(), 0);
    let last = log.newest_events("r", 2);
    assert_eq!(
        last,
        vec![
            (index, EventKind::Admitted),
            (index, EventKind::Transferred)
        ]
    );
}

#[test]
fn s4_7_a_transfer_to_the_head_waiter_lets_the_next_waiter_in_and_a_mismatched_wait_ends() {
    let mut log = Log::new();
    log.register(
        "r",
        Policy {
            transferable: true,
            ..shared_policy(&[Mode::Read], 0)
        },
    );
    let x = granted(&log.acquire(ALICE, shared("r", "x", Mode::Read, 1)));
    queued(&log.acquire(ALICE, wait("r", "b", 60_000))); // exclusive
    queued(&log.acquire(
        ALICE,
        AcquireOp {
            wait_ms: Some(60_000),
            ..shared("r", "c", Mode::Read, 1)
        },
    ));
    // b waited for an exclusive lease and is handed a shared one: its wait ends, unanswered;
    // c, now the head, fits beside it and is admitted in the same entry.
    log.transfer(ALICE, transfer_of(&x, "b", None));
    let index = log.index;
    let waits = decided(&log);
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert_eq!(waits[0].holder, "b");
    assert_eq!(waits[0].outcome.refusal, Some(Refusal::WaitCancelled));
    assert_eq!(waits[1].holder, "c");
    assert!(waits[1].outcome.granted);
    assert_eq!(log.holders("r"), held(&[("b", index), ("c", index)]));
}

#[test]
fn s4_7_a_decided_wait_can_be_read_back_from_history() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    let (_, timed) = queued(&log.acquire(BOB, wait("r", "t", 1_000)));
    let (_, cancelled) = queued(&log.acquire(BOB, wait("r", "c", 60_000)));
    let (_, admitted) = queued(&log.acquire(BOB, wait("r", "w", 60_000)));
    assert_eq!(
        log.state.wait_outcome("r", "w", admitted),
        None,
        "still waiting"
    );
    log.elapse(1_000);
    log.tick();
    log.propose(BOB, cancel("r", "c"));
    log.release(ALICE, release_of(&a));
    let release_index = log.index;
    let outcome = |holder, id| log.state.wait_outcome("r", holder, id).expect("decided");
    assert_eq!(outcome("t", timed).refusal, Some(Refusal::WaitTimeout));
    assert_eq!(
        outcome("c", cancelled).refusal,
        Some(Refusal::WaitCancelled)
    );
    let lease = outcome("w", admitted).lease.expect("admitted");
    assert_eq!(lease.lease.fencing_token, release_index);
}

#[test]
fn s4_8_a_bookings_holder_is_not_kept_out_of_its_window_by_waiters() {
    use crate::command::BookOp;
    let mut log = Log::new();
    let start = WALL_BASE_MS + log.mono_ms() + 10_000;
    log.propose(
        ALICE,
        Op::Book(BookOp {
            resource: "r".into(),
            holder: "owner".into(),
            start_wall_ms: start,
            duration_ms: 3_600_000,
            ad_hoc_bookable: true,
        }),
    );
    // A waiter whose lease would reach into the window queues...
    queued(&log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(7_200_000),
            ..acq_ttl("r", "w", 60_000)
        },
    ));
    // ...but once the window opens its holder goes first.
    log.elapse(10_000);
    granted(&log.acquire(ALICE, acq_ttl("r", "owner", 60_000)));
    assert!(log.state.waiting("r", "w").is_some());
}
