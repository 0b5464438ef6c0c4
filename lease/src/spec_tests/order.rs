//! SPEC §3.5's order of checks when several fail, as the state machine applies it: argument
//! validation → resource/lease existence → holder and permission → fencing token → lease state
//! → policy (authentication comes first, at the API, before the body is read). And
//! `require_registration`'s `resource_not_found`.

use super::*;
use crate::policy::DAY_MS;

#[test]
fn s3_a_bad_name_with_an_unknown_lease_is_invalid_argument() {
    let (mut log, a) = capped();
    let op = RenewOp {
        resource: "bad name".into(),
        lease_id: "lse_404_0".into(),
        ..renew_of(&a, None)
    };
    assert_eq!(invalid_field(&log.renew(ALICE, op)), "resource");
    let op = ReleaseOp {
        holder: String::new(),
        lease_id: "lse_404_0".into(),
        ..release_of(&a)
    };
    assert_eq!(invalid_field(&log.release(ALICE, op)), "holder");
}

#[test]
fn s3_an_unknown_lease_with_a_wrong_token_is_lease_not_found() {
    let (mut log, a) = capped();
    let op = RenewOp {
        lease_id: "lse_404_0".into(),
        fencing_token: 404,
        ..renew_of(&a, None)
    };
    assert_eq!(rejection(&log.renew(ALICE, op)).reason(), "lease_not_found");
    let op = ReleaseOp {
        resource: "elsewhere".into(),
        fencing_token: 404,
        ..release_of(&a)
    };
    assert_eq!(rejection(&log.release(BOB, op)).reason(), "lease_not_found");
}

#[test]
fn s3_a_wrong_holder_with_a_stale_token_is_insufficient_permissions() {
    let (mut log, a) = capped();
    let op = RenewOp {
        holder: "not-a".into(),
        fencing_token: 1,
        ..renew_of(&a, None)
    };
    assert_eq!(
        rejection(&log.renew(ALICE, op)).reason(),
        "insufficient_permissions"
    );
    // Another principal with the right holder and a stale token: permission first, too.
    let op = RenewOp {
        fencing_token: 1,
        ..renew_of(&a, None)
    };
    assert_eq!(
        rejection(&log.renew(BOB, op)).reason(),
        "insufficient_permissions"
    );
}

#[test]
fn s3_a_stale_token_past_the_lifetime_is_stale_fencing_token() {
    let (mut log, a) = capped();
    log.elapse(8_000);
    // Renewing 5 s more would pass the 10 s cap; the token is checked first.
    let op = RenewOp {
        fencing_token: 1,
        ..renew_of(&a, Some(5_000))
    };
    assert_eq!(
        rejection(&log.renew(ALICE, op)),
        Rejection::StaleFencingToken {
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        rejection(&log.renew(ALICE, renew_of(&a, Some(5_000)))).reason(),
        "lifetime_exceeded"
    );
}

#[test]
fn s3_a_ttl_argument_out_of_range_answers_before_the_lease_is_looked_up() {
    let (mut log, a) = capped();
    let op = RenewOp {
        lease_id: "lse_404_0".into(),
        ..renew_of(&a, Some(500))
    };
    assert_eq!(rejection(&log.renew(BOB, op)).reason(), "ttl_out_of_range");
}

/// A reclaimed lease keeps §3's order: another principal is refused for permission, its own
/// principal with a wrong token for the token, and only then is it `lease_expired`. A released
/// lease no longer exists (`lease_not_found`, whoever asks).
#[test]
fn s3_a_reclaimed_lease_checks_permission_then_token_then_state() {
    let (mut log, a) = capped();
    log.elapse(5_000 + 60_000);
    log.tick();
    let wrong_token = RenewOp {
        fencing_token: a.lease.fencing_token + 1,
        ..renew_of(&a, None)
    };
    let refused = rejection(&log.renew(BOB, wrong_token.clone()));
    assert_eq!(refused.reason(), "insufficient_permissions");
    assert_eq!(
        rejection(&log.renew(ALICE, wrong_token)),
        Rejection::StaleFencingToken {
            expected: a.lease.fencing_token,
            got: a.lease.fencing_token + 1
        }
    );
    assert_eq!(
        rejection(&log.renew(ALICE, renew_of(&a, None))),
        Rejection::LeaseExpired
    );
    let b = granted(&log.acquire(ALICE, acq("other", "b")));
    lease(&log.release(ALICE, release_of(&b)));
    let refused = rejection(&log.renew(BOB, renew_of(&b, None)));
    assert_eq!(refused.reason(), "lease_not_found");
}

#[test]
fn s3_require_registration_makes_an_unregistered_name_resource_not_found() {
    let mut log = Log::new();
    log.require_registration = true;
    let refusal = rejection(&log.acquire(ALICE, acq("adhoc", "a")));
    assert_eq!(refusal, Rejection::ResourceNotFound("adhoc".into()));
    assert_eq!(refusal.reason(), "resource_not_found");
    assert!(log.holders("adhoc").is_empty());
    // A bad name is still an argument error first.
    assert_eq!(
        invalid_field(&log.acquire(ALICE, acq("bad name", "a"))),
        "resource"
    );
    log.register("known", Policy::registered());
    granted(&log.acquire(ALICE, acq("known", "a")));
}

/// A ttl out of range, for the policy too, answers before existence, holder and token checks.
#[test]
fn s3_a_renew_ttl_out_of_range_answers_before_existence_holder_and_token() {
    let mut log = Log::new();
    let token = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 5_000)))
        .lease
        .fencing_token;
    for ttl_ms in [500, DAY_MS + 1] {
        let expected = Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: 1_000,
            max_ms: DAY_MS,
        };
        let renew = |token| renew_by_token("world", "alice", token, Some(ttl_ms));
        assert_eq!(rejection(&log.renew(ALICE, renew(token))), expected);
        assert_eq!(rejection(&log.renew(ALICE, renew(99))), expected);
        let elsewhere = renew_by_token("nowhere", "bob", 1, Some(ttl_ms));
        assert_eq!(rejection(&log.renew(BOB, elsewhere)), expected);
    }
    let view = log.state.resource_view("world");
    assert_eq!(view.leases[0].lease.expires_at_ms, 5_000, "unchanged");
}
