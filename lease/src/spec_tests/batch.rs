//! Entries that carry several proposals (the leader's batching): each proposal is applied in
//! order with its own reply, and every grant's fencing token is the entry's index (SPEC §4.1).

use super::*;

#[test]
fn s4_1_grants_in_one_entry_carry_its_index_and_distinct_lease_ids() {
    let mut log = Log::new();
    let replies = log.propose_batch(vec![
        (ALICE, Op::Acquire(acq("a", "h1"))),
        (BOB, Op::Acquire(acq("b", "h2"))),
    ]);
    let index = log.index;
    let (a, b) = (granted(&replies[0]), granted(&replies[1]));
    assert_eq!(
        (a.lease.fencing_token, b.lease.fencing_token),
        (index, index)
    );
    assert_eq!(a.lease.lease_id().to_string(), format!("lse_{index}_0"));
    assert_eq!(b.lease.lease_id().to_string(), format!("lse_{index}_1"));
    assert_eq!(log.holders("a"), [("h1".to_string(), index)]);
    assert_eq!(log.holders("b"), [("h2".to_string(), index)]);
}

#[test]
fn s4_1_a_batch_applies_in_order_as_consecutive_entries_would() {
    let mut log = Log::new();
    let held = granted(&log.acquire(ALICE, acq("x", "h1")));
    // Release x, then (same entry) renew y's lease that does not exist, then acquire y.
    let replies = log.propose_batch(vec![
        (ALICE, Op::Release(release_of(&held))),
        (
            BOB,
            Op::Renew(RenewOp {
                resource: "y".into(),
                ..renew_of(&held, None)
            }),
        ),
        (BOB, Op::Acquire(acq("y", "h2"))),
    ]);
    let index = log.index;
    assert!(matches!(replies[0], Reply::Lease(_)), "{:?}", replies[0]);
    assert_eq!(rejection(&replies[1]).reason(), "lease_not_found");
    assert_eq!(granted(&replies[2]).lease.fencing_token, index);
    assert!(log.holders("x").is_empty());
    // A later entry sees the batch's effects, and x's next grant has a higher token.
    let again = granted(&log.acquire(BOB, acq("x", "h3")));
    assert!(again.lease.fencing_token > held.lease.fencing_token);
    assert_eq!(again.lease.fencing_token, index + 1);
}
