//! SPEC §4.10: Validate answers `valid` and one of its reasons.

use super::*;
use crate::policy::FsmRequirement;
use crate::types::LeaseStatus;

fn with_grace(renewal_grace_ms: u64) -> Policy {
    Policy {
        renewal_grace_ms,
        ..Policy::registered()
    }
}

#[track_caller]
fn judged(v: &Validation) -> (bool, &str) {
    (v.valid, v.reason.as_str())
}

#[test]
fn s4_10_validate_answers_ok_for_the_live_tenure() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 5_000)));
    let v = log.validate("r", &a.lease.lease_id().to_string(), 1);
    assert_eq!(judged(&v), (true, "ok"));
    assert_eq!(v.lease.map(|l| l.lease), Some(a.lease.clone()));
    assert_eq!(
        judged(&log.validate("r", "", 1)),
        (true, "ok"),
        "by token alone"
    );
}

#[test]
fn s4_10_validate_names_expected_and_got_for_a_stale_token() {
    let mut log = Log::new();
    log.tick();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 5_000)));
    assert_eq!(a.lease.fencing_token, 2);
    let v = log.validate("r", &a.lease.lease_id().to_string(), 1);
    assert_eq!(
        judged(&v),
        (false, "stale fencing token (expected 2, got 1)")
    );
    // A lease that is gone from a resource whose newer tenure has a higher token.
    lease(&log.release(ALICE, release_of(&a)));
    granted(&log.acquire(BOB, acq("r", "b")));
    let v = log.validate("r", "lse_999_0", 2);
    assert_eq!(
        judged(&v),
        (false, "stale fencing token (expected 4, got 2)")
    );
}

#[test]
fn s4_10_validate_of_an_unknown_lease_is_lease_not_found() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq("r", "a")));
    assert_eq!(
        judged(&log.validate("r", "lse_77_0", 0)),
        (false, "lease not found")
    );
    assert_eq!(
        judged(&log.validate("nothing-here", "lse_1_0", 1)),
        (false, "lease not found")
    );
    let v = log.validate("r", "", 99);
    assert_eq!(judged(&v), (false, "lease not found"));
    assert_eq!(v.lease, None);
}

#[test]
fn s4_10_validate_is_lease_expired_during_grace_and_after_reclaim() {
    let mut log = Log::new();
    log.register("r", with_grace(5_000));
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 2_000)));
    log.elapse(1_999);
    log.tick();
    assert_eq!(
        judged(&log.validate("r", &a.lease.lease_id().to_string(), 2)),
        (true, "ok")
    );
    log.elapse(1);
    log.tick();
    let v = log.validate("r", &a.lease.lease_id().to_string(), 2);
    assert_eq!(judged(&v), (false, "lease expired"));
    assert_eq!(
        v.lease.map(|l| l.status),
        Some(LeaseStatus::Grace),
        "still holds the resource"
    );
    assert_eq!(
        refused(&log.acquire(BOB, acq("r", "b"))).0,
        Refusal::ResourceUnavailable
    );
    log.elapse(5_000);
    log.tick();
    let v = log.validate("r", &a.lease.lease_id().to_string(), 2);
    assert_eq!(judged(&v), (false, "lease expired"));
    assert_eq!(v.lease.map(|l| l.status), Some(LeaseStatus::Reclaimed));
}

#[test]
fn s4_10_validate_of_a_released_lease_is_lease_released() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    lease(&log.release(ALICE, release_of(&a)));
    let v = log.validate("r", &a.lease.lease_id().to_string(), 1);
    assert_eq!(judged(&v), (false, "lease released"));
    assert_eq!(v.lease.map(|l| l.status), Some(LeaseStatus::Released));
}

#[test]
fn s4_10_validate_checks_the_fsm_requirement_against_the_declared_pairs() {
    let mut log = Log::new();
    log.register(
        "order",
        Policy {
            fsm_requirements: vec![FsmRequirement {
                machine: "order".into(),
                transition: "ship".into(),
            }],
            ..Policy::registered()
        },
    );
    let a = granted(&log.acquire(ALICE, acq("order", "a")));
    let pair = |m: &str, t: &str| (m.to_string(), t.to_string());
    let check = |log: &Log, resource: &str, lease: &LeaseView, fsm: &(String, String)| {
        let v = log.state.validate(
            resource,
            &lease.lease.lease_id().to_string(),
            lease.lease.fencing_token,
            Some(fsm),
        );
        (v.valid, v.reason)
    };
    assert_eq!(
        check(&log, "order", &a, &pair("order", "ship")),
        (true, "ok".into())
    );
    for undeclared in [pair("order", "cancel"), pair("invoice", "ship")] {
        assert_eq!(
            check(&log, "order", &a, &undeclared),
            (false, "no matching fsm requirement".into())
        );
    }
    // An ad-hoc resource declares no pair at all.
    let b = granted(&log.acquire(ALICE, acq("adhoc", "a")));
    assert_eq!(
        check(&log, "adhoc", &b, &pair("order", "ship")),
        (false, "no matching fsm requirement".into())
    );
    // A wrong token answers first.
    let v = log.state.validate(
        "order",
        &a.lease.lease_id().to_string(),
        1,
        Some(&pair("order", "ship")),
    );
    assert_eq!(
        judged(&v),
        (false, "stale fencing token (expected 2, got 1)")
    );
}
