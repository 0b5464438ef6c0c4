//! SPEC §4.24 (sessions), driven through `apply`.

use std::collections::{BTreeMap, BTreeSet};

use super::quotas::{over_quota, recount_agrees, set, usage};
use super::*;
use crate::command::{CloseSessionOp, CreateSessionOp, RenewSessionOp, SessionAcquireOp};
use crate::history::EventKind;
use crate::quota::Quota;
use crate::session::{session_name, SessionStatus, SessionView, MAX_SESSION_ITEMS};
use crate::types::LeaseStatus;

fn create_op(holder: &str, ttl_ms: Option<u64>) -> Op {
    Op::CreateSession(CreateSessionOp {
        holder: holder.into(),
        ttl_ms,
        metadata: Default::default(),
    })
}

#[track_caller]
fn session(reply: &Reply) -> SessionView {
    match reply {
        Reply::Session(view) => (**view).clone(),
        other => panic!("expected a session, got {other:?}"),
    }
}

/// Creates a session of `holder` for `caller`; its id as written.
#[track_caller]
fn open(log: &mut Log, caller: Caller, holder: &str, ttl_ms: u64) -> String {
    let view = session(&log.propose(caller, create_op(holder, Some(ttl_ms))));
    assert_eq!(view.id, log.index, "a session is named after its entry");
    assert_eq!(view.status, SessionStatus::Active);
    session_name(view.id)
}

fn on(session_id: &str, op: AcquireOp) -> Op {
    Op::AcquireOnSession(SessionAcquireOp {
        session_id: session_id.into(),
        acquire: op,
    })
}

fn renew_session(session_id: &str) -> Op {
    Op::RenewSession(RenewSessionOp {
        session_id: session_id.into(),
    })
}

fn close_session(session_id: &str) -> Op {
    Op::CloseSession(CloseSessionOp {
        session_id: session_id.into(),
    })
}

fn wait(resource: &str, holder: &str) -> AcquireOp {
    AcquireOp {
        wait_ms: Some(600_000),
        ..acq(resource, holder)
    }
}

/// `n` leases of `holder` on session `id`, on resources `<prefix>0..n`.
fn hold_many(log: &mut Log, id: &str, holder: &str, prefix: &str, n: usize) -> Vec<LeaseView> {
    (0..n)
        .map(|k| granted(&log.propose(ALICE, on(id, acq(&format!("{prefix}{k}"), holder)))))
        .collect()
}

#[test]
fn s4_24_one_renewal_of_a_session_keeps_every_lease_on_it_alive() {
    let mut log = Log::new();
    let id = open(&mut log, ALICE, "worker", 10_000);
    let leases = hold_many(&mut log, &id, "worker", "shard/", 5);
    for view in &leases {
        assert_eq!(view.lease.ttl_ms, 10_000, "the session's ttl");
        assert_eq!(view.status, LeaseStatus::Active);
    }
    log.elapse(8_000);
    let renewed = session(&log.propose(ALICE, renew_session(&id)));
    assert_eq!(renewed.remaining_ms, 10_000);
    assert_eq!(renewed.lease_count, 5);
    assert!(
        renewed.leases.is_empty(),
        "a renewal answers counts, not leases"
    );
    // Past the leases' first expiry (10 s), inside the session's renewed one.
    log.elapse(8_000);
    assert_eq!(log.tick(), Reply::Reclaimed(vec![]));
    for k in 0..5 {
        let shown = log.state.resource_view(&format!("shard/{k}")).leases;
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].status, LeaseStatus::Active);
        assert_eq!(shown[0].remaining_ms, 2_000, "the session's expiry");
    }
    assert_eq!(log.state.live_leases(), 5);
    // A renewal changes the session, not the leases: no `renewed` event on any of them.
    assert_eq!(
        log.newest_events("shard/0", 1),
        vec![(leases[0].lease.fencing_token, EventKind::Acquired)]
    );
}

#[test]
fn s4_24_when_a_session_expires_every_lease_on_it_ends_in_one_entry_naming_it() {
    let mut log = Log::new();
    let id = open(&mut log, ALICE, "worker", 5_000);
    let session_index = log.index;
    hold_many(&mut log, &id, "worker", "shard/", 100);
    // Another holder waits on one of them.
    let (_, queued) = refused(&log.acquire(BOB, wait("shard/7", "other")));
    assert_eq!(queued, held(&[("worker", session_index + 8)]));
    log.elapse(5_000);
    let reclaimed = match log.tick() {
        Reply::Reclaimed(views) => views,
        other => panic!("expected reclaims, got {other:?}"),
    };
    let reclaim_index = log.index;
    assert_eq!(reclaimed.len(), 100, "all of them, in this one entry");
    assert!(reclaimed.iter().all(|v| v.status == LeaseStatus::Reclaimed));
    for k in 0..100 {
        let events = log.events(&format!("shard/{k}"));
        let end = events
            .iter()
            .rfind(|e| e.kind == EventKind::Reclaimed)
            .expect("a reclaimed event");
        assert_eq!(end.revision, reclaim_index);
        assert_eq!(end.actor, "tenure");
        assert_eq!(end.session.map(|s| s.get()), Some(session_index));
    }
    // The waiter it freed is admitted in that same entry.
    assert_eq!(log.holders("shard/7"), held(&[("other", reclaim_index)]));
    assert_eq!(log.state.session_count(), 0);
    assert_eq!(log.state.live_leases(), 1);
    let gone = rejection(&log.propose(ALICE, renew_session(&id)));
    assert_eq!(gone.reason(), "session_not_found");
}

#[test]
fn s4_24_a_session_in_its_grace_still_holds_and_a_renewal_makes_it_active_again() {
    let mut log = Log::with_default_policy(Policy {
        renewal_grace_ms: 3_000,
        ..Policy::ad_hoc()
    });
    let id = open(&mut log, ALICE, "worker", 5_000);
    hold_many(&mut log, &id, "worker", "r", 1);
    log.elapse(6_000);
    assert_eq!(log.tick(), Reply::Reclaimed(vec![]));
    assert_eq!(
        log.state.resource_view("r0").leases[0].status,
        LeaseStatus::Grace
    );
    let (refusal, _) = refused(&log.acquire(BOB, acq("r0", "other")));
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    let renewed = session(&log.propose(ALICE, renew_session(&id)));
    assert_eq!(renewed.status, SessionStatus::Active);
    assert_eq!(
        log.state.resource_view("r0").leases[0].status,
        LeaseStatus::Active
    );
    // Expiry plus grace: gone.
    log.elapse(8_000);
    assert!(matches!(log.tick(), Reply::Reclaimed(v) if v.len() == 1));
}

/// A registered resource whose leases keep `renewal_grace_ms` past their expiry.
fn grace_policy(renewal_grace_ms: u64) -> Policy {
    Policy {
        renewal_grace_ms,
        ..lock_delay_policy(0)
    }
}

#[test]
fn s4_24_a_sessions_grace_is_the_longest_renewal_grace_of_its_leases_resources() {
    // The ad-hoc policy has no grace; "slow" has 4 s.
    let mut log = Log::new();
    log.register("slow", grace_policy(4_000));
    let id = open(&mut log, ALICE, "w", 5_000);
    granted(&log.propose(ALICE, on(&id, acq("quick", "w"))));
    granted(&log.propose(ALICE, on(&id, acq("slow", "w"))));
    // A restored node agrees on when the session falls due.
    log.restore_from_snapshot();
    // Past its expiry, inside the longest grace: both leases still hold, in GRACE.
    log.elapse(5_000);
    assert_eq!(log.tick(), Reply::Reclaimed(vec![]));
    for resource in ["quick", "slow"] {
        let shown = log.state.resource_view(resource).leases;
        assert_eq!(shown.len(), 1, "{resource} still held");
        assert_eq!(shown[0].status, LeaseStatus::Grace);
    }
    let (refusal, _) = refused(&log.acquire(BOB, acq("quick", "other")));
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    // A renewal in that grace is accepted.
    let renewed = session(&log.propose(ALICE, renew_session(&id)));
    assert_eq!(renewed.status, SessionStatus::Active);
    // Renewed at 5 s: expiry 10 s, grace to 14 s; both end then, in one entry.
    log.elapse(8_999);
    assert_eq!(log.tick(), Reply::Reclaimed(vec![]));
    log.elapse(1);
    match log.tick() {
        Reply::Reclaimed(views) => {
            let mut ended: Vec<&str> = views.iter().map(|v| &*v.lease.resource).collect();
            ended.sort_unstable();
            assert_eq!(ended, ["quick", "slow"]);
        }
        other => panic!("expected reclaims, got {other:?}"),
    }
}

#[test]
fn s4_24_a_sessions_grace_shrinks_when_its_longest_grace_lease_ends() {
    let mut log = Log::new();
    log.register("slow", grace_policy(4_000));
    let id = open(&mut log, ALICE, "w", 5_000);
    granted(&log.propose(ALICE, on(&id, acq("quick", "w"))));
    let slow = granted(&log.propose(ALICE, on(&id, acq("slow", "w"))));
    lease(&log.release(ALICE, release_of(&slow)));
    // A restored node agrees: the released lease's grace is no longer the session's.
    log.restore_from_snapshot();
    // Only the ad-hoc lease is left: the session has the ad-hoc policy's grace (none).
    log.elapse(5_000);
    assert!(matches!(log.tick(), Reply::Reclaimed(v) if v.len() == 1));
    assert!(log.state.resource_view("quick").leases.is_empty());
}

#[test]
fn s4_24_a_reclaimed_session_starts_each_resources_lock_delay_and_a_close_does_not() {
    let mut log = Log::new();
    log.register("delayed", lock_delay_policy(2_000));
    log.register("closed", lock_delay_policy(2_000));
    let expiring = open(&mut log, ALICE, "a", 5_000);
    granted(&log.propose(ALICE, on(&expiring, acq("delayed", "a"))));
    let closing = open(&mut log, ALICE, "b", 60_000);
    granted(&log.propose(ALICE, on(&closing, acq("closed", "b"))));
    log.elapse(5_000);
    log.tick();
    let (refusal, _) = refused(&log.acquire(BOB, acq("delayed", "other")));
    assert_eq!(refusal, Refusal::LockDelay);
    let closed = session(&log.propose(ALICE, close_session(&closing)));
    assert_eq!(closed.status, SessionStatus::Closed);
    assert_eq!(closed.leases.len(), 1);
    assert_eq!(closed.leases[0].status, LeaseStatus::Released);
    granted(&log.acquire(BOB, acq("closed", "other")));
}

#[test]
fn s4_24_closing_a_session_releases_its_leases_and_cancels_its_waits_in_one_entry() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq_ttl("busy", "other", 60_000)));
    let id = open(&mut log, ALICE, "worker", 60_000);
    hold_many(&mut log, &id, "worker", "r", 3);
    let queued = log.propose(ALICE, on(&id, wait("busy", "worker")));
    assert!(matches!(&queued, Reply::Acquire(o) if o.wait_id == Some(log.index)));
    let closed = session(&log.propose(ALICE, close_session(&id)));
    let close_index = log.index;
    assert_eq!(closed.status, SessionStatus::Closed);
    assert_eq!(closed.lease_count, 3);
    assert_eq!(closed.wait_count, 1);
    for k in 0..3 {
        assert_eq!(
            log.newest_events(&format!("r{k}"), 1),
            vec![(close_index, EventKind::Released)]
        );
        assert!(log.holders(&format!("r{k}")).is_empty());
    }
    let waits = log.state.effects().waits.clone();
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].outcome.refusal, Some(Refusal::WaitCancelled));
    assert_eq!(log.state.waiters(), 0);
    assert_eq!(log.state.live_leases(), 1);
    let again = rejection(&log.propose(ALICE, close_session(&id)));
    assert_eq!(again.reason(), "session_not_found");
}

#[test]
fn s4_24_a_wait_on_a_session_is_admitted_onto_the_session() {
    let mut log = Log::new();
    let blocker = granted(&log.acquire(BOB, acq_ttl("r", "other", 60_000)));
    let id = open(&mut log, ALICE, "worker", 10_000);
    let index = log.index;
    log.propose(ALICE, on(&id, wait("r", "worker")));
    log.release(BOB, release_of(&blocker));
    let admitted = log.state.effects().waits[0]
        .outcome
        .lease
        .clone()
        .expect("admitted");
    assert_eq!(admitted.lease.session.map(|s| s.get()), Some(index));
    assert_eq!(log.state.session(index).map(|s| s.leases.len()), Some(1));
    // It ends with the session, not by its own ttl.
    log.elapse(10_000);
    assert!(matches!(log.tick(), Reply::Reclaimed(v) if v.len() == 1));
}

#[test]
fn s4_24_a_lease_on_a_session_cannot_be_renewed_alone() {
    let mut log = Log::new();
    let id = open(&mut log, ALICE, "worker", 10_000);
    let index = log.index;
    let view = granted(&log.propose(ALICE, on(&id, acq("r", "worker"))));
    assert_eq!(
        invalid_field(&log.renew(ALICE, renew_of(&view, None))),
        "lease_id"
    );
    let message = rejection(&log.renew(ALICE, renew_of(&view, None))).to_string();
    assert!(message.contains("renew the session"), "{message}");
    // Release works as for any lease, and the session no longer carries it.
    lease(&log.release(ALICE, release_of(&view)));
    assert_eq!(log.state.session(index).map(|s| s.leases.len()), Some(0));
}

#[test]
fn s4_24_only_the_sessions_principal_or_an_admin_may_attach_renew_or_close_it() {
    let mut log = Log::new();
    let id = open(&mut log, ALICE, "worker", 10_000);
    for op in [
        on(&id, acq("r", "worker")),
        renew_session(&id),
        close_session(&id),
    ] {
        let refused = rejection(&log.propose(BOB, op));
        assert_eq!(refused.reason(), "insufficient_permissions", "{refused}");
    }
    granted(&log.propose(ROOT, on(&id, acq("r", "worker"))));
    session(&log.propose(ROOT, renew_session(&id)));
    session(&log.propose(ROOT, close_session(&id)));
}

#[test]
fn s4_24_bad_session_input_is_refused_with_its_reason() {
    let mut log = Log::new();
    log.register(
        "capped",
        Policy {
            max_lifetime_ms: 60_000,
            default_ttl_ms: 30_000,
            ..Policy::registered()
        },
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, create_op("bad name", None))),
        "holder"
    );
    for ttl_ms in [999, 25 * 3_600_000] {
        let refused = rejection(&log.propose(ALICE, create_op("w", Some(ttl_ms))));
        assert_eq!(refused.reason(), "ttl_out_of_range", "{ttl_ms}");
    }
    let too_much = Op::CreateSession(CreateSessionOp {
        holder: "w".into(),
        ttl_ms: None,
        metadata: [("k".to_string(), "v".repeat(20_000))].into(),
    });
    assert_eq!(invalid_field(&log.propose(ALICE, too_much)), "metadata");
    let id = open(&mut log, ALICE, "w", 10_000);
    let index = log.index;
    for malformed in ["", "ses_", "ses_01", "ses_x", "lse_1_0", "ses_-1"] {
        assert_eq!(
            invalid_field(&log.propose(ALICE, renew_session(malformed))),
            "session_id",
            "{malformed:?}"
        );
    }
    let unknown = rejection(&log.propose(ALICE, on("ses_999", acq("r", "w"))));
    assert_eq!(unknown.reason(), "session_not_found");
    assert_eq!(
        invalid_field(&log.propose(ALICE, on(&id, acq("r", "not-w")))),
        "holder"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, on(&id, acq_ttl("r", "w", 5_000)))),
        "ttl"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, on(&id, acq("capped", "w")))),
        "session_id"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, on(&id, acq("bad name", "w")))),
        "resource"
    );
    // Nothing of that changed the session.
    assert_eq!(log.state.session(index).map(|s| s.leases.len()), Some(0));
    assert_eq!(log.state.live_leases(), 0);
}

#[test]
fn s4_24_a_holders_lease_comes_back_only_from_its_own_session() {
    let mut log = Log::new();
    let one = open(&mut log, ALICE, "w", 10_000);
    let two = open(&mut log, ALICE, "w", 10_000);
    let first = granted(&log.propose(ALICE, on(&one, acq("r", "w"))));
    assert_eq!(granted(&log.propose(ALICE, on(&one, acq("r", "w")))), first);
    let other = rejection(&log.propose(ALICE, on(&two, acq("r", "w"))));
    assert_eq!(other.reason(), "already_held");
    let plain = rejection(&log.acquire(ALICE, acq("r", "w")));
    assert_eq!(plain.reason(), "already_held");
}

#[test]
fn s4_24_sessions_count_against_the_sessions_quota() {
    let mut log = Log::new();
    set(&mut log, Some("alice"), Quota::Sessions, Some(1));
    let id = open(&mut log, ALICE, "w", 10_000);
    over_quota(&log.propose(ALICE, create_op("w2", None)), Quota::Sessions);
    assert_eq!(usage(&log, "alice", Quota::Sessions), 1);
    recount_agrees(&log);
    session(&log.propose(ALICE, close_session(&id)));
    assert_eq!(usage(&log, "alice", Quota::Sessions), 0);
    open(&mut log, ALICE, "w2", 10_000);
    // Leases on a session count as leases; a session's metadata as metadata.
    let two = session_name(log.index);
    granted(&log.propose(ALICE, on(&two, acq("r", "w2"))));
    assert_eq!(usage(&log, "alice", Quota::Leases), 1);
    assert_eq!(usage(&log, "alice", Quota::MetadataBytes), 0);
    let tagged = Op::CreateSession(CreateSessionOp {
        holder: "w3".into(),
        ttl_ms: None,
        metadata: BTreeMap::from([("job".to_string(), "shards".to_string())]),
    });
    set(&mut log, Some("alice"), Quota::Sessions, Some(2));
    let three = session(&log.propose(ALICE, tagged));
    assert_eq!(
        usage(&log, "alice", Quota::MetadataBytes),
        crate::quota::metadata_cost(three.metadata.iter())
    );
    assert!(usage(&log, "alice", Quota::MetadataBytes) > 0);
    recount_agrees(&log);
    session(&log.propose(ALICE, close_session(&session_name(three.id))));
    assert_eq!(usage(&log, "alice", Quota::MetadataBytes), 0);
}

#[test]
fn s4_24_a_session_carries_at_most_10000_leases_and_waits() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq_ttl("busy", "other", 600_000)));
    granted(&log.acquire(BOB, acq_ttl("busy2", "other", 600_000)));
    let id = open(&mut log, ALICE, "w", 60_000);
    // 9,999 leases and one wait: the wait counts as an item.
    hold_many(&mut log, &id, "w", "r", MAX_SESSION_ITEMS - 1);
    refused(&log.propose(ALICE, on(&id, wait("busy", "w"))));
    assert_eq!(log.state.waiters(), 1);
    let full = rejection(&log.propose(ALICE, on(&id, acq("one-more", "w"))));
    assert_eq!(full.reason(), "resource_exhausted");
    assert!(full.to_string().contains("10000"), "{full}");
    let full = rejection(&log.propose(ALICE, on(&id, wait("busy2", "w"))));
    assert_eq!(full.reason(), "resource_exhausted");
    assert_eq!(log.state.waiters(), 1);
    // All of them end together.
    session(&log.propose(ALICE, close_session(&id)));
    assert_eq!(log.state.live_leases(), 2);
    assert_eq!(log.state.waiters(), 0);
}

#[test]
fn s4_24_a_mass_expiry_ends_each_session_whole_in_one_entry() {
    let mut log = Log::new();
    let ids: Vec<String> = (0..3)
        .map(|k| {
            let id = open(&mut log, ALICE, &format!("w{k}"), 5_000);
            hold_many(&mut log, &id, &format!("w{k}"), &format!("s{k}/"), 600);
            id
        })
        .collect();
    log.elapse(5_000);
    let first = match log.tick() {
        Reply::Reclaimed(views) => views,
        other => panic!("expected reclaims, got {other:?}"),
    };
    // 1,024 per entry, but a session is never split: two whole sessions, the third next.
    assert_eq!(first.len(), 1_200);
    let sessions: BTreeSet<_> = first.iter().map(|v| v.lease.holder.to_string()).collect();
    assert_eq!(
        sessions,
        BTreeSet::from(["w0".to_string(), "w1".to_string()])
    );
    // A command on a resource of the third, still due, ends that whole session first.
    granted(&log.acquire(BOB, acq("s2/17", "other")));
    assert_eq!(log.state.live_leases(), 1);
    assert_eq!(log.state.session_count(), 0);
    for id in &ids {
        let gone = rejection(&log.propose(ALICE, renew_session(id)));
        assert_eq!(gone.reason(), "session_not_found");
    }
}

#[test]
fn s4_24_a_transferred_lease_leaves_the_session_and_keeps_its_expiry() {
    let mut log = Log::new();
    log.register("t", transferable());
    let id = open(&mut log, ALICE, "w", 10_000);
    let index = log.index;
    let view = granted(&log.propose(ALICE, on(&id, acq("t", "w"))));
    log.elapse(4_000);
    session(&log.propose(ALICE, renew_session(&id)));
    let moved = lease(&log.transfer(ALICE, transfer_of(&view, "heir", None)));
    assert_eq!(moved.lease.session, None);
    assert_eq!(moved.lease.ttl_ms, 10_000, "the session's ttl");
    assert_eq!(
        moved.remaining_ms, 10_000,
        "the session's expiry when it moved"
    );
    assert_eq!(log.state.session(index).map(|s| s.leases.len()), Some(0));
    let transferred = log
        .events("t")
        .into_iter()
        .rfind(|e| e.kind == EventKind::Transferred)
        .expect("a transferred event");
    assert_eq!(transferred.session.map(|s| s.get()), Some(index));
    // Closing the session leaves the heir's lease alone; it renews as its own.
    session(&log.propose(ALICE, close_session(&id)));
    lease(&log.renew(ALICE, renew_of(&moved, None)));
}

#[test]
fn s4_24_a_session_is_created_once_per_request_id() {
    let mut log = Log::new();
    let first = log.propose_with(ALICE, Some("req-1".into()), create_op("w", None));
    let again = log.propose_with(ALICE, Some("req-1".into()), create_op("w", None));
    assert_eq!(session(&first).id, session(&again).id);
    assert_eq!(log.state.session_count(), 1);
    let other = log.propose_with(ALICE, Some("req-1".into()), create_op("w2", None));
    assert_eq!(invalid_field(&other), "request_id");
}

#[test]
fn s4_24_a_snapshot_keeps_sessions_and_what_they_carry() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq_ttl("busy", "other", 60_000)));
    let id = open(&mut log, ALICE, "w", 5_000);
    let held = hold_many(&mut log, &id, "w", "r", 4);
    // An ended lease of the session is remembered as every node remembers it.
    lease(&log.release(ALICE, release_of(&held[3])));
    log.propose(ALICE, on(&id, wait("busy", "w")));
    log.restore_from_snapshot();
    assert_eq!(log.state.live_leases(), 4);
    log.elapse(5_000);
    assert!(matches!(log.tick(), Reply::Reclaimed(v) if v.len() == 3));
    assert_eq!(log.state.waiters(), 0, "its wait was cancelled with it");
}

#[test]
fn s4_24_a_session_past_its_grace_is_never_renewed_even_when_the_reclaim_budget_left_it() {
    let mut log = Log::new();
    // More plain leases due before the session than one entry reclaims.
    for k in 0..(crate::machine::RECLAIMS_PER_ENTRY + 10) {
        granted(&log.acquire(BOB, acq_ttl(&format!("plain/{k}"), "b", 5_000)));
    }
    log.elapse(500);
    let id = open(&mut log, ALICE, "w", 5_000);
    hold_many(&mut log, &id, "w", "s", 2);
    log.elapse(6_000);
    // This entry's reclaims go to the leases due first; the session is due too, and the
    // renewal that names it finds it reclaimed, not revived.
    let gone = rejection(&log.propose(ALICE, renew_session(&id)));
    assert_eq!(gone.reason(), "session_not_found");
    assert_eq!(
        log.newest_events("s0", 1),
        vec![(log.index, EventKind::Reclaimed)]
    );
    let refused = rejection(&log.propose(ALICE, on(&id, acq("s9", "w"))));
    assert_eq!(refused.reason(), "session_not_found");
}

#[test]
fn s4_24_a_transfer_to_a_holder_waiting_on_a_session_ends_that_wait() {
    let mut log = Log::new();
    log.register("t", transferable());
    let first = granted(&log.acquire(ALICE, acq_ttl("t", "a", 60_000)));
    let id = open(&mut log, ALICE, "w", 10_000);
    let index = log.index;
    log.propose(ALICE, on(&id, wait("t", "w")));
    let moved = lease(&log.transfer(ALICE, transfer_of(&first, "w", None)));
    // The holder holds the resource now, with a lease of its own, not on the session.
    assert_eq!(moved.lease.session, None);
    let waits = log.state.effects().waits.clone();
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].outcome.refusal, Some(Refusal::WaitCancelled));
    assert_eq!(log.state.session(index).map(|s| s.waits.len()), Some(0));
    assert_eq!(log.state.waiters(), 0);
}

#[test]
fn s4_24_a_wait_on_a_session_past_its_grace_is_never_admitted() {
    let mut log = Log::new();
    // "a-r" is held by a plain lease due first; more plain leases fall due with it than one
    // entry reclaims, so the session waiting for "a-r" is left for later by the budget.
    granted(&log.acquire(BOB, acq_ttl("a-r", "b", 5_000)));
    for k in 0..crate::machine::RECLAIMS_PER_ENTRY + 10 {
        granted(&log.acquire(BOB, acq_ttl(&format!("plain/{k}"), "b", 5_000)));
    }
    log.elapse(500);
    let id = open(&mut log, ALICE, "w", 5_000);
    let index = log.index;
    log.propose(ALICE, on(&id, wait("a-r", "w")));
    log.elapse(6_000);
    log.tick();
    // The reclaim of "a-r" freed it, and its head waiter's session was past its grace: the
    // session ended, its wait cancelled, nothing granted on it.
    assert!(log.holders("a-r").is_empty(), "{:?}", log.holders("a-r"));
    let decided = log.state.effects().waits.clone();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].outcome.refusal, Some(Refusal::WaitCancelled));
    assert_eq!(log.state.session(index).map(|s| s.leases.len()), None);
}

#[test]
fn s4_24_a_lease_on_a_session_has_no_end_for_bookings() {
    let mut log = Log::new();
    log.register(
        "room",
        Policy {
            bookable: true,
            ..Policy::registered()
        },
    );
    let book = |holder: &str, start_wall_ms: u64| {
        Op::Book(crate::command::BookOp {
            resource: "room".into(),
            holder: holder.into(),
            start_wall_ms,
            duration_ms: 60_000,
            ad_hoc_bookable: false,
        })
    };
    let id = open(&mut log, ALICE, "w", 10_000);
    granted(&log.propose(ALICE, on(&id, acq("room", "w"))));
    // Far past the session's ttl, yet refused: the session may be renewed into it.
    let far = log.state.clock().wall_ms() + 3_600_000;
    let held_into = rejection(&log.propose(BOB, book("other", far)));
    assert_eq!(held_into.reason(), "resource_unavailable", "{held_into}");
    session(&log.propose(ALICE, close_session(&id)));
    // The other way round: a booking ahead, however far, is in a session lease's way.
    assert!(matches!(
        log.propose(BOB, book("other", far)),
        Reply::Booking(_)
    ));
    let id = open(&mut log, ALICE, "w", 10_000);
    let (why, _) = refused(&log.propose(ALICE, on(&id, acq("room", "w"))));
    assert!(matches!(why, Refusal::ResourceBooked { .. }), "{why:?}");
}

#[test]
fn s4_24_every_event_about_a_lease_or_wait_on_a_session_names_it() {
    let mut log = Log::new();
    let blocker = granted(&log.acquire(BOB, acq_ttl("r", "other", 60_000)));
    let id = open(&mut log, ALICE, "w", 10_000);
    let index = log.index;
    log.propose(ALICE, on(&id, wait("r", "w")));
    log.release(BOB, release_of(&blocker));
    let admitted = log.holders("r");
    assert_eq!(admitted[0].0, "w");
    session(&log.propose(ALICE, close_session(&id)));
    let events = log.events("r");
    for kind in [EventKind::Queued, EventKind::Admitted, EventKind::Released] {
        let named: Vec<_> = events
            .iter()
            .filter(|e| e.kind == kind && e.holder == "w")
            .map(|e| e.session.map(|s| s.get()))
            .collect();
        assert_eq!(named, vec![Some(index)], "{kind:?}");
    }
    let first = log
        .events("r")
        .into_iter()
        .find(|e| e.kind == EventKind::Acquired)
        .expect("the blocker's acquire");
    assert_eq!(first.session, None, "a lease of its own names none");
    let id = open(&mut log, ALICE, "w", 10_000);
    let index = log.index;
    granted(&log.propose(ALICE, on(&id, acq("s", "w"))));
    let acquired = log.events("s");
    assert_eq!(acquired[0].kind, EventKind::Acquired);
    assert_eq!(acquired[0].session.map(|s| s.get()), Some(index));
}

#[test]
fn s4_24_a_lease_on_a_session_is_held_to_its_resources_ttl_bounds() {
    let mut log = Log::new();
    log.register("short", ttl_capped_policy(5_000));
    let long = open(&mut log, ALICE, "w", 10_000);
    assert!(matches!(
        rejection(&log.propose(ALICE, on(&long, acq("short", "w")))),
        Rejection::TtlOutOfRange {
            ttl_ms: 10_000,
            max_ms: 5_000,
            ..
        }
    ));
    let fits = open(&mut log, ALICE, "v", 5_000);
    granted(&log.propose(ALICE, on(&fits, acq("short", "v"))));
}

#[test]
fn s4_24_a_holder_waiting_on_a_session_cannot_wait_again_on_another_or_none() {
    let mut log = Log::new();
    granted(&log.acquire(BOB, acq_ttl("busy", "other", 600_000)));
    let one = open(&mut log, ALICE, "w", 60_000);
    let two = open(&mut log, ALICE, "w", 60_000);
    refused(&log.propose(ALICE, on(&one, wait("busy", "w"))));
    let again = rejection(&log.propose(ALICE, on(&two, wait("busy", "w"))));
    assert_eq!(again.reason(), "invalid_argument");
    let plain = rejection(&log.acquire(ALICE, wait("busy", "w")));
    assert_eq!(plain.reason(), "invalid_argument");
    assert_eq!(log.state.waiters(), 1);
    // The same wait on the same session is joined again, not refused.
    refused(&log.propose(ALICE, on(&one, wait("busy", "w"))));
    assert_eq!(log.state.waiters(), 1);
}

#[test]
fn s4_24_a_close_admits_the_waiters_it_frees_in_its_own_entry_and_names_its_caller() {
    let mut log = Log::new();
    let id = open(&mut log, ALICE, "w", 60_000);
    granted(&log.propose(ALICE, on(&id, acq("r", "w"))));
    refused(&log.acquire(BOB, wait("r", "other")));
    session(&log.propose(ALICE, close_session(&id)));
    let close_index = log.index;
    assert_eq!(log.holders("r"), held(&[("other", close_index)]));
    let events: Vec<(EventKind, String, u64)> = log
        .events("r")
        .into_iter()
        .filter(|e| e.revision == close_index)
        .map(|e| (e.kind, e.actor.to_string(), e.revision))
        .collect();
    assert_eq!(
        events,
        [
            (EventKind::Released, "alice".to_string(), close_index),
            (EventKind::Admitted, "bob".to_string(), close_index),
        ]
    );
}

#[test]
fn s4_24_a_session_past_its_grace_is_never_closed_or_attached_to() {
    for op in ["close", "attach"] {
        let mut log = Log::new();
        let id = open(&mut log, ALICE, "w", 5_000);
        hold_many(&mut log, &id, "w", "s", 2);
        log.elapse(5_000);
        // No tick: the call is the first entry to name the due session.
        let reply = match op {
            "close" => log.propose(ALICE, close_session(&id)),
            _ => log.propose(ALICE, on(&id, acq("fresh", "w"))),
        };
        assert_eq!(rejection(&reply).reason(), "session_not_found", "{op}");
        assert_eq!(
            log.newest_events("s0", 1),
            vec![(log.index, EventKind::Reclaimed)],
            "{op}: reclaimed, by that entry"
        );
        assert_eq!(log.state.live_leases(), 0, "{op}");
    }
}

#[test]
fn s4_24_a_session_with_more_leases_than_the_reclaim_budget_ends_whole_in_one_entry() {
    let mut log = Log::new();
    let n = crate::machine::RECLAIMS_PER_ENTRY + 100;
    let id = open(&mut log, ALICE, "w", 5_000);
    hold_many(&mut log, &id, "w", "r", n);
    log.elapse(5_000);
    assert!(matches!(log.tick(), Reply::Reclaimed(v) if v.len() == n));
    assert_eq!(log.state.live_leases(), 0);
    assert_eq!(log.state.session_count(), 0);
}
