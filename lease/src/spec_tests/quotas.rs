//! Quotas per principal (SPEC §4.17): every quota refuses past its limit with
//! `resource_exhausted` and the quota's name, counts only what the principal really holds,
//! and frees as things end; the exactly-once table is slim and bounded (SPEC §4.18).

use super::*;
use crate::command::{BookOp, SetQuotaOp};
use crate::dedup::RECORD_BYTES;
use crate::quota::{Quota, METADATA_ENTRY_BYTES};

pub(super) fn set(
    log: &mut Log,
    principal: Option<&str>,
    quota: Quota,
    limit: Option<u64>,
) -> Reply {
    log.propose(
        ROOT,
        Op::SetQuota(SetQuotaOp {
            principal: principal.map(str::to_string),
            changes: vec![(quota, limit)],
        }),
    )
}

#[track_caller]
pub(super) fn over_quota(reply: &Reply, quota: Quota) {
    match rejection(reply) {
        Rejection::QuotaExceeded { quota: name, .. } => assert_eq!(name, quota.name()),
        other => panic!("expected the {} quota, got {other:?}", quota.name()),
    }
}

pub(super) fn usage(log: &Log, principal: &str, quota: Quota) -> u64 {
    log.state.quotas.usage(principal).get(quota)
}

/// What every principal holds, counted from scratch, equals what apply counted as it went.
#[track_caller]
pub(super) fn recount_agrees(log: &Log) {
    let mut fresh = log.state.snapshot_copy().restored();
    fresh.recount_usage_with(None);
    for principal in ["alice", "bob", "root"] {
        assert_eq!(
            fresh.quotas.usage(principal),
            log.state.quotas.usage(principal),
            "{principal}"
        );
    }
}

#[test]
fn only_an_admin_sets_quotas_and_the_override_beats_the_default() {
    let mut log = Log::new();
    let refused = log.propose(
        ALICE,
        Op::SetQuota(SetQuotaOp {
            principal: Some("alice".into()),
            changes: vec![(Quota::Leases, Some(1_000_000))],
        }),
    );
    assert_eq!(rejection(&refused).reason(), "insufficient_permissions");
    set(&mut log, None, Quota::Leases, Some(1));
    set(&mut log, Some("bob"), Quota::Leases, Some(2));
    granted(&log.acquire(ALICE, acq("r1", "a")));
    over_quota(&log.acquire(ALICE, acq("r2", "a")), Quota::Leases);
    granted(&log.acquire(BOB, acq("r1b", "b")));
    granted(&log.acquire(BOB, acq("r2b", "b")));
    over_quota(&log.acquire(BOB, acq("r3b", "b")), Quota::Leases);
    recount_agrees(&log);
}

#[test]
fn the_lease_quota_counts_live_leases_and_frees_on_release_reclaim_and_transfer() {
    let mut log = Log::new();
    log.register("t", transferable());
    set(&mut log, Some("alice"), Quota::Leases, Some(2));
    let a = granted(&log.acquire(ALICE, acq("r1", "a")));
    granted(&log.acquire(ALICE, acq_ttl("r2", "a", 1_000)));
    over_quota(&log.acquire(ALICE, acq("r3", "a")), Quota::Leases);
    // An idempotent re-acquire of a held lease is no new lease.
    granted(&log.acquire(ALICE, acq("r1", "a")));
    // A refusal for another reason is not a quota refusal.
    granted(&log.acquire(BOB, acq("busy", "b")));
    let (refusal, _) = refused(&log.acquire(ALICE, acq("busy", "a")));
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    lease(&log.release(ALICE, release_of(&a)));
    assert_eq!(usage(&log, "alice", Quota::Leases), 1);
    log.elapse(2_000);
    log.tick();
    assert_eq!(usage(&log, "alice", Quota::Leases), 0, "reclaimed");
    // A transfer to another principal (an admin's) counts against the receiver, whoever
    // calls.
    let t = granted(&log.acquire(ALICE, acq("t", "a")));
    set(&mut log, Some("bob"), Quota::Leases, Some(1));
    let to_bob = transfer_of(&t, "b2", Some("bob"));
    over_quota(&log.transfer(ROOT, to_bob.clone()), Quota::Leases);
    set(&mut log, Some("bob"), Quota::Leases, Some(2));
    lease(&log.transfer(ROOT, to_bob));
    assert_eq!(usage(&log, "alice", Quota::Leases), 0);
    assert_eq!(usage(&log, "bob", Quota::Leases), 2);
    recount_agrees(&log);
}

#[test]
fn the_waiter_quota_counts_queued_acquires_and_frees_on_admission() {
    let mut log = Log::new();
    set(&mut log, Some("alice"), Quota::Waiters, Some(1));
    let b = granted(&log.acquire(BOB, acq("r", "b")));
    granted(&log.acquire(BOB, acq("s", "b")));
    let wait = |resource: &str, holder: &str| AcquireOp {
        wait_ms: Some(60_000),
        ..acq(resource, holder)
    };
    let queued = log.acquire(ALICE, wait("r", "a1"));
    assert!(
        matches!(&queued, Reply::Acquire(o) if o.wait_id.is_some()),
        "{queued:?}"
    );
    over_quota(&log.acquire(ALICE, wait("s", "a2")), Quota::Waiters);
    assert_eq!(usage(&log, "alice", Quota::Waiters), 1);
    lease(&log.release(BOB, release_of(&b)));
    assert_eq!(usage(&log, "alice", Quota::Waiters), 0, "admitted");
    assert_eq!(usage(&log, "alice", Quota::Leases), 1);
    recount_agrees(&log);
}

#[test]
fn the_booking_quota_counts_windows_until_they_end() {
    let mut log = Log::new();
    set(&mut log, Some("alice"), Quota::Bookings, Some(1));
    let start = WALL_BASE_MS + log.mono_ms() + 60_000;
    let book = |resource: &str| {
        Op::Book(BookOp {
            resource: resource.into(),
            holder: "a".into(),
            start_wall_ms: start,
            duration_ms: 10_000,
            ad_hoc_bookable: true,
        })
    };
    assert!(matches!(log.propose(ALICE, book("r1")), Reply::Booking(_)));
    over_quota(&log.propose(ALICE, book("r2")), Quota::Bookings);
    log.elapse(70_001);
    log.tick();
    assert_eq!(usage(&log, "alice", Quota::Bookings), 0, "the window ended");
    let later = start + 100_000;
    let op = Op::Book(BookOp {
        resource: "r2".into(),
        holder: "a".into(),
        start_wall_ms: later,
        duration_ms: 10_000,
        ad_hoc_bookable: true,
    });
    assert!(matches!(log.propose(ALICE, op), Reply::Booking(_)));
    recount_agrees(&log);
}

#[test]
fn the_metadata_quota_counts_bytes_and_a_cost_per_entry() {
    let mut log = Log::new();
    let with_metadata = |resource: &str, entries: usize| AcquireOp {
        metadata: (0..entries)
            .map(|i| (format!("k{i}"), "v".repeat(98)))
            .collect(),
        ..acq(resource, "a")
    };
    let per_entry = 2 + 98 + METADATA_ENTRY_BYTES;
    set(
        &mut log,
        Some("alice"),
        Quota::MetadataBytes,
        Some(10 * per_entry),
    );
    granted(&log.acquire(ALICE, with_metadata("r1", 6)));
    assert_eq!(usage(&log, "alice", Quota::MetadataBytes), 6 * per_entry);
    over_quota(
        &log.acquire(ALICE, with_metadata("r2", 5)),
        Quota::MetadataBytes,
    );
    granted(&log.acquire(ALICE, with_metadata("r2", 4)));
    recount_agrees(&log);
}

#[test]
fn the_ad_hoc_quota_counts_unregistered_resources_only() {
    let mut log = Log::new();
    log.register("reg", Policy::registered());
    set(&mut log, Some("alice"), Quota::AdHocResources, Some(1));
    granted(&log.acquire(ALICE, acq("adhoc1", "a")));
    over_quota(
        &log.acquire(ALICE, acq("adhoc2", "a")),
        Quota::AdHocResources,
    );
    granted(&log.acquire(ALICE, acq("reg", "a")));
    assert_eq!(usage(&log, "alice", Quota::AdHocResources), 1);
    // A resource registered while someone waits on it stops counting as ad hoc.
    let wait = AcquireOp {
        wait_ms: Some(60_000),
        ..acq("adhoc1", "a2")
    };
    set(&mut log, Some("alice"), Quota::AdHocResources, Some(2));
    log.acquire(ALICE, wait);
    assert_eq!(usage(&log, "alice", Quota::AdHocResources), 2);
    recount_agrees(&log);
}

#[test]
fn a_principal_over_its_exactly_once_budget_is_refused_new_ids_but_retries_still_answer() {
    let mut log = Log::new();
    // Room for about two records.
    set(
        &mut log,
        Some("alice"),
        Quota::ExactlyOnceBytes,
        Some(2 * RECORD_BYTES + 10),
    );
    let first = log.propose_with(ALICE, Some("r-1".into()), Op::Acquire(acq("x", "a")));
    granted(&first);
    log.propose_with(ALICE, Some("r-2".into()), Op::Acquire(acq("y", "a")));
    log.propose_with(ALICE, Some("r-3".into()), Op::Acquire(acq("z", "a")));
    over_quota(
        &log.propose_with(ALICE, Some("r-4".into()), Op::Acquire(acq("w", "a"))),
        Quota::ExactlyOnceBytes,
    );
    assert!(
        log.state.resource_view("w").leases.is_empty(),
        "nothing was done"
    );
    // A retry of a remembered request still gets its answer.
    assert_eq!(
        log.propose_with(ALICE, Some("r-1".into()), Op::Acquire(acq("x", "a"))),
        first
    );
    // Another principal is not affected; renews are never remembered.
    granted(&log.propose_with(BOB, Some("r-4".into()), Op::Acquire(acq("w", "b"))));
    let x = granted(&first);
    let renewed = log.propose_with(ALICE, Some("r-5".into()), Op::Renew(renew_of(&x, None)));
    lease(&renewed);
    // The window passes: the budget is free again.
    log.elapse(crate::policy::DEDUP_WINDOW_MS);
    log.propose_with(ALICE, Some("r-6".into()), Op::Acquire(acq("v", "a")));
    assert!(usage(&log, "alice", Quota::ExactlyOnceBytes) <= RECORD_BYTES + 200);
    recount_agrees(&log);
}

#[test]
fn a_remembered_reply_is_slim_and_a_retry_gets_it_whole() {
    let mut log = Log::new();
    let metadata: std::collections::BTreeMap<String, String> = (0..16)
        .map(|i| (format!("k{i}"), "v".repeat(1000)))
        .collect();
    let big = AcquireOp {
        metadata: metadata.clone(),
        ..acq("x", "holder")
    };
    let grant = log.propose_with(BOB, Some("g".into()), Op::Acquire(big.clone()));
    assert_eq!(granted(&grant).lease.metadata.len(), 16);
    let mut refusals = Vec::new();
    for i in 0..100 {
        let op = Op::Acquire(AcquireOp {
            metadata: metadata.clone(),
            ..acq("x", "other")
        });
        refusals.push(log.propose_with(ALICE, Some(format!("f-{i}")), op));
    }
    let held = usage(&log, "alice", Quota::ExactlyOnceBytes);
    assert!(
        held < 100 * (RECORD_BYTES + 64),
        "{held} bytes for 100 refusals"
    );
    // Retries are whole: the grant with its metadata, a refusal with the holders.
    assert_eq!(
        log.propose_with(BOB, Some("g".into()), Op::Acquire(big)),
        grant
    );
    let retried = log.propose_with(
        ALICE,
        Some("f-7".into()),
        Op::Acquire(AcquireOp {
            metadata,
            ..acq("x", "other")
        }),
    );
    assert_eq!(retried, refusals[7]);
}

#[test]
fn an_admin_is_held_to_no_principal_quota_but_what_it_holds_still_counts() {
    let mut log = Log::new();
    set(&mut log, None, Quota::Leases, Some(1));
    set(&mut log, None, Quota::ExactlyOnceBytes, Some(1));
    for resource in ["a1", "a2", "a3"] {
        let op = Op::Acquire(acq(resource, "root-holder"));
        granted(&log.propose_with(ROOT, Some(resource.to_string()), op));
    }
    assert_eq!(usage(&log, "root", Quota::Leases), 3);
    assert!(usage(&log, "root", Quota::ExactlyOnceBytes) > 3 * RECORD_BYTES);
    granted(&log.acquire(ALICE, acq("b1", "a")));
    over_quota(&log.acquire(ALICE, acq("b2", "a")), Quota::Leases);
    recount_agrees(&log);
}

/// With auth off every caller is the admin `anonymous`: the admin for permissions, held to the
/// quotas that bound the replicated state like a client (SPEC §4.17).
#[test]
fn anonymous_is_an_admin_held_to_the_quotas() {
    const ANONYMOUS: Caller = Caller {
        principal: crate::quota::ANONYMOUS,
        admin: true,
    };
    let mut log = Log::new();
    set(&mut log, None, Quota::Leases, Some(1));
    set(&mut log, None, Quota::Sessions, Some(0));
    set(&mut log, None, Quota::ExactlyOnceBytes, Some(1));
    granted(&log.acquire(ANONYMOUS, acq("n1", "anon")));
    over_quota(&log.acquire(ANONYMOUS, acq("n2", "anon")), Quota::Leases);
    let op = Op::CreateSession(crate::CreateSessionOp {
        holder: "anon".into(),
        ttl_ms: None,
        metadata: Default::default(),
    });
    over_quota(&log.propose_with(ANONYMOUS, None, op), Quota::Sessions);
    // Its first remembered request fills its exactly-once budget of 1 byte; the next is
    // refused.
    over_quota(
        &log.propose_with(
            ANONYMOUS,
            Some("first-id".into()),
            Op::Acquire(acq("n3", "anon")),
        ),
        Quota::Leases,
    );
    over_quota(
        &log.propose_with(
            ANONYMOUS,
            Some("second-id".into()),
            Op::Acquire(acq("n3", "anon")),
        ),
        Quota::ExactlyOnceBytes,
    );
    // Its permissions are an admin's.
    let op = Op::CreateResource(crate::CreateOp {
        name: Some("registered".into()),
        policy: Policy::registered(),
    });
    assert!(matches!(
        log.propose_with(ANONYMOUS, None, op),
        Reply::Resource(_)
    ));
    recount_agrees(&log);
}

/// The leader refuses without proposing a write its state says would certainly be refused
/// (SPEC §4.21): the refusal is the one apply gives, and a write apply would answer otherwise
/// (granted, refused for its resource, a retry) is proposed.
#[test]
fn a_write_refused_before_it_is_proposed_is_refused_as_apply_refuses_it() {
    let mut log = Log::new();
    let unproposed = |log: &Log, caller: Caller, id: Option<&str>, op: &Op| {
        let proposal = log.proposal(caller, id.map(str::to_string), op.clone());
        log.state
            .certainly_refused(&proposal, LEADER, &proposal.stamp)
    };
    let with_metadata = |resource: &str, bytes: usize| {
        Op::Acquire(AcquireOp {
            metadata: [("blob".to_string(), "x".repeat(bytes))].into(),
            ..acq(resource, "a")
        })
    };
    set(&mut log, Some("alice"), Quota::MetadataBytes, Some(1_000));
    // Within its quotas: proposed.
    let small = with_metadata("m1", 100);
    assert_eq!(unproposed(&log, ALICE, Some("1"), &small), None);
    granted(&log.propose_with(ALICE, Some("1".into()), small.clone()));
    // A retry of it is answered by apply, from memory.
    assert_eq!(unproposed(&log, ALICE, Some("1"), &small), None);
    // The same request id with another request: refused, as apply refuses it.
    let other = with_metadata("m2", 100);
    let early = unproposed(&log, ALICE, Some("1"), &other).expect("refused");
    assert_eq!(log.propose_with(ALICE, Some("1".into()), other), early);
    // Past its metadata quota: refused before proposing, as apply refuses it.
    let big = with_metadata("m3", 2_000);
    let early = unproposed(&log, ALICE, Some("2"), &big).expect("refused");
    assert!(
        matches!(&early, Reply::Rejected(Rejection::QuotaExceeded { quota, .. }) if quota == "metadata_bytes")
    );
    assert_eq!(log.propose_with(ALICE, Some("2".into()), big), early);
    // Past it on a held resource, the refusal for the resource comes first, also unproposed.
    granted(&log.acquire(BOB, acq("held", "b")));
    let held = with_metadata("held", 2_000);
    let early = unproposed(&log, ALICE, Some("3"), &held).expect("refused");
    let (refusal, _) = refused(&early);
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    assert_eq!(log.propose_with(ALICE, Some("3".into()), held), early);
    // Sessions.
    set(&mut log, Some("alice"), Quota::Sessions, Some(0));
    let session = Op::CreateSession(crate::CreateSessionOp {
        holder: "s".into(),
        ttl_ms: None,
        metadata: Default::default(),
    });
    let early = unproposed(&log, ALICE, None, &session).expect("refused");
    assert_eq!(log.propose_with(ALICE, None, session), early);
    // An admin's writes are held to no quota: proposed.
    assert_eq!(
        unproposed(&log, ROOT, None, &with_metadata("r1", 100_000)),
        None
    );
}

/// Apply settles what time decided before the command (§4.21): a state whose newest entry
/// is older than [`FRESH_MS`] may hold what time has freed since (a lease expired, request ids
/// forgotten), and is not fresh for a refusal; an entry brings it up to date.
#[test]
fn a_refusal_is_given_only_from_a_fresh_state() {
    use crate::machine::FRESH_MS;
    let mut log = Log::new();
    let refused = |log: &Log, id: &str, op: &Op| {
        let fresh = log.state.is_fresh(LEADER, &stamp_at(log.mono_ms()));
        let proposal = log.proposal(ALICE, Some(id.to_string()), op.clone());
        fresh
            .then(|| {
                log.state
                    .certainly_refused(&proposal, LEADER, &proposal.stamp)
            })
            .flatten()
    };
    set(&mut log, Some("alice"), Quota::Leases, Some(1));
    granted(&log.propose(ALICE, Op::Acquire(acq_ttl("a", "x", 5_000))));
    let next = Op::Acquire(acq("b", "x"));
    assert!(refused(&log, "1", &next).is_some(), "refused: a is live");
    // No entry since: the leader cannot tell from its state what time freed.
    log.elapse(FRESH_MS + 1);
    assert!(!log.state.is_fresh(LEADER, &stamp_at(log.mono_ms())));
    // An entry brings the state up to date: a is still live.
    log.propose(ROOT, Op::Tick);
    assert!(refused(&log, "1", &next).is_some(), "refused: a is live");
    // Past a's reclaim with no entry written (an idle cluster): not fresh; the Tick that
    // refreshes it reclaims a, and the write is no longer refused.
    let reclaimed_ms = log.state.next_due_ms().expect("the lease is due");
    log.elapse(reclaimed_ms - log.now_ms());
    assert_eq!(refused(&log, "1", &next), None);
    log.propose(ROOT, Op::Tick);
    assert_eq!(refused(&log, "1", &next), None);
    let b = granted(&log.propose_with(ALICE, Some("1".into()), next));
    log.release(ALICE, release_of(&b));

    // One remembered request fills its exactly-once budget; once the window forgets it (an
    // entry past the window), the next new request id fits again.
    set(&mut log, Some("alice"), Quota::Leases, None);
    let remembered = usage(&log, "alice", Quota::ExactlyOnceBytes);
    assert!(remembered >= RECORD_BYTES, "request 1 is remembered");
    set(
        &mut log,
        Some("alice"),
        Quota::ExactlyOnceBytes,
        Some(remembered),
    );
    let other = Op::Acquire(acq("c", "x"));
    assert!(refused(&log, "2", &other).is_some(), "budget full");
    log.elapse(crate::policy::DEDUP_WINDOW_MS);
    assert_eq!(refused(&log, "2", &other), None, "stale");
    log.propose(ROOT, Op::Tick);
    assert_eq!(refused(&log, "2", &other), None, "forgotten");
    granted(&log.propose_with(ALICE, Some("2".into()), other));
}

/// An acquire without waiting of a resource held for a while yet is refused unproposed, with
/// the answer apply gives (SPEC §4.21); near the end of a lease, with anyone waiting or a
/// booking ahead, it is proposed, and apply decides.
#[test]
fn an_acquire_of_a_resource_held_for_a_while_is_refused_unproposed() {
    use crate::machine::HELD_MARGIN_MS;
    let mut log = Log::new();
    let unproposed = |log: &Log, id: &str, op: &AcquireOp| {
        let caller = if op.holder == "b" { BOB } else { ALICE };
        let proposal = log.proposal(caller, Some(id.to_string()), Op::Acquire(op.clone()));
        log.state
            .certainly_refused(&proposal, LEADER, &proposal.stamp)
    };
    let ttl_ms = 10 * HELD_MARGIN_MS;
    let held = granted(&log.acquire(BOB, acq_ttl("r", "b", ttl_ms)));
    // Free and never seen: proposed.
    assert_eq!(unproposed(&log, "0", &acq("free", "a")), None);
    let early = unproposed(&log, "1", &acq("r", "a")).expect("refused unproposed");
    let (refusal, holders) = refused(&early);
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    assert_eq!(holders, vec![("b".to_string(), held.lease.fencing_token)]);
    assert_eq!(
        log.propose_with(ALICE, Some("1".into()), Op::Acquire(acq("r", "a"))),
        early
    );
    // Within the margin of its end: time may free it before an entry says so: proposed.
    log.elapse(ttl_ms - HELD_MARGIN_MS);
    log.propose(ROOT, Op::Tick);
    assert_eq!(unproposed(&log, "2", &acq("r", "a")), None);
    // Renewed: refused unproposed again. A waiter (who may time out) makes it apply's call.
    log.renew(BOB, renew_of(&held, Some(ttl_ms)));
    assert!(unproposed(&log, "3", &acq("r", "a")).is_some());
    let wait = AcquireOp {
        wait_ms: Some(60_000),
        ..acq("r", "c")
    };
    assert!(
        unproposed(&log, "4", &wait).is_none(),
        "a wait is never refused"
    );
    log.acquire(BOB, wait);
    assert_eq!(unproposed(&log, "5", &acq("r", "a")), None);
    // The holder's own acquire (the same lease back) is proposed.
    assert_eq!(unproposed(&log, "6", &acq_ttl("r", "b", ttl_ms)), None);
    // Released: the waiter holds it now, and nobody waits: refused unproposed again.
    log.release(BOB, release_of(&held));
    let early = unproposed(&log, "7", &acq("r", "a")).expect("refused unproposed");
    assert_eq!(refused(&early).1[0].0, "c");
}
