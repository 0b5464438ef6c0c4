//! SPEC §4.3 (renew), §4.4 (expiry, grace, reclaim, lock delay) and §4.5 (release).

use super::*;
use crate::encoding::{decode_state, encode_state};
use crate::history::{EventKind, SYSTEM_ACTOR};
use crate::machine::RECLAIMS_PER_ENTRY;
use crate::policy::SECOND_MS;
use crate::types::LeaseStatus;

fn with_grace(renewal_grace_ms: u64) -> Policy {
    Policy {
        renewal_grace_ms,
        ..Policy::registered()
    }
}

#[test]
fn s4_3_renew_sets_expiry_to_now_plus_ttl_replacing_not_appending() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
    log.elapse(3_000);
    let renewed = lease(&log.renew(ALICE, renew_of(&a, Some(10_000))));
    assert_eq!(renewed.lease.expires_at_ms, 13_000);
    assert_eq!(renewed.lease.ttl_ms, 10_000);
    assert_eq!(
        renewed.lease.fencing_token, a.lease.fencing_token,
        "renewals keep the token"
    );
    assert_eq!(renewed.lease.lease_id(), a.lease.lease_id());
    assert_eq!(
        renewed.lease.acquired_at_ms, 0,
        "a renew keeps the acquisition time"
    );
    assert_eq!(renewed.remaining_ms, 10_000);
    assert_eq!(renewed.status, LeaseStatus::Active);
}

#[test]
fn s4_3_a_shorter_ttl_shortens() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
    log.elapse(3_000);
    let renewed = lease(&log.renew(ALICE, renew_of(&a, Some(2_000))));
    assert_eq!(renewed.lease.expires_at_ms, 5_000);
    log.elapse(2_000);
    log.tick();
    assert!(
        log.holders("r").is_empty(),
        "reclaimed at the shortened expiry"
    );
}

#[test]
fn s4_3_renew_with_a_stale_token_names_expected_and_got() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
    let mut op = renew_of(&a, None);
    op.fencing_token = 7;
    let stale = rejection(&log.renew(ALICE, op));
    assert_eq!(
        stale,
        Rejection::StaleFencingToken {
            expected: 1,
            got: 7
        }
    );
    assert_eq!(stale.to_string(), "stale fencing token (expected 1, got 7)");
    assert_eq!(stale.reason(), "stale_fencing_token");
}

#[test]
fn s4_3_another_principal_may_not_renew_release_or_transfer_but_an_admin_may() {
    let mut log = Log::new();
    log.register("r", transferable());
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
    for reply in [
        log.renew(BOB, renew_of(&a, None)),
        log.release(BOB, release_of(&a)),
        log.transfer(BOB, transfer_of(&a, "b", Some("bob"))),
    ] {
        let refusal = rejection(&reply);
        assert!(
            matches!(refusal, Rejection::InsufficientPermissions(_)),
            "{refusal:?}"
        );
        assert_eq!(refusal.reason(), "insufficient_permissions");
    }
    assert_eq!(log.holders("r"), held(&[("a", 2)]));
    log.elapse(1_000);
    let renewed = lease(&log.renew(ROOT, renew_of(&a, Some(20_000))));
    assert_eq!(renewed.lease.expires_at_ms, 21_000);
    assert_eq!(
        renewed.lease.principal, "alice",
        "an admin's renew keeps the principal"
    );
    let last = log.events("r").pop().expect("an event");
    assert_eq!(
        (last.kind, last.actor.as_str()),
        (EventKind::Renewed, "root")
    );
    let released = lease(&log.release(ROOT, release_of(&a)));
    assert_eq!(released.status, LeaseStatus::Released);
}

#[test]
fn s4_3_renew_naming_another_holder_is_insufficient_permissions() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq("r", "a1")));
    let mut op = renew_of(&a, None);
    op.holder = "a2".into();
    let refusal = rejection(&log.renew(ALICE, op));
    assert!(
        matches!(refusal, Rejection::InsufficientPermissions(_)),
        "{refusal:?}"
    );
}

#[test]
fn s4_3_renew_past_max_lifetime_is_lifetime_exceeded() {
    let (mut log, a) = capped();
    assert_eq!(a.lease.acquired_at_ms, 0);
    log.elapse(4_000);
    let renewed = lease(&log.renew(ALICE, renew_of(&a, Some(6_000))));
    assert_eq!(
        renewed.lease.expires_at_ms, 10_000,
        "exactly at the cap is allowed"
    );
    log.elapse(1_000);
    let refusal = rejection(&log.renew(ALICE, renew_of(&a, Some(6_000))));
    assert_eq!(
        refusal,
        Rejection::LifetimeExceeded {
            max_lifetime_ms: 10_000
        }
    );
    assert_eq!(refusal.reason(), "lifetime_exceeded");
    let view = log.state.resource_view("r");
    assert_eq!(
        view.leases[0].lease.expires_at_ms, 10_000,
        "the refused renew changed nothing"
    );
    // A ttl that stays inside the cap is still fine.
    let renewed = lease(&log.renew(ALICE, renew_of(&a, Some(5_000))));
    assert_eq!(renewed.lease.expires_at_ms, 10_000);
}

#[test]
fn s4_3_renew_is_accepted_during_grace_and_refused_after_as_lease_expired() {
    let mut log = Log::new();
    log.register("r", with_grace(5_000));
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 2_000)));
    log.elapse(6_999);
    let renewed = lease(&log.renew(ALICE, renew_of(&a, Some(2_000))));
    assert_eq!(renewed.status, LeaseStatus::Active);
    assert_eq!(renewed.lease.expires_at_ms, 8_999);
    let event = log.events("r").pop().expect("renewed");
    assert_eq!(
        (event.kind, event.from, event.to),
        (
            EventKind::Renewed,
            Some(LeaseStatus::Grace),
            Some(LeaseStatus::Active)
        )
    );
    // Past expiry + grace: the entry reclaims it before the renew is judged.
    log.elapse(2_000 + 5_000);
    let refusal = rejection(&log.renew(ALICE, renew_of(&a, None)));
    assert_eq!(refusal, Rejection::LeaseExpired);
    assert_eq!(refusal.reason(), "lease_expired");
}

#[test]
fn s4_4_a_lease_past_expiry_keeps_the_resource_through_grace_then_is_reclaimed() {
    let mut log = Log::new();
    log.register("r", with_grace(5_000));
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 2_000)));
    log.elapse(2_000);
    let reply = log.acquire(BOB, acq("r", "b"));
    assert_eq!(
        refused(&reply),
        (Refusal::ResourceUnavailable, held(&[("a", 2)]))
    );
    let Reply::Acquire(outcome) = &reply else {
        unreachable!()
    };
    assert_eq!(outcome.holders[0].status, LeaseStatus::Grace);
    log.elapse(4_999);
    assert_eq!(
        refused(&log.acquire(BOB, acq("r", "b"))).0,
        Refusal::ResourceUnavailable
    );
    log.elapse(1);
    let Reply::Reclaimed(views) = log.tick() else {
        panic!("a tick answers its reclaims")
    };
    assert_eq!(pairs(&views), held(&[("a", 2)]));
    assert_eq!(views[0].status, LeaseStatus::Reclaimed);
    let b = granted(&log.acquire(BOB, acq("r", "b")));
    assert!(b.lease.fencing_token > a.lease.fencing_token);
    let reclaimed = log
        .events("r")
        .into_iter()
        .find(|e| e.kind == EventKind::Reclaimed)
        .expect("a reclaimed event");
    assert_eq!(reclaimed.actor, SYSTEM_ACTOR);
    assert_eq!(
        (reclaimed.from, reclaimed.to),
        (Some(LeaseStatus::Grace), Some(LeaseStatus::Reclaimed))
    );
}

#[test]
fn s4_4_without_grace_a_lease_is_reclaimed_at_its_expiry() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 2_000)));
    log.elapse(1_999);
    assert_eq!(
        refused(&log.acquire(BOB, acq("r", "b"))).0,
        Refusal::ResourceUnavailable
    );
    log.elapse(1);
    granted(&log.acquire(BOB, acq("r", "b")));
}

#[test]
fn s4_4_after_a_reclaim_acquires_answer_lock_delay_until_the_delay_passes() {
    let mut log = Log::new();
    log.register("r", lock_delay_policy(3_000));
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 2_000)));
    log.elapse(2_000);
    log.tick(); // reclaims at lease time 2 000: closed until 5 000
    for caller in [BOB, ALICE] {
        let (refusal, holders) = refused(&log.acquire(caller, acq("r", caller.principal)));
        assert_eq!((refusal, holders), (Refusal::LockDelay, vec![]));
        assert_eq!(refusal.reason(), "lock_delay");
    }
    log.elapse(2_999);
    assert_eq!(
        refused(&log.acquire(BOB, acq("r", "b"))).0,
        Refusal::LockDelay
    );
    log.elapse(1);
    granted(&log.acquire(BOB, acq("r", "b")));
}

#[test]
fn s4_4_a_release_does_not_start_the_lock_delay() {
    let mut log = Log::new();
    log.register(
        "r",
        Policy {
            lock_delay_ms: 3_000,
            ..Policy::registered()
        },
    );
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 2_000)));
    lease(&log.release(ALICE, release_of(&a)));
    granted(&log.acquire(BOB, acq("r", "b")));
}

#[test]
fn s4_5_release_ends_the_lease_at_once_and_frees_the_resource() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60 * SECOND_MS)));
    log.elapse(1_000);
    let released = lease(&log.release(ALICE, release_of(&a)));
    assert_eq!(released.status, LeaseStatus::Released);
    assert_eq!(released.remaining_ms, 0);
    assert_eq!(released.lease.fencing_token, a.lease.fencing_token);
    assert!(log.holders("r").is_empty());
    assert_eq!(log.state.live_leases(), 0);
    let b = granted(&log.acquire(BOB, acq("r", "b")));
    assert_eq!(b.lease.fencing_token, 3, "the next entry grants");
    let event = log
        .events("r")
        .into_iter()
        .find(|e| e.kind == EventKind::Released);
    let event = event.expect("a released event");
    assert_eq!(
        (event.actor.as_str(), event.from, event.to),
        (
            "alice",
            Some(LeaseStatus::Active),
            Some(LeaseStatus::Released)
        )
    );
}

#[test]
fn s4_5_release_frees_its_units_at_once() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 2));
    let a = granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 2)));
    assert_eq!(
        refused(&log.acquire(BOB, shared("pool", "b", Mode::Read, 1))).0,
        Refusal::InsufficientUnits
    );
    lease(&log.release(ALICE, release_of(&a)));
    granted(&log.acquire(BOB, shared("pool", "b", Mode::Read, 2)));
}

#[test]
fn s4_5_a_released_lease_cannot_be_released_again() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    lease(&log.release(ALICE, release_of(&a)));
    let refusal = rejection(&log.release(ALICE, release_of(&a)));
    assert!(
        matches!(refusal, Rejection::LeaseNotFound(_)),
        "{refusal:?}"
    );
}

/// SPEC §4.4: leases that fall due together are reclaimed by the next entries, at most
/// `RECLAIMS_PER_ENTRY` each, each with its own `reclaimed` event; a command on a resource first
/// reclaims whatever of it is due, so it never sees a lease past its grace.
#[test]
fn s4_4_many_leases_due_together_are_reclaimed_in_chunks_and_first_where_a_command_looks() {
    let mut log = Log::new();
    log.register(
        "crowd",
        Policy {
            renewal_grace_ms: 0,
            ..shared_policy(&[Mode::Read], 0)
        },
    );
    let mut ids = Vec::new();
    for n in 0..2_000 {
        let view = granted(&log.acquire(
            ALICE,
            AcquireOp {
                ttl_ms: Some(10_000),
                ..shared("crowd", &format!("h{n}"), Mode::Read, 1)
            },
        ));
        ids.push(view.lease.lease_id().to_string());
    }
    assert_eq!(log.state.live_leases(), 2_000);
    log.elapse(10_000);
    let Reply::Reclaimed(views) = log.tick() else {
        panic!("a tick answers with what it reclaimed");
    };
    assert_eq!(views.len(), RECLAIMS_PER_ENTRY);
    // Which ones, when all fall due at once, every release decides alike: the first by lease
    // id as written (`lse_1000_0` before `lse_999_0`), whatever the grant order.
    ids.sort();
    let mut reclaimed: Vec<String> = views
        .iter()
        .map(|v| v.lease.lease_id().to_string())
        .collect();
    reclaimed.sort();
    assert_eq!(reclaimed, ids[..RECLAIMS_PER_ENTRY]);
    assert_eq!(log.state.live_leases(), 2_000 - RECLAIMS_PER_ENTRY);
    let reclaimed_at = |log: &Log, index: u64| {
        log.events("crowd")
            .iter()
            .filter(|e| e.kind == EventKind::Reclaimed && e.revision == index)
            .count()
    };
    assert_eq!(reclaimed_at(&log, log.index), RECLAIMS_PER_ENTRY);
    // Bob's acquire reclaims the rest of the crowd before it is judged.
    let bob = granted(&log.acquire(BOB, shared("crowd", "bob", Mode::Read, 1)));
    assert_eq!(log.state.live_leases(), 1);
    assert_eq!(
        pairs(&log.state.resource_view("crowd").leases),
        [("bob".to_string(), bob.lease.fencing_token)]
    );
    assert_eq!(reclaimed_at(&log, log.index), 2_000 - RECLAIMS_PER_ENTRY);
}

/// A mass expiry over many resources takes as many entries as the cap needs, and no more.
#[test]
fn s4_4_a_mass_expiry_over_many_resources_is_reclaimed_over_several_entries() {
    let mut log = Log::new();
    for n in 0..2_500 {
        granted(&log.acquire(ALICE, acq_ttl(&format!("r{n}"), "a", 10_000)));
    }
    log.elapse(10_000);
    let mut per_entry = Vec::new();
    while log.state.live_leases() > 0 {
        let Reply::Reclaimed(views) = log.tick() else {
            panic!("a tick answers with what it reclaimed");
        };
        per_entry.push(views.len());
    }
    assert_eq!(
        per_entry,
        [
            RECLAIMS_PER_ENTRY,
            RECLAIMS_PER_ENTRY,
            2_500 - 2 * RECLAIMS_PER_ENTRY
        ]
    );
}

#[test]
fn s4_3_renew_and_release_require_the_current_fencing_token() {
    let mut log = Log::new();
    let old = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 5_000)))
        .lease
        .fencing_token;
    lease(&log.release(ALICE, release_by_token("world", "alice", old)));
    let current = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 5_000)))
        .lease
        .fencing_token;
    assert_eq!((old, current), (1, 3));

    let stale = rejection(&log.renew(ALICE, renew_by_token("world", "alice", old, Some(5_000))));
    assert_eq!(
        stale,
        Rejection::StaleFencingToken {
            expected: 3,
            got: 1
        }
    );
    assert_eq!(stale.reason(), "stale_fencing_token");
    assert_eq!(stale.to_string(), "stale fencing token (expected 3, got 1)");
    assert_eq!(
        rejection(&log.renew(ALICE, renew_by_token("world", "alice", 0, None))).reason(),
        "stale_fencing_token"
    );
    assert_eq!(
        rejection(&log.release(ALICE, release_by_token("world", "alice", 7))),
        Rejection::StaleFencingToken {
            expected: 3,
            got: 7
        }
    );
    assert_eq!(
        lease(&log.renew(ALICE, renew_by_token("world", "alice", current, None)))
            .lease
            .fencing_token,
        3
    );
}

#[test]
fn s4_3_renew_by_another_holder_is_refused_and_without_a_lease_id_names_its_own_lease() {
    let mut log = Log::new();
    let alice = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 5_000))).lease;
    let by_id = RenewOp {
        resource: "world".into(),
        lease_id: alice.lease_id().to_string(),
        holder: "bob".into(),
        fencing_token: alice.fencing_token,
        ttl_ms: None,
    };
    assert_eq!(
        rejection(&log.renew(BOB, by_id)).reason(),
        "insufficient_permissions"
    );
    // CHOICE: with no lease_id, the request names bob's own lease, and bob has none.
    let by_token = renew_by_token("world", "bob", alice.fencing_token, None);
    assert_eq!(
        rejection(&log.renew(BOB, by_token)).reason(),
        "lease_not_found"
    );
}

#[test]
fn s4_3_renew_without_a_ttl_reuses_the_last_ttl() {
    let mut log = Log::new();
    let token = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 4_000)))
        .lease
        .fencing_token;
    log.elapse(1_000);
    assert_eq!(
        lease(&log.renew(ALICE, renew_by_token("world", "alice", token, Some(2_000))))
            .lease
            .expires_at_ms,
        3_000
    );
    log.elapse(1_000);
    let renewed = lease(&log.renew(ALICE, renew_by_token("world", "alice", token, None)));
    assert_eq!(renewed.lease.expires_at_ms, 4_000);
    assert_eq!(renewed.lease.ttl_ms, 2_000);
}

#[test]
fn s4_4_a_lease_in_renewal_grace_keeps_the_resource_for_its_holder() {
    let mut log = Log::with_default_policy(Policy {
        renewal_grace_ms: 2_000,
        ..Policy::ad_hoc()
    });
    let alice = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 3_000))).lease;
    log.elapse(3_000);
    log.tick();

    // Past expiry, inside grace: others are refused, Validate says expired, the holder's
    // acquire returns the same lease (CHOICE: shown as GRACE), and the holder may renew.
    let reply = log.acquire(BOB, acq_ttl("world", "bob", 3_000));
    assert_eq!(refused(&reply).0, Refusal::ResourceUnavailable);
    let Reply::Acquire(outcome) = &reply else {
        unreachable!()
    };
    assert_eq!(outcome.holders[0].status, LeaseStatus::Grace);
    assert_eq!(outcome.holders[0].remaining_ms, 0);
    let verdict = log.validate("world", &alice.lease_id().to_string(), alice.fencing_token);
    assert!(!verdict.valid);
    assert_eq!(verdict.reason, "lease expired");
    let again = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 3_000)));
    assert_eq!(again.lease, alice);
    assert_eq!(again.status, LeaseStatus::Grace);

    log.elapse(1_999);
    let renewed = lease(&log.renew(
        ALICE,
        renew_by_token("world", "alice", alice.fencing_token, None),
    ));
    assert_eq!(renewed.status, LeaseStatus::Active);
    assert_eq!(renewed.lease.expires_at_ms, 4_999 + 3_000);
    assert!(
        log.validate("world", &alice.lease_id().to_string(), alice.fencing_token)
            .valid
    );
}

/// A reclaimed lease answers `lease_expired` to its holder's renew and release; a released one
/// no longer exists (`lease_not_found`), nor does a lease never held.
#[test]
fn s4_4_a_reclaimed_lease_is_lease_expired_and_a_released_one_lease_not_found() {
    let mut log = Log::new();
    let reclaimed_token = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 1_000)))
        .lease
        .fencing_token;
    let released_token = granted(&log.acquire(ALICE, acq_ttl("seat", "alice", 9_000)))
        .lease
        .fencing_token;
    lease(&log.release(ALICE, release_by_token("seat", "alice", released_token)));
    log.elapse(1_000);

    let renew = |resource, token| renew_by_token(resource, "alice", token, None);
    let release = |resource, token| release_by_token(resource, "alice", token);
    assert_eq!(
        rejection(&log.renew(ALICE, renew("world", reclaimed_token))),
        Rejection::LeaseExpired
    );
    assert_eq!(
        rejection(&log.release(ALICE, release("world", reclaimed_token))).reason(),
        "lease_expired"
    );
    assert_eq!(
        rejection(&log.renew(ALICE, renew("seat", released_token))).reason(),
        "lease_not_found"
    );
    assert_eq!(
        rejection(&log.release(ALICE, release("seat", released_token))).reason(),
        "lease_not_found"
    );
    assert_eq!(
        rejection(&log.renew(ALICE, renew("never-held", 1))).reason(),
        "lease_not_found"
    );
}

/// The reclaim index is derived: a snapshot does not hold it, loading rebuilds it.
#[test]
fn s4_4_a_restored_snapshot_rebuilds_the_reclaim_index() {
    let mut log = Log::with_default_policy(Policy {
        renewal_grace_ms: 1_000,
        ..Policy::ad_hoc()
    });
    granted(&log.acquire(ALICE, acq_ttl("world", "alice", 3_000)));
    granted(&log.acquire(BOB, acq_ttl("seat", "bob", 2_000)));
    let bytes = encode_state(&log.state).expect("state serializes");
    let restored = decode_state(&bytes).expect("state deserializes");
    assert_eq!(restored.live_leases(), 2);
    assert_eq!(restored.next_due_ms(), Some(3_000));
    assert_eq!(restored, log.state);
}
