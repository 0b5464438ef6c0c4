//! SPEC §4.6: transfer hands a lease over with its expiry and a new token.

use super::*;
use crate::history::{EventKind, Successor};
use crate::types::LeaseStatus;

/// Registers "r" (index 1), alice acquires with metadata at lease time 0 (index 2), time moves
/// 3 s, alice transfers to holder "b" (index 3); to another principal, an admin does.
fn handed_over(to_principal: Option<&str>) -> (Log, LeaseView, LeaseView) {
    let mut log = Log::new();
    log.register("r", transferable());
    let old = granted(&log.acquire(
        ALICE,
        AcquireOp {
            metadata: [("job".to_string(), "7".to_string())].into(),
            ..acq_ttl("r", "a", 10_000)
        },
    ));
    log.elapse(3_000);
    let caller = match to_principal {
        Some(_) => ROOT,
        None => ALICE,
    };
    let new = lease(&log.transfer(caller, transfer_of(&old, "b", to_principal)));
    (log, old, new)
}

#[test]
fn s4_6_transfer_needs_a_transferable_policy() {
    let mut log = Log::new();
    log.register("fixed", Policy::registered());
    for resource in ["fixed", "adhoc"] {
        let a = granted(&log.acquire(ALICE, acq(resource, "a")));
        let refusal = rejection(&log.transfer(ALICE, transfer_of(&a, "b", None)));
        assert_eq!(refusal, Rejection::NotTransferable(resource.into()));
        assert_eq!(refusal.reason(), "not_transferable");
        assert_eq!(log.holders(resource), held(&[("a", a.lease.fencing_token)]));
    }
}

#[test]
fn s4_6_transfer_gives_a_new_token_the_transfer_entrys_index_and_keeps_the_expiry() {
    let (log, old, new) = handed_over(Some("bob"));
    assert_eq!(log.index, 3);
    assert_eq!(new.lease.fencing_token, 3);
    assert_eq!(new.lease.lease_id().to_string(), "lse_3_0");
    assert_eq!(new.lease.holder, "b");
    assert_eq!(new.lease.principal, "bob");
    assert_eq!(new.lease.expires_at_ms, old.lease.expires_at_ms);
    assert_eq!(new.lease.acquired_at_ms, old.lease.acquired_at_ms);
    assert_eq!(new.lease.ttl_ms, old.lease.ttl_ms);
    assert_eq!(new.lease.metadata, old.lease.metadata);
    assert_eq!(new.lease.mode, old.lease.mode);
    assert_eq!(new.remaining_ms, 7_000);
    assert_eq!(log.holders("r"), held(&[("b", 3)]), "no gap, one holder");
    assert_eq!(log.state.live_leases(), 1);
}

#[test]
fn s4_6_the_old_token_is_dead_the_moment_the_transfer_commits() {
    let (mut log, old, new) = handed_over(Some("bob"));
    let stale = Rejection::StaleFencingToken {
        expected: 3,
        got: 2,
    };
    assert_eq!(rejection(&log.renew(ALICE, renew_of(&old, None))), stale);
    assert_eq!(rejection(&log.release(ALICE, release_of(&old))), stale);
    let by_holder = RenewOp {
        lease_id: String::new(),
        ..renew_of(&old, None)
    };
    assert_eq!(rejection(&log.renew(ALICE, by_holder)), stale);
    let check = log.validate("r", &old.lease.lease_id().to_string(), 2);
    assert_eq!(
        (check.valid, check.reason.as_str()),
        (false, "stale fencing token (expected 3, got 2)")
    );
    assert_eq!(
        log.validate("r", "", 2).reason,
        "stale fencing token (expected 3, got 2)"
    );
    assert_eq!(
        log.validate("r", &new.lease.lease_id().to_string(), 3)
            .reason,
        "ok"
    );
    // The new principal owns it now; the old one may not touch it.
    let refusal = rejection(&log.renew(ALICE, renew_of(&new, None)));
    assert!(
        matches!(refusal, Rejection::InsufficientPermissions(_)),
        "{refusal:?}"
    );
    let renewed = lease(&log.renew(BOB, renew_of(&new, None)));
    assert_eq!(renewed.lease.fencing_token, 3);
}

#[test]
fn s4_6_transfer_without_to_principal_keeps_the_principal() {
    let (mut log, _, new) = handed_over(None);
    assert_eq!(new.lease.principal, "alice");
    lease(&log.renew(ALICE, renew_of(&new, None)));
}

#[test]
fn s4_6_transfer_is_recorded_as_transferred_with_its_successor() {
    let (log, old, _) = handed_over(Some("bob"));
    let event = log.events("r").pop().expect("an event");
    assert_eq!(event.kind, EventKind::Transferred);
    assert_eq!((event.revision, event.actor.as_str()), (3, "root"));
    assert_eq!(
        (
            event.holder.as_str(),
            event.lease_id.to_string(),
            event.fencing_token
        ),
        ("a", old.lease.lease_id().to_string(), 2)
    );
    assert_eq!(
        (event.from, event.to),
        (Some(LeaseStatus::Active), Some(LeaseStatus::Transferred))
    );
    assert_eq!(
        event.successor,
        Some(Box::new(Successor {
            holder: "b".into(),
            lease_id: "lse_3_0".into(),
            fencing_token: 3,
        }))
    );
}

#[test]
fn s4_6_transfer_to_a_holder_of_the_resource_is_refused() {
    let mut log = Log::new();
    log.register(
        "db",
        Policy {
            transferable: true,
            ..shared_policy(&[Mode::Read], 0)
        },
    );
    let a = granted(&log.acquire(ALICE, shared("db", "a", Mode::Read, 0)));
    granted(&log.acquire(BOB, shared("db", "b", Mode::Read, 0)));
    let refusal = rejection(&log.transfer(ALICE, transfer_of(&a, "b", None)));
    assert_eq!(
        refusal,
        Rejection::AlreadyHeld {
            mode: Mode::Read,
            units: 0
        }
    );
    assert_eq!(
        invalid_field(&log.transfer(ALICE, transfer_of(&a, "a", None))),
        "to_holder"
    );
    assert_eq!(log.holders("db"), held(&[("a", 2), ("b", 3)]));
}

#[test]
fn s4_6_only_an_admin_hands_a_lease_to_another_principal() {
    let mut log = Log::new();
    log.register("r", transferable());
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    let refusal = rejection(&log.transfer(ALICE, transfer_of(&a, "b", Some("bob"))));
    assert!(
        matches!(&refusal, Rejection::InsufficientPermissions(why) if why.contains("bob")),
        "{refusal:?}"
    );
    assert_eq!(log.holders("r"), held(&[("a", a.lease.fencing_token)]));
    // Naming its own principal is no hand-over.
    let b = lease(&log.transfer(ALICE, transfer_of(&a, "b", Some("alice"))));
    assert_eq!(b.lease.principal, "alice");
    let c = lease(&log.transfer(ROOT, transfer_of(&b, "c", Some("bob"))));
    assert_eq!(c.lease.principal, "bob");
}
