//! SPEC §4.18: a write with a `request_id` is applied at most once per (principal,
//! `request_id`); a retry gets the original outcome, another request under the same id is
//! `invalid_argument`. (Its bounds and quota are `quotas.rs`'.)

use super::*;

fn with_id(id: &str) -> Option<String> {
    Some(id.to_string())
}

#[test]
fn s4_18_a_retry_gets_the_original_reply_and_changes_nothing() {
    let mut log = Log::new();
    let op = Op::Acquire(acq_ttl("world", "alice", 5_000));
    let first = log.propose_with(ALICE, with_id("req-1"), op.clone());
    let token = granted(&first).lease.fencing_token;
    lease(&log.release(ALICE, release_by_token("world", "alice", token)));
    log.elapse(1_000);
    let bob = granted(&log.acquire(BOB, acq_ttl("world", "bob", 5_000))).lease;

    let retry = log.propose_with(ALICE, with_id("req-1"), op);
    assert_eq!(retry, first, "the original grant, applied once");
    let holder = &log.state.resource_view("world").leases[0].lease;
    assert_eq!(holder, &bob, "the retry changed nothing");

    // A rejected renew (renews are not remembered) answers the same when sent again.
    let renew = Op::Renew(renew_by_token("world", "alice", 999, None));
    let rejected = log.propose_with(ALICE, with_id("req-2"), renew.clone());
    assert_eq!(rejection(&rejected).reason(), "lease_not_found");
    assert_eq!(log.propose_with(ALICE, with_id("req-2"), renew), rejected);
}

#[test]
fn s4_18_a_request_id_reused_for_another_request_is_invalid_argument() {
    let mut log = Log::new();
    let first = Op::Acquire(acq("world", "alice"));
    granted(&log.propose_with(ALICE, with_id("req-1"), first));
    let other = log.propose_with(ALICE, with_id("req-1"), Op::Acquire(acq("seat", "alice")));
    assert_eq!(
        rejection(&other),
        Rejection::InvalidArgument {
            field: "request_id".into(),
            problem: "already used with a different request".into(),
        }
    );
    assert_eq!(rejection(&other).reason(), "invalid_argument");
    assert!(log.state.resource_view("seat").leases.is_empty());
}

#[test]
fn s4_18_a_request_id_is_per_principal() {
    let mut log = Log::new();
    granted(&log.propose_with(ALICE, with_id("req-1"), Op::Acquire(acq("world", "alice"))));
    let bob = log.propose_with(BOB, with_id("req-1"), Op::Acquire(acq("seat", "bob")));
    assert_eq!(granted(&bob).lease.holder, "bob");
}
