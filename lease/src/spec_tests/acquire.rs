//! SPEC §4.1 (compatibility, shared modes, units) and §4.2 (idempotent acquire).
//! No barging and `WAIT` belong to the waiting room (SPEC §4.7, `waiting.rs`) and are not
//! tested here.

use super::*;
use crate::history::EventKind;
use crate::types::LeaseStatus;

#[test]
fn s4_1_two_read_leases_coexist_and_exclusive_is_refused() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Read], 0));
    let a = granted(&log.acquire(ALICE, shared("db", "a", Mode::Read, 0)));
    let b = granted(&log.acquire(BOB, shared("db", "b", Mode::Read, 0)));
    assert_eq!((a.lease.mode, a.lease.fencing_token), (Mode::Read, 2));
    assert_eq!((b.lease.mode, b.lease.fencing_token), (Mode::Read, 3));

    let history_before = log.events("db").len();
    let reply = log.acquire(BOB, acq("db", "c"));
    assert_eq!(
        refused(&reply),
        (Refusal::ResourceUnavailable, held(&[("a", 2), ("b", 3)]))
    );
    assert_eq!(log.holders("db"), held(&[("a", 2), ("b", 3)]));
    assert_eq!(
        log.events("db").len(),
        history_before,
        "a refusal records nothing"
    );
}

#[test]
fn s4_1_a_mode_not_in_shared_modes_is_invalid_mode() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Read], 0));
    let reply = log.acquire(ALICE, shared("db", "a", Mode::Write, 0));
    assert_eq!(
        rejection(&reply),
        Rejection::InvalidMode { mode: Mode::Write }
    );
    assert_eq!(rejection(&reply).reason(), "invalid_mode");
    // Ad hoc: exclusive only.
    let reply = log.acquire(ALICE, shared("adhoc", "a", Mode::Read, 0));
    assert_eq!(
        rejection(&reply),
        Rejection::InvalidMode { mode: Mode::Read }
    );
    assert!(log.holders("db").is_empty() && log.holders("adhoc").is_empty());
}

#[test]
fn s4_1_read_and_write_coexist_when_both_are_listed() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Read, Mode::Write], 0));
    granted(&log.acquire(ALICE, shared("db", "r", Mode::Read, 0)));
    let w = granted(&log.acquire(BOB, shared("db", "w", Mode::Write, 0)));
    assert_eq!(w.lease.mode, Mode::Write);
    assert_eq!(log.holders("db"), held(&[("r", 2), ("w", 3)]));
}

#[test]
fn s4_1_shared_is_refused_while_exclusive_is_held() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Read, Mode::Write], 0));
    granted(&log.acquire(ALICE, acq("db", "x")));
    for mode in [Mode::Read, Mode::Write] {
        let reply = log.acquire(BOB, shared("db", "s", mode, 0));
        assert_eq!(
            refused(&reply),
            (Refusal::ResourceUnavailable, held(&[("x", 2)]))
        );
    }
}

#[test]
fn s4_1_exclusive_is_refused_while_one_shared_lease_is_held() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Write], 4));
    granted(&log.acquire(ALICE, shared("db", "w", Mode::Write, 1)));
    let reply = log.acquire(BOB, acq("db", "x"));
    assert_eq!(
        refused(&reply),
        (Refusal::ResourceUnavailable, held(&[("w", 2)]))
    );
}

#[test]
fn s4_1_three_of_four_units_taken_refuses_two_grants_one() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 4));
    let a = granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 3)));
    assert_eq!(a.lease.units, 3);
    let reply = log.acquire(BOB, shared("pool", "b", Mode::Read, 2));
    assert_eq!(
        refused(&reply),
        (Refusal::InsufficientUnits, held(&[("a", 2)]))
    );
    assert_eq!(Refusal::InsufficientUnits.reason(), "insufficient_units");
    let b = granted(&log.acquire(BOB, shared("pool", "b", Mode::Read, 1)));
    assert_eq!(b.lease.units, 1);
    let reply = log.acquire(BOB, shared("pool", "c", Mode::Read, 1));
    assert_eq!(refused(&reply).0, Refusal::InsufficientUnits);
}

#[test]
fn s4_1_units_above_total_units_are_invalid_argument() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 4));
    let reply = log.acquire(ALICE, shared("pool", "a", Mode::Read, 5));
    assert_eq!(invalid_field(&reply), "units");
    granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 4)));
}

#[test]
fn s4_1_shared_units_default_to_one() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 2));
    let a = granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 0)));
    assert_eq!(a.lease.units, 1);
    granted(&log.acquire(ALICE, shared("pool", "b", Mode::Read, 0)));
    let reply = log.acquire(ALICE, shared("pool", "c", Mode::Read, 0));
    assert_eq!(refused(&reply).0, Refusal::InsufficientUnits);
}

#[test]
fn s4_1_exclusive_ignores_units() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 4));
    // Far more units than the pool has: neither invalid nor insufficient for an exclusive.
    let x = granted(&log.acquire(
        ALICE,
        AcquireOp {
            units: 1_000,
            ..acq("pool", "x")
        },
    ));
    assert_eq!((x.lease.mode, x.lease.units), (Mode::Exclusive, 0));
}

#[test]
fn s4_1_without_a_pool_shared_leases_draw_no_units() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Read], 0));
    for holder in ["a", "b", "c"] {
        let view = granted(&log.acquire(ALICE, shared("db", holder, Mode::Read, 1_000)));
        assert_eq!(view.lease.units, 0);
    }
}

#[test]
fn s4_1_units_of_a_huge_pool_never_overflow_the_sum() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], u64::MAX));
    granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, u64::MAX / 2 + 1)));
    // Together they would pass u64::MAX: refused, never a panic or a wrapped sum.
    let reply = log.acquire(BOB, shared("pool", "b", Mode::Read, u64::MAX / 2 + 1));
    assert_eq!(refused(&reply).0, Refusal::InsufficientUnits);
    granted(&log.acquire(BOB, shared("pool", "b", Mode::Read, u64::MAX / 2)));
    let reply = log.acquire(BOB, shared("pool", "c", Mode::Read, 1));
    assert_eq!(refused(&reply).0, Refusal::InsufficientUnits);
}

#[test]
fn s4_2_same_holder_same_mode_gets_the_same_lease_and_ttl_is_not_extended() {
    let mut log = Log::new();
    let first = granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
    log.elapse(4_000);
    let again = granted(&log.acquire(ALICE, acq_ttl("r", "a", 30_000)));
    assert_eq!(
        again.lease, first.lease,
        "same lease_id, token, expiry and ttl"
    );
    assert_eq!(again.lease.expires_at_ms, 10_000);
    assert_eq!(again.remaining_ms, 6_000);
    let kinds: Vec<EventKind> = log.events("r").iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Acquired], "the repeat records nothing");
}

#[test]
fn s4_2_the_same_holder_under_another_principal_does_not_get_the_lease() {
    let mut log = Log::new();
    let first = granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
    let reply = log.acquire(BOB, acq_ttl("r", "a", 10_000));
    assert_eq!(rejection(&reply).reason(), "insufficient_permissions");
    let again = granted(&log.acquire(ROOT, acq_ttl("r", "a", 10_000)));
    assert_eq!(again.lease, first.lease, "an admin may act for any holder");
}

#[test]
fn s4_2_shared_acquire_with_the_same_units_is_idempotent() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 4));
    let first = granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 2)));
    let again = granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 2)));
    assert_eq!(again.lease, first.lease);
    assert_eq!(log.holders("pool"), held(&[("a", 2)]));
}

#[test]
fn s4_2_same_holder_other_mode_or_units_is_already_held() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read, Mode::Write], 4));
    granted(&log.acquire(ALICE, shared("pool", "a", Mode::Read, 2)));
    let already = Rejection::AlreadyHeld {
        mode: Mode::Read,
        units: 2,
    };
    for op in [
        shared("pool", "a", Mode::Read, 3),
        shared("pool", "a", Mode::Write, 2),
        acq("pool", "a"),
    ] {
        let reply = log.acquire(ALICE, op);
        assert_eq!(rejection(&reply), already);
        assert_eq!(already.reason(), "already_held");
    }
}

#[test]
fn s4_2_idempotency_key_of_another_holder_is_invalid_argument() {
    let mut log = Log::new();
    log.register("db", shared_policy(&[Mode::Read], 0));
    let keyed = |holder: &str, key: &str| AcquireOp {
        idempotency_key: Some(key.to_string()),
        ..shared("db", holder, Mode::Read, 0)
    };
    let a = granted(&log.acquire(ALICE, keyed("a", "k1")));
    assert_eq!(
        invalid_field(&log.acquire(BOB, keyed("b", "k1"))),
        "idempotency_key"
    );
    // The same holder with its own key is idempotent; another key is a new lease.
    assert_eq!(
        granted(&log.acquire(ALICE, keyed("a", "k1"))).lease,
        a.lease
    );
    granted(&log.acquire(BOB, keyed("b", "k2")));
    // On an exclusive lease the key is checked before contention.
    granted(&log.acquire(
        ALICE,
        AcquireOp {
            idempotency_key: Some("kx".into()),
            ..acq("x", "a")
        },
    ));
    let reply = log.acquire(
        BOB,
        AcquireOp {
            idempotency_key: Some("kx".into()),
            ..acq("x", "b")
        },
    );
    assert_eq!(invalid_field(&reply), "idempotency_key");
}

/// The fencing token of a grant is the index of the entry that granted it, whatever other
/// entries (blank, membership) used up indexes in between; renewals keep it.
#[test]
fn s4_1_the_fencing_token_is_the_granting_entrys_index() {
    let mut log = Log::new();
    log.index = 41;
    let first = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 5_000)));
    assert_eq!(first.lease.fencing_token, 42);
    assert_eq!(first.lease.lease_id().to_string(), "lse_42_0");

    // Blank and membership entries use up indexes too; renewals keep the token.
    log.index += 3;
    log.elapse(1_000);
    let renewed = lease(&log.renew(ALICE, renew_by_token("world", "alice", 42, None)));
    assert_eq!(renewed.lease.fencing_token, 42);
    assert_eq!(
        lease(&log.release(ALICE, release_by_token("world", "alice", 42))).status,
        LeaseStatus::Released
    );

    let second = granted(&log.acquire(BOB, acq_ttl("world", "bob", 5_000)));
    assert_eq!(log.index, 48);
    assert_eq!(second.lease.fencing_token, 48);
    assert_eq!(second.lease.lease_id().to_string(), "lse_48_0");
}

#[test]
fn s4_1_acquire_grants_a_free_resource_for_the_ttl() {
    let mut log = Log::new();
    log.tick();
    log.elapse(2_500);
    let view = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 7_000)));
    assert_eq!(view.status, LeaseStatus::Active);
    assert_eq!(view.lease.holder, "alice");
    assert_eq!(view.lease.principal, "alice");
    assert_eq!(view.lease.acquired_at_ms, 2_500);
    assert_eq!(view.lease.expires_at_ms, 9_500);
    assert_eq!(view.lease.ttl_ms, 7_000);
    assert_eq!(view.remaining_ms, 7_000);

    let default_ttl = granted(&log.acquire(ALICE, acq("seat", "alice")));
    assert_eq!(default_ttl.lease.ttl_ms, 60_000);
    assert_eq!(default_ttl.lease.expires_at_ms, 62_500);
}

#[test]
fn s4_1_acquire_of_a_held_resource_is_refused_with_the_current_holder() {
    let mut log = Log::new();
    let alice = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 5_000)));
    log.elapse(1_000);
    let reply = log.acquire(BOB, acq_ttl("world", "bob", 5_000));
    assert_eq!(refused(&reply).0, Refusal::ResourceUnavailable);
    let Reply::Acquire(outcome) = &reply else {
        unreachable!()
    };
    assert_eq!(outcome.holders.len(), 1);
    assert_eq!(outcome.holders[0].lease, alice.lease);
    assert_eq!(outcome.holders[0].remaining_ms, 4_000);
}
