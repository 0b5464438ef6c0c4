//! SPEC §4.25 (AcquireMany: all or nothing, one place in every room), driven through `apply`.

use std::collections::{BTreeMap, BTreeSet};

use super::quotas::{set, usage};
use super::*;
use crate::command::{AcquireManyOp, CancelWaitOp, Claim, CloseSessionOp, CreateSessionOp};
use crate::history::EventKind;
use crate::many::{ManyOutcome, MAX_CLAIMS};
use crate::quota::Quota;
use crate::session::session_name;

fn many_op(holder: &str, resources: &[&str], wait_ms: Option<u64>) -> AcquireManyOp {
    AcquireManyOp {
        holder: holder.into(),
        claims: resources
            .iter()
            .map(|r| Claim {
                resource: r.to_string(),
                mode: Mode::Exclusive,
                units: 0,
            })
            .collect(),
        ttl_ms: Some(30_000),
        session_id: None,
        metadata: Default::default(),
        wait_ms,
    }
}

fn many(holder: &str, resources: &[&str], wait_ms: Option<u64>) -> Op {
    Op::AcquireMany(many_op(holder, resources, wait_ms))
}

#[track_caller]
fn outcome(reply: &Reply) -> ManyOutcome {
    match reply {
        Reply::Many(outcome) => (**outcome).clone(),
        other => panic!("expected an AcquireMany answer, got {other:?}"),
    }
}

/// A granted AcquireMany's leases as (resource, holder, token).
#[track_caller]
fn granted_all(reply: &Reply) -> Vec<(String, String, u64)> {
    let outcome = outcome(reply);
    assert!(outcome.granted, "{outcome:?}");
    assert!(outcome.claims.is_empty());
    outcome
        .leases
        .iter()
        .map(|v| {
            (
                v.lease.resource.to_string(),
                v.lease.holder.to_string(),
                v.lease.fencing_token,
            )
        })
        .collect()
}

/// A waiting AcquireMany: its wait id and its place in each room.
#[track_caller]
fn waiting(reply: &Reply) -> (u64, Vec<u32>) {
    let outcome = outcome(reply);
    assert!(!outcome.granted, "{outcome:?}");
    let id = outcome
        .wait_id
        .expect("a waiting AcquireMany names its wait");
    (
        id,
        outcome.claims.iter().map(|c| c.queue_position).collect(),
    )
}

/// The multi-wait outcome the last entry decided.
#[track_caller]
fn decided_many(log: &Log) -> ManyOutcome {
    let waits = &log.state.effects().waits;
    let many: Vec<_> = waits.iter().filter_map(|w| w.many.clone()).collect();
    assert_eq!(many.len(), 1, "one multi-wait decided: {waits:?}");
    *many[0].clone()
}

fn triples(list: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    list.iter()
        .map(|(r, h, t)| (r.to_string(), h.to_string(), *t))
        .collect()
}

fn waiters_of(log: &Log, resource: &str) -> Vec<String> {
    log.state
        .resource_view(resource)
        .waiters
        .iter()
        .map(|(w, _)| w.holder.to_string())
        .collect()
}

#[test]
fn s4_25_every_claim_is_granted_in_one_entry_whose_index_is_every_token() {
    let mut log = Log::new();
    let reply = log.propose(ALICE, many("h", &["x", "y", "z"], None));
    let index = log.index;
    assert_eq!(
        granted_all(&reply),
        triples(&[("x", "h", index), ("y", "h", index), ("z", "h", index)])
    );
    let ids: Vec<String> = outcome(&reply)
        .leases
        .iter()
        .map(|v| v.lease.lease_id().to_string())
        .collect();
    assert_eq!(
        ids,
        (0..3)
            .map(|k| format!("lse_{index}_{k}"))
            .collect::<Vec<_>>()
    );
    for r in ["x", "y", "z"] {
        assert_eq!(log.holders(r), held(&[("h", index)]));
        assert_eq!(log.newest_events(r, 1), vec![(index, EventKind::Acquired)]);
    }
}

#[test]
fn s4_25_one_claim_refused_grants_nothing_and_the_answer_explains_each_resource() {
    let mut log = Log::new();
    let bob = granted(&log.acquire(BOB, acq("y", "bob")));
    let reply = log.propose(ALICE, many("h", &["x", "y"], None));
    let outcome = outcome(&reply);
    assert!(!outcome.granted);
    assert!(outcome.leases.is_empty());
    assert_eq!(outcome.wait_id, None);
    assert_eq!(outcome.claims.len(), 2);
    assert_eq!(outcome.claims[0].resource, "x");
    assert_eq!(outcome.claims[0].refusal, None, "x alone would fit");
    assert!(outcome.claims[0].holders.is_empty());
    assert_eq!(outcome.claims[1].resource, "y");
    assert_eq!(
        outcome.claims[1].refusal,
        Some(Refusal::ResourceUnavailable)
    );
    assert_eq!(
        pairs(&outcome.claims[1].holders),
        held(&[("bob", bob.lease.fencing_token)])
    );
    // Nothing was granted, not even x.
    assert!(log.holders("x").is_empty());
    assert!(log.events("x").is_empty());
}

#[test]
fn s4_25_a_multi_wait_is_admitted_in_one_entry_once_it_heads_every_room_and_all_fit() {
    let mut log = Log::new();
    let on_x = granted(&log.acquire(ALICE, acq("x", "a")));
    let on_y = granted(&log.acquire(BOB, acq("y", "b")));
    let (wait_id, positions) = waiting(&log.propose(ALICE, many("c", &["x", "y"], Some(60_000))));
    assert_eq!(wait_id, log.index);
    assert_eq!(positions, vec![1, 1]);
    log.release(ALICE, release_of(&on_x));
    // x is free, but y is not: nothing is granted, and c keeps its place in x.
    assert!(log.state.effects().waits.is_empty());
    assert!(log.holders("x").is_empty());
    assert_eq!(waiters_of(&log, "x"), vec!["c"]);
    log.release(BOB, release_of(&on_y));
    let index = log.index;
    let decided = decided_many(&log);
    assert!(decided.granted);
    assert_eq!(log.holders("x"), held(&[("c", index)]));
    assert_eq!(log.holders("y"), held(&[("c", index)]));
    for r in ["x", "y"] {
        assert_eq!(log.newest_events(r, 1), vec![(index, EventKind::Admitted)]);
    }
    assert_eq!(log.state.waiters(), 0);
}

#[test]
fn s4_25_two_multi_waits_in_opposite_orders_never_deadlock() {
    let mut log = Log::new();
    let x = granted(&log.acquire(ROOT, acq("x", "first")));
    let y = granted(&log.acquire(ROOT, acq("y", "first")));
    waiting(&log.propose(ALICE, many("a", &["x", "y"], Some(60_000))));
    waiting(&log.propose(BOB, many("b", &["y", "x"], Some(60_000))));
    log.release(ROOT, release_of(&x));
    log.release(ROOT, release_of(&y));
    // a queued first: it heads both rooms, and takes both; b holds nothing meanwhile.
    let a = decided_many(&log);
    assert_eq!(
        a.leases
            .iter()
            .map(|v| v.lease.holder.to_string())
            .collect::<Vec<_>>(),
        vec!["a", "a"]
    );
    for view in &a.leases {
        log.release(ALICE, release_of(view));
    }
    // The second release frees both: b is admitted in that entry.
    let b = decided_many(&log);
    assert!(b.granted);
    assert_eq!(log.holders("x"), held(&[("b", log.index)]));
    assert_eq!(log.holders("y"), held(&[("b", log.index)]));
}

#[test]
fn s4_25_nobody_passes_a_multi_wait_in_any_room_even_one_that_is_free() {
    let mut log = Log::new();
    let on_y = granted(&log.acquire(BOB, acq("y", "b")));
    let (_, positions) = waiting(&log.propose(ALICE, many("c", &["x", "y"], Some(60_000))));
    assert_eq!(positions, vec![1, 1]);
    // x is free, but c waits for it: a newcomer may not take it.
    let (refusal, holders) = refused(&log.acquire(BOB, acq("x", "d")));
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    assert!(holders.is_empty());
    let reply = log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(60_000),
            ..acq("x", "d")
        },
    );
    assert!(matches!(&reply, Reply::Acquire(o) if o.queue_position == 2));
    log.release(BOB, release_of(&on_y));
    assert!(decided_many(&log).granted);
    assert_eq!(log.holders("x"), held(&[("c", log.index)]));
    assert_eq!(waiters_of(&log, "x"), vec!["d"]);
}

#[test]
fn s4_25_a_wait_behind_a_multi_wait_gets_the_room_when_that_wait_times_out() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq_ttl("y", "b", 300_000)));
    waiting(&log.propose(ALICE, many("c", &["x", "y"], Some(10_000))));
    log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(60_000),
            ..acq("x", "d")
        },
    );
    log.elapse(10_000);
    log.tick();
    let index = log.index;
    let ended = decided_many(&log);
    assert!(!ended.granted);
    assert_eq!(ended.refusal, Some(Refusal::WaitTimeout));
    assert_eq!(
        ended
            .claims
            .iter()
            .map(|c| c.queue_position)
            .collect::<Vec<_>>(),
        vec![1, 1]
    );
    // Its wait ended in both rooms, and d, behind it in x, is admitted in that same entry.
    assert!(waiters_of(&log, "y").is_empty());
    assert_eq!(log.holders("x"), held(&[("d", index)]));
    assert_eq!(
        log.newest_events("y", 1),
        vec![(index, EventKind::WaitTimedOut)]
    );
}

#[test]
fn s4_25_ending_a_multi_wait_in_one_room_ends_it_in_every_room() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq("x", "b")));
    granted(&log.acquire(BOB, acq("y", "b")));
    let (wait_id, _) = waiting(&log.propose(ALICE, many("c", &["x", "y", "z"], Some(60_000))));
    let reply = log.propose(
        ALICE,
        Op::CancelWait(CancelWaitOp {
            resource: "y".into(),
            holder: "c".into(),
            wait_id: Some(wait_id),
        }),
    );
    assert!(matches!(
        reply,
        Reply::Cancelled {
            cancelled: true,
            ..
        }
    ));
    let ended = decided_many(&log);
    assert_eq!(ended.refusal, Some(Refusal::WaitCancelled));
    for r in ["x", "y", "z"] {
        assert!(waiters_of(&log, r).is_empty(), "{r}");
        assert_eq!(
            log.newest_events(r, 1),
            vec![(log.index, EventKind::WaitCancelled)]
        );
    }
    assert_eq!(log.state.waiters(), 0);
    // z, which nobody held, was never granted to c.
    assert!(log.holders("z").is_empty());
}

#[test]
fn s4_25_leases_granted_apart_are_not_one_answer_from_rules_3() {
    // The fault run's case: h holds y from one grant (with x) and z from another (with w),
    // then names y and z together. Every claim is held as asked, but by two grants.
    let holdings = |log: &mut Log| {
        granted_all(&log.propose(ALICE, many("h", &["x", "y"], None)));
        granted_all(&log.propose(ALICE, many("h", &["w", "z"], None)));
    };
    let mut before = Log::new();
    holdings(&mut before);
    let answer = granted_all(&before.propose(ALICE, many("h", &["y", "z"], None)));
    let tokens: BTreeSet<u64> = answer.iter().map(|(_, _, token)| *token).collect();
    assert_eq!(
        tokens.len(),
        2,
        "rules 1 answers both leases, with their two tokens"
    );

    let mut log = Log::new();
    super::rules::raise(&mut log, crate::rules::MANY_ONE_GRANT);
    holdings(&mut log);
    let index = log.index;
    let reply = log.propose(ALICE, many("h", &["y", "z"], None));
    assert!(
        matches!(rejection(&reply), Rejection::AlreadyHeld { .. }),
        "{reply:?}"
    );
    // Nothing changed: each lease is still its own grant's.
    for (resource, token) in [
        ("x", index - 1),
        ("y", index - 1),
        ("w", index),
        ("z", index),
    ] {
        assert_eq!(
            log.holders(resource),
            vec![("h".to_string(), token)],
            "{resource}"
        );
    }
    // One grant's leases, named again, are still that grant's answer.
    let again = granted_all(&log.propose(ALICE, many("h", &["w", "z"], None)));
    assert!(again.iter().all(|(_, _, token)| *token == index));
}

#[test]
fn s4_25_the_same_call_again_answers_what_it_already_has() {
    let mut log = Log::new();
    let first = granted_all(&log.propose(ALICE, many("h", &["x", "y"], None)));
    // Again: the same leases, nothing new.
    assert_eq!(
        granted_all(&log.propose(ALICE, many("h", &["x", "y"], None))),
        first
    );
    // Holding some of what it names: already_held.
    let reply = log.propose(ALICE, many("h", &["y", "w"], None));
    assert!(matches!(rejection(&reply), Rejection::AlreadyHeld { .. }));
    // The same multi-wait again: its places, the same wait.
    granted(&log.acquire(BOB, acq("p", "b")));
    let (wait_id, _) = waiting(&log.propose(ALICE, many("k", &["p", "q"], Some(60_000))));
    let (again, positions) = waiting(&log.propose(ALICE, many("k", &["p", "q"], Some(60_000))));
    assert_eq!((again, positions), (wait_id, vec![1, 1]));
    assert_eq!(log.state.waiters(), 2);
    // Another wait of that holder: refused, naming the room.
    assert_eq!(
        invalid_field(&log.propose(ALICE, many("k", &["q"], Some(60_000)))),
        "claims"
    );
}

#[test]
fn s4_25_bad_claims_are_refused_before_anything_happens() {
    let mut log = Log::new();
    assert_eq!(
        invalid_field(&log.propose(ALICE, many("h", &[], None))),
        "claims"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, many("h", &["x", "y", "x"], None))),
        "claims"
    );
    let names: Vec<String> = (0..=MAX_CLAIMS).map(|k| format!("r{k}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        invalid_field(&log.propose(ALICE, many("h", &names, None))),
        "claims"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, many("h", &["x", ""], None))),
        "resource"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, many("", &["x"], None))),
        "holder"
    );
    let mut op = many_op("h", &["x"], None);
    op.ttl_ms = Some(1);
    assert!(matches!(
        rejection(&log.propose(ALICE, Op::AcquireMany(op))),
        Rejection::TtlOutOfRange { .. }
    ));
    assert_eq!(log.state.live_leases(), 0);
}

#[test]
fn s4_25_quotas_count_every_claim_and_a_refusal_grants_none() {
    let mut log = Log::new();
    set(&mut log, Some("alice"), Quota::Leases, Some(2));
    let reply = log.propose(ALICE, many("h", &["x", "y", "z"], None));
    assert!(matches!(rejection(&reply), Rejection::QuotaExceeded { .. }));
    assert_eq!(log.state.live_leases(), 0);
    assert_eq!(
        granted_all(&log.propose(ALICE, many("h", &["x", "y"], None))).len(),
        2
    );
}

#[test]
fn s4_25_a_multi_acquire_on_a_session_lives_and_ends_with_it() {
    let mut log = Log::new();
    let created = log.propose(
        ALICE,
        Op::CreateSession(CreateSessionOp {
            holder: "h".into(),
            ttl_ms: Some(10_000),
            metadata: Default::default(),
        }),
    );
    assert!(matches!(created, Reply::Session(_)));
    let id = session_name(log.index);
    let mut op = many_op("h", &["x", "y"], None);
    op.session_id = Some(id.clone());
    op.ttl_ms = None;
    let leases = outcome(&log.propose(ALICE, Op::AcquireMany(op.clone())));
    assert!(leases.granted);
    assert!(leases.leases.iter().all(|v| v.lease.session.is_some()));
    // A multi-wait on the session, too.
    granted(&log.acquire(BOB, acq("z", "b")));
    let mut wait = many_op("h", &["z", "w"], Some(60_000));
    wait.session_id = Some(id.clone());
    wait.ttl_ms = None;
    waiting(&log.propose(ALICE, Op::AcquireMany(wait)));
    // A ttl of its own with a session: refused.
    op.ttl_ms = Some(30_000);
    assert_eq!(
        invalid_field(&log.propose(ALICE, Op::AcquireMany(op))),
        "ttl"
    );
    log.propose(
        ALICE,
        Op::CloseSession(CloseSessionOp {
            session_id: id.clone(),
        }),
    );
    assert!(log.holders("x").is_empty() && log.holders("y").is_empty());
    assert!(waiters_of(&log, "z").is_empty() && waiters_of(&log, "w").is_empty());
    assert_eq!(decided_many(&log).refusal, Some(Refusal::WaitCancelled));
    assert_eq!(log.state.waiters(), 0);
    let x = log.events("x");
    assert_eq!(x.last().map(|e| e.kind), Some(EventKind::Released));
}

#[test]
fn s4_25_a_retried_multi_wait_learns_how_it_ended() {
    let mut log = Log::new();
    let on_y = granted(&log.acquire(BOB, acq("y", "b")));
    let request = Some("req-many".to_string());
    let op = many("c", &["x", "y"], Some(60_000));
    waiting(&log.propose_with(ALICE, request.clone(), op.clone()));
    log.release(BOB, release_of(&on_y));
    let index = log.index;
    let retried = log.propose_with(ALICE, request, op);
    assert_eq!(
        granted_all(&retried),
        triples(&[("x", "c", index), ("y", "c", index)])
    );
}

#[test]
fn s4_25_a_transfer_to_a_multi_waiter_ends_its_wait_in_every_room() {
    let mut log = Log::new();
    log.register("x", transferable());
    let on_x = granted(&log.acquire(BOB, acq("x", "b")));
    granted(&log.acquire(BOB, acq("y", "b")));
    waiting(&log.propose(ALICE, many("c", &["x", "y"], Some(60_000))));
    lease(&log.transfer(BOB, transfer_of(&on_x, "c", None)));
    assert_eq!(decided_many(&log).refusal, Some(Refusal::WaitCancelled));
    assert!(waiters_of(&log, "y").is_empty());
    assert_eq!(log.holders("x"), held(&[("c", log.index)]));
}

#[test]
fn s4_25_a_multi_wait_survives_a_snapshot() {
    let mut log = Log::new();
    let on_y = granted(&log.acquire(BOB, acq("y", "b")));
    waiting(&log.propose(ALICE, many("c", &["x", "y"], Some(60_000))));
    log.restore_from_snapshot();
    log.release(BOB, release_of(&on_y));
    assert!(decided_many(&log).granted);
}

/// Random multi-waits and single waits over a few resources, every holder releasing what it
/// gets: every room stays ordered by queuing entry, and every wait ends in an admission (no
/// deadlock, nobody starved) once the holders let go.
#[test]
fn s4_25_waits_are_ordered_by_queuing_entry_in_every_room_so_every_wait_is_admitted() {
    const ROOMS: [&str; 4] = ["r0", "r1", "r2", "r3"];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    for round in 0..20 {
        let mut log = Log::new();
        let mut queued = 0;
        let mut admitted = 0;
        let mut held: Vec<LeaseView> = Vec::new();
        for k in 0..30 {
            let holder = format!("h{round}_{k}");
            // A random non-empty subset, in a random order.
            let mut names: Vec<&str> = ROOMS.iter().copied().filter(|_| next(2) == 0).collect();
            if names.is_empty() {
                names.push(ROOMS[next(4) as usize]);
            }
            let turn = next(names.len() as u64) as usize;
            names.rotate_left(turn);
            let reply = match names.len() {
                1 if next(2) == 0 => log.acquire(
                    ALICE,
                    AcquireOp {
                        wait_ms: Some(3_600_000),
                        ..acq(names[0], &holder)
                    },
                ),
                _ => log.propose(ALICE, many(&holder, &names, Some(3_600_000))),
            };
            match &reply {
                Reply::Many(o) if o.granted => held.extend(o.leases.clone()),
                Reply::Acquire(o) if o.granted => held.extend(o.lease.clone()),
                Reply::Many(_) | Reply::Acquire(_) => queued += 1,
                other => panic!("{other:?}"),
            }
            for room in ROOMS {
                let ids: Vec<u64> = log
                    .state
                    .resource_view(room)
                    .waiters
                    .iter()
                    .map(|(w, _)| w.wait_id)
                    .collect();
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "{room}: {ids:?}");
            }
        }
        // Holders let go, one lease per entry; each admission's leases are let go in turn.
        while let Some(view) = held.pop() {
            log.release(ALICE, release_of(&view));
            for wait in log.state.effects().waits.clone() {
                match wait.many {
                    Some(m) => {
                        assert!(m.granted, "{m:?}");
                        held.extend(m.leases);
                    }
                    None => {
                        assert!(wait.outcome.granted, "{wait:?}");
                        held.extend(wait.outcome.lease);
                    }
                }
                admitted += 1;
            }
        }
        assert_eq!(admitted, queued, "round {round}: every wait admitted");
        assert_eq!(log.state.waiters(), 0);
    }
}

#[test]
fn s4_25_an_acquire_many_never_sees_a_lease_past_its_grace() {
    let mut log = Log::new();
    let count = crate::machine::RECLAIMS_PER_ENTRY + 6;
    for k in 0..count {
        granted(&log.acquire(
            ALICE,
            acq_ttl(&format!("r{k:05}"), &format!("h{k}"), 10_000),
        ));
    }
    log.elapse(3_600_000);
    // The entry's reclaim budget leaves the newest leases for later; the AcquireMany's own
    // resources are settled before it looks.
    let last = format!("r{:05}", count - 1);
    let reply = log.propose(BOB, many("other", &[&last], None));
    assert_eq!(granted_all(&reply), triples(&[(&last, "other", log.index)]));
}

#[test]
fn s4_25_a_single_acquire_does_not_join_a_multi_wait() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq("y", "b")));
    waiting(&log.propose(ALICE, many("c", &["x", "y"], Some(60_000))));
    for resource in ["x", "y"] {
        let reply = log.acquire(
            ALICE,
            AcquireOp {
                wait_ms: Some(60_000),
                ..acq(resource, "c")
            },
        );
        assert_eq!(invalid_field(&reply), "resource", "{resource}");
    }
    assert_eq!(log.state.waiters(), 2);
}

#[test]
fn s4_25_a_multi_wait_takes_an_entry_of_its_own() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq("y", "b")));
    let replies = log.propose_batch(vec![
        (ALICE, many("c", &["x", "y"], Some(60_000))),
        (ALICE, many("d", &["z", "y"], Some(60_000))),
    ]);
    waiting(&replies[0]);
    assert_eq!(invalid_field(&replies[1]), "claims");
    assert_eq!(log.state.waiters(), 2);
}

#[test]
fn s4_25_a_full_waiting_room_in_any_named_resource_refuses_the_wait_in_all() {
    let mut log = Log::new();
    log.register(
        "y",
        Policy {
            max_waiters: 1,
            ..Policy::registered()
        },
    );
    granted(&log.acquire(BOB, acq("y", "b")));
    granted(&log.acquire(BOB, acq("x", "b")));
    log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(60_000),
            ..acq("y", "first")
        },
    );
    let reply = log.propose(ALICE, many("c", &["x", "y"], Some(60_000)));
    assert!(matches!(
        rejection(&reply),
        Rejection::WaitingRoomFull { max_waiters: 1 }
    ));
    // Not queued in x either.
    assert_eq!(waiters_of(&log, "x"), Vec::<String>::new());
}

#[test]
fn s4_25_holdings_of_another_principal_are_judged_before_already_held() {
    let mut log = Log::new();
    // h holds x for Alice on a session (not as asked below), and y for Bob: the first claim
    // alone would be already_held, but y's principal is judged first.
    let created = log.propose(
        ALICE,
        Op::CreateSession(CreateSessionOp {
            holder: "h".into(),
            ttl_ms: Some(10_000),
            metadata: Default::default(),
        }),
    );
    assert!(matches!(created, Reply::Session(_)));
    let mut on_session = many_op("h", &["x"], None);
    on_session.session_id = Some(session_name(log.index));
    on_session.ttl_ms = None;
    assert!(outcome(&log.propose(ALICE, Op::AcquireMany(on_session))).granted);
    granted(&log.acquire(BOB, acq("y", "h")));
    let reply = log.propose(ALICE, many("h", &["x", "y"], None));
    assert!(matches!(
        rejection(&reply),
        Rejection::InsufficientPermissions(_)
    ));
    // Holding x as asked but not y: already_held.
    granted(&log.acquire(ALICE, acq("z", "k")));
    let reply = log.propose(ALICE, many("k", &["z", "w"], None));
    assert!(matches!(rejection(&reply), Rejection::AlreadyHeld { .. }));
}

#[test]
fn s4_25_each_claim_is_checked_as_an_acquire_of_it_would_be() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 4));
    log.register("short", ttl_capped_policy(5_000));
    let claim = |resource: &str, mode: Mode, units: u64| Claim {
        resource: resource.into(),
        mode,
        units,
    };
    let with = |claims: Vec<Claim>, ttl_ms: Option<u64>| {
        Op::AcquireMany(AcquireManyOp {
            claims,
            ttl_ms,
            ..many_op("h", &[], None)
        })
    };
    // A mode the second resource's policy does not allow.
    let reply = log.propose(
        ALICE,
        with(
            vec![
                claim("x", Mode::Exclusive, 0),
                claim("pool", Mode::Write, 1),
            ],
            None,
        ),
    );
    assert!(matches!(
        rejection(&reply),
        Rejection::InvalidMode { mode: Mode::Write }
    ));
    // More units than the pool has.
    let reply = log.propose(
        ALICE,
        with(
            vec![claim("x", Mode::Exclusive, 0), claim("pool", Mode::Read, 5)],
            None,
        ),
    );
    assert_eq!(invalid_field(&reply), "units");
    // A ttl within the ad-hoc bounds but past one resource's max_ttl.
    let reply = log.propose(
        ALICE,
        with(
            vec![
                claim("x", Mode::Exclusive, 0),
                claim("short", Mode::Exclusive, 0),
            ],
            Some(10_000),
        ),
    );
    assert!(matches!(
        rejection(&reply),
        Rejection::TtlOutOfRange { max_ms: 5_000, .. }
    ));
    // With registration required, an unregistered resource.
    log.require_registration = true;
    let reply = log.propose(
        ALICE,
        with(
            vec![claim("pool", Mode::Read, 1), claim("x", Mode::Exclusive, 0)],
            None,
        ),
    );
    assert_eq!(rejection(&reply).reason(), "resource_not_found");
    assert_eq!(
        log.state.live_leases(),
        0,
        "no refused call granted anything"
    );
    // Granted without a ttl: each lease takes its own resource's default; one metadata for all.
    let mut op = AcquireManyOp {
        claims: vec![
            claim("pool", Mode::Read, 2),
            claim("short", Mode::Exclusive, 0),
        ],
        ttl_ms: None,
        ..many_op("h", &[], None)
    };
    op.metadata = BTreeMap::from([("job".to_string(), "7".to_string())]);
    let reply = log.propose(ALICE, Op::AcquireMany(op));
    let leases = outcome(&reply).leases;
    let ttls: Vec<u64> = leases.iter().map(|v| v.lease.ttl_ms).collect();
    assert_eq!(ttls, [Policy::registered().default_ttl_ms, 5_000]);
    assert_eq!(leases[0].lease.units, 2);
    for view in &leases {
        let metadata: Vec<(&String, &String)> = view.lease.metadata.iter().collect();
        assert_eq!(metadata, [(&"job".to_string(), &"7".to_string())]);
    }
}

#[test]
fn s4_25_the_answer_explains_every_claims_refusal_and_its_reason_is_the_first() {
    let mut log = Log::new();
    log.register("delayed", lock_delay_policy(5_000));
    log.register("pool", shared_policy(&[Mode::Read], 20));
    // "delayed" is closed by a reclaim; "pool" has 12 readers holding 1 unit each.
    granted(&log.acquire(BOB, acq_ttl("delayed", "b", 1_000)));
    for k in 0..12 {
        granted(&log.acquire(BOB, shared("pool", &format!("reader{k}"), Mode::Read, 1)));
    }
    log.elapse(1_000);
    log.tick();
    let mut op = many_op("h", &["free", "pool", "delayed"], None);
    op.claims[1].mode = Mode::Read;
    op.claims[1].units = 10;
    let answer = outcome(&log.propose(ALICE, Op::AcquireMany(op)));
    assert!(!answer.granted);
    let refusals: Vec<Option<Refusal>> = answer.claims.iter().map(|c| c.refusal).collect();
    assert_eq!(
        refusals,
        [
            None,
            Some(Refusal::InsufficientUnits),
            Some(Refusal::LockDelay)
        ]
    );
    assert_eq!(
        answer.summary().refusal,
        Some(Refusal::InsufficientUnits),
        "the first refusal in the order named"
    );
    assert_eq!(
        answer.claims[1].holders.len(),
        crate::many::CLAIM_HOLDERS_SHOWN,
        "the first holders only"
    );
    assert!(answer.claims[2].holders.is_empty());
    assert!(log.holders("free").is_empty());
}

#[test]
fn s4_25_a_multi_wait_takes_a_place_of_the_waiters_quota_in_every_room() {
    let mut log = Log::new();
    for r in ["x", "y", "z"] {
        granted(&log.acquire(BOB, acq_ttl(r, "b", 600_000)));
    }
    set(&mut log, Some("alice"), Quota::Waiters, Some(2));
    let reply = log.propose(ALICE, many("h", &["x", "y", "z"], Some(60_000)));
    assert!(matches!(rejection(&reply), Rejection::QuotaExceeded { .. }));
    assert_eq!(log.state.waiters(), 0, "no place taken in any room");
    waiting(&log.propose(ALICE, many("h", &["x", "y"], Some(60_000))));
    assert_eq!(log.state.waiters(), 2);
    assert_eq!(usage(&log, "alice", Quota::Waiters), 2);
}

#[test]
fn s4_25_a_retry_after_the_wait_timed_out_answers_the_timeout() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq_ttl("y", "b", 600_000)));
    let request = Some("req-late".to_string());
    let op = many("c", &["x", "y"], Some(5_000));
    waiting(&log.propose_with(ALICE, request.clone(), op.clone()));
    log.elapse(5_000);
    log.tick();
    assert_eq!(decided_many(&log).refusal, Some(Refusal::WaitTimeout));
    let retried = outcome(&log.propose_with(ALICE, request, op));
    assert!(!retried.granted);
    assert_eq!(retried.refusal, Some(Refusal::WaitTimeout));
    assert_eq!(log.state.waiters(), 0, "the retry did not queue again");
}
