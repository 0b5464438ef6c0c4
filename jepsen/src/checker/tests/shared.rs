//! Shared modes and units, transfers, the renewal grace: hand-built histories the checker must
//! flag, and valid controls it must pass.

use super::*;

const READ: Mode = Mode::Read;
const WRITE: Mode = Mode::Write;
const X: Mode = Mode::Exclusive;

/// READ+WRITE sharing a pool of 4 units, no grace.
fn pool4() -> ResourcePolicy {
    ResourcePolicy {
        shared_modes: vec![READ, WRITE],
        total_units: 4,
        ..ResourcePolicy::default()
    }
}

/// Exclusive only, transferable, no grace.
fn movable() -> ResourcePolicy {
    ResourcePolicy {
        transferable: true,
        ..ResourcePolicy::default()
    }
}

fn lease(holder: &str, token: u64, mode: Mode, units: u64) -> Held {
    Held {
        holder: holder.into(),
        token,
        mode,
        units,
        grace: false,
    }
}

fn refused_with(reason: &str, holders: Vec<Held>) -> Outcome {
    ok(Value::Refused {
        reason: reason.into(),
        holder: holders.first().map(|h| h.holder.clone()),
        token: holders.first().map(|h| h.token),
        holders,
    })
}

fn read_all(leases: Vec<Held>) -> Outcome {
    ok(Value::read(leases))
}

fn transfer(holder: &str, token: u64, to: &str) -> Call {
    Call::Transfer {
        resource: R.into(),
        holder: holder.into(),
        lease_id: format!("lse_{token}_0"),
        token,
        to_holder: to.into(),
    }
}

fn transferred(token: u64) -> Outcome {
    ok(Value::Transferred {
        token,
        lease_id: format!("lse_{token}_0"),
        mode: X,
        units: 0,
    })
}

fn list(holder: &str) -> Call {
    Call::ListLeases {
        resource: R.into(),
        holder: holder.into(),
    }
}

fn shared_write(holder: &str, token: u64) -> Call {
    Call::Write {
        resource: R.into(),
        holder: holder.into(),
        token,
        shared: true,
        register: false,
    }
}

fn valid(valid: bool) -> Outcome {
    ok(Value::Validated {
        valid,
        reason: String::new(),
    })
}

#[test]
fn a_valid_shared_history_passes() {
    let mut h = Builder::with_policy(pool4());
    h.op(acquire_in("a", READ, 2, 5000), 0, 10, granted(3));
    h.op(acquire_in("b", WRITE, 2, 5000), 20, 30, granted(4));
    let both = vec![lease("a", 3, READ, 2), lease("b", 4, WRITE, 2)];
    h.op(
        acquire_in("c", READ, 1, 5000),
        40,
        50,
        refused_with("insufficient_units", both.clone()),
    );
    h.op(
        acquire_in("c", X, 0, 5000),
        40,
        50,
        refused_with("resource_unavailable", both.clone()),
    );
    h.op(read(1), 60, 70, read_all(both));
    // Idempotent: same mode and units, the same lease; other units, already held.
    h.op(acquire_in("a", READ, 2, 5000), 80, 90, granted(3));
    h.op(acquire_in("a", READ, 1, 5000), 80, 90, fail("already_held"));
    h.op(shared_write("a", 3), 95, 96, ok(Value::StoreAccepted));
    h.op(shared_write("b", 4), 97, 98, ok(Value::StoreAccepted));
    // Shared writers do not raise the bar: a's lower token is still accepted.
    h.op(shared_write("a", 3), 99, 100, ok(Value::StoreAccepted));
    h.op(release("a", 3), 100, 110, ok(Value::Released { token: 3 }));
    h.op(acquire_in("c", READ, 1, 5000), 120, 130, granted(8));
    h.op(acquire_in("d", WRITE, 1, 5000), 120, 135, granted(9));
    h.op(
        read(2),
        140,
        150,
        read_all(vec![
            lease("b", 4, WRITE, 2),
            lease("c", 8, READ, 1),
            lease("d", 9, WRITE, 1),
        ]),
    );
    h.op(release("b", 4), 160, 170, ok(Value::Released { token: 4 }));
    h.op(release("c", 8), 160, 170, ok(Value::Released { token: 8 }));
    h.op(release("d", 9), 160, 170, ok(Value::Released { token: 9 }));
    // Every lease granted after an exclusive tenure has a higher token.
    h.op(acquire_in("e", X, 0, 5000), 180, 190, granted(12));
    h.op(write("e", 12), 191, 192, ok(Value::StoreAccepted));
    h.op(
        shared_write("d", 9),
        193,
        194,
        ok(Value::StoreRejected { highest: 12 }),
    );
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.grants, 5);
}

#[test]
fn units_oversubscribed_are_flagged() {
    let mut h = Builder::with_policy(pool4());
    let a = h.op(acquire_in("a", READ, 2, 10_000), 0, 10, granted(3));
    let b = h.op(acquire_in("b", WRITE, 2, 10_000), 20, 30, granted(4));
    let c = h.op(acquire_in("c", READ, 1, 10_000), 40, 50, granted(5));
    let report = h.check();
    let over = the(&report, "units_oversubscribed");
    assert_eq!(over.ops, vec![a, b, c]);
    assert!(
        over.message.contains("5 units of a pool of 4"),
        "{}",
        over.message
    );
    assert!(the(&report, "nonlinearizable").ops.contains(&c));
}

#[test]
fn an_insufficient_units_answer_needs_a_full_pool() {
    let mut h = Builder::with_policy(pool4());
    h.op(acquire_in("a", READ, 2, 10_000), 0, 10, granted(3));
    let refusal = h.op(
        acquire_in("c", READ, 2, 10_000),
        20,
        30,
        refused_with("insufficient_units", vec![lease("a", 3, READ, 2)]),
    );
    let report = h.check();
    assert!(the(&report, "nonlinearizable").ops.contains(&refusal));
}

#[test]
fn an_exclusive_grant_while_a_read_lease_is_live_is_flagged() {
    let mut h = Builder::with_policy(pool4());
    let r = h.op(acquire_in("a", READ, 1, 10_000), 0, 10, granted(3));
    let x = h.op(acquire_in("b", X, 0, 10_000), 20, 30, granted(4));
    let report = h.check();
    let overlap = the(&report, "overlapping_tenures");
    assert_eq!(overlap.ops, vec![r, x]);
    assert!(the(&report, "nonlinearizable").ops.contains(&x));
}

#[test]
fn a_read_that_misses_a_co_holder_is_flagged() {
    let mut h = Builder::with_policy(pool4());
    h.op(acquire_in("a", READ, 1, 10_000), 0, 10, granted(3));
    h.op(acquire_in("b", READ, 1, 10_000), 20, 30, granted(4));
    let seen = h.op(read(1), 40, 50, read_all(vec![lease("b", 4, READ, 1)]));
    assert!(the(&h.check(), "nonlinearizable").ops.contains(&seen));
    // Nor may a refusal leave one out.
    let mut h = Builder::with_policy(pool4());
    h.op(acquire_in("a", READ, 1, 10_000), 0, 10, granted(3));
    h.op(acquire_in("b", READ, 1, 10_000), 20, 30, granted(4));
    let refusal = h.op(
        acquire_in("c", X, 0, 10_000),
        40,
        50,
        refused_with("resource_unavailable", vec![lease("a", 3, READ, 1)]),
    );
    assert!(the(&h.check(), "nonlinearizable").ops.contains(&refusal));
}

#[test]
fn a_valid_transfer_history_passes() {
    let mut h = Builder::with_policy(movable());
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(renew("a", 3, 5000), 20, 30, ok(Value::Renewed { token: 3 }));
    h.op(write("a", 3), 31, 32, ok(Value::StoreAccepted));
    h.op(transfer("a", 3, "b"), 40, 50, transferred(7));
    h.op(write("b", 7), 51, 52, ok(Value::StoreAccepted));
    // The old holder is fenced off: by the store, by renew, by validate.
    h.op(
        write("a", 3),
        53,
        54,
        ok(Value::StoreRejected { highest: 7 }),
    );
    h.op(renew("a", 3, 5000), 55, 60, fail("stale_fencing_token"));
    h.op(validate(3), 61, 62, valid(false));
    h.op(validate(7), 61, 62, valid(true));
    h.op(acquire("c", 5000), 63, 64, refused(Some("b"), Some(7)));
    h.op(renew("b", 7, 5000), 65, 70, ok(Value::Renewed { token: 7 }));
    // A transfer whose answer was lost: the new holder finds it with ListLeases.
    h.op(transfer("b", 7, "c"), 80, 2000, unknown());
    h.op(
        list("c"),
        2100,
        2110,
        ok(Value::Leases {
            leases: vec![lease("c", 9, X, 0)],
        }),
    );
    h.op(
        renew("c", 9, 5000),
        2120,
        2130,
        ok(Value::Renewed { token: 9 }),
    );
    h.op(list("b"), 2140, 2150, ok(Value::Leases { leases: vec![] }));
    h.op(
        release("c", 9),
        2200,
        2210,
        ok(Value::Released { token: 9 }),
    );
    h.op(read(1), 2220, 2230, read_free());
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.grants, 2, "a's grant and the transfer to b");
}

#[test]
fn an_old_token_accepted_after_a_transfer_is_flagged() {
    let mut h = Builder::with_policy(movable());
    h.op(acquire("a", 10_000), 0, 10, granted(3));
    let tr = h.op(transfer("a", 3, "b"), 20, 30, transferred(7));
    let late = h.op(
        renew("a", 3, 10_000),
        40,
        50,
        ok(Value::Renewed { token: 3 }),
    );
    let report = h.check();
    let stale = the(&report, "stale_token_accepted");
    assert_eq!(stale.ops, vec![tr, late]);
    assert!(the(&report, "nonlinearizable").ops.contains(&late));

    // A validation that still finds it valid.
    let mut h = Builder::with_policy(movable());
    h.op(acquire("a", 10_000), 0, 10, granted(3));
    h.op(transfer("a", 3, "b"), 20, 30, transferred(7));
    let late = h.op(validate(3), 40, 50, valid(true));
    let report = h.check();
    assert_eq!(the(&report, "stale_token_accepted").ops[1], late);
    the(&report, "nonlinearizable");
}

#[test]
fn a_transfer_token_must_be_higher() {
    let mut h = Builder::with_policy(movable());
    h.op(acquire("a", 10_000), 0, 10, granted(5));
    let tr = h.op(transfer("a", 5, "b"), 20, 30, transferred(4));
    let report = h.check();
    assert_eq!(the(&report, "transfer_token_not_higher").ops, vec![tr]);
    the(&report, "nonlinearizable");
}

#[test]
fn a_transfer_needs_a_transferable_resource_and_a_free_receiver() {
    let mut h = Builder::new();
    h.op(acquire("a", 10_000), 0, 10, granted(3));
    let tr = h.op(transfer("a", 3, "b"), 20, 30, transferred(7));
    assert!(the(&h.check(), "nonlinearizable").ops.contains(&tr));

    let mut h = Builder::with_policy(ResourcePolicy {
        transferable: true,
        ..pool4()
    });
    h.op(acquire_in("a", READ, 1, 10_000), 0, 10, granted(3));
    h.op(acquire_in("b", READ, 1, 10_000), 0, 10, granted(4));
    let tr = h.op(transfer("a", 3, "b"), 20, 30, transferred(7));
    assert!(the(&h.check(), "nonlinearizable").ops.contains(&tr));
    // What the node answers instead: already_held.
    let mut h = Builder::with_policy(ResourcePolicy {
        transferable: true,
        ..pool4()
    });
    h.op(acquire_in("a", READ, 1, 10_000), 0, 10, granted(3));
    h.op(acquire_in("b", READ, 1, 10_000), 0, 10, granted(4));
    h.op(transfer("a", 3, "b"), 20, 30, fail("already_held"));
    assert_ok(&h.check());
}

#[test]
fn a_transferred_lease_keeps_its_expiry() {
    // a's lease (ttl 1000 ms, ε 2 %) cannot expire before 980 ms; the transfer keeps that.
    let history = |c_at: u64| {
        let mut h = Builder::with_policy(movable());
        h.op(acquire("a", 1000), 0, 10, granted(3));
        h.op(transfer("a", 3, "b"), 500, 510, transferred(7));
        h.op(acquire("c", 1000), c_at, c_at + 10, granted(9));
        h.check()
    };
    assert_ok(&history(1000));
    let report = history(900);
    the(&report, "nonlinearizable");
    the(&report, "overlapping_tenures");
}

#[test]
fn the_renewal_grace_keeps_the_resource_but_not_validity() {
    let grace = ResourcePolicy {
        renewal_grace_ms: 500,
        ..pool4()
    };
    // ttl 1000 ms + grace 500 ms, ε 2 %: expired from 980 ms on, reclaimed from 1470 ms on.
    let mut h = Builder::with_policy(grace.clone());
    h.op(acquire_in("a", X, 0, 1000), 0, 10, granted(3));
    h.op(
        read(1),
        1100,
        1110,
        read_all(vec![Held {
            grace: true,
            ..lease("a", 3, X, 0)
        }]),
    );
    h.op(validate(3), 1120, 1130, valid(false));
    h.op(
        acquire_in("b", READ, 1, 1000),
        1140,
        1150,
        refused_with(
            "resource_unavailable",
            vec![Held {
                grace: true,
                ..lease("a", 3, X, 0)
            }],
        ),
    );
    h.op(
        renew("a", 3, 1000),
        1200,
        1210,
        ok(Value::Renewed { token: 3 }),
    );
    h.op(validate(3), 1220, 1230, valid(true));
    assert_ok(&h.check());

    // Granted to another holder before the grace can have ended.
    let mut h = Builder::with_policy(grace.clone());
    h.op(acquire_in("a", X, 0, 1000), 0, 10, granted(3));
    let early = h.op(acquire_in("b", X, 0, 1000), 1200, 1210, granted(5));
    assert!(the(&h.check(), "nonlinearizable").ops.contains(&early));

    // Valid again after the grace began, without a renew.
    let mut h = Builder::with_policy(grace);
    h.op(acquire_in("a", X, 0, 1000), 0, 10, granted(3));
    h.op(validate(3), 1100, 1110, valid(false));
    let back = h.op(validate(3), 1200, 1210, valid(true));
    assert!(the(&h.check(), "nonlinearizable").ops.contains(&back));
}

#[test]
fn a_shared_write_does_not_fence_but_is_fenced() {
    // Accepted below an exclusive writer's token: stale.
    let mut h = Builder::with_policy(pool4());
    h.op(write("x", 9), 0, 1, ok(Value::StoreAccepted));
    h.op(shared_write("r", 5), 2, 3, ok(Value::StoreAccepted));
    assert_eq!(the(&h.check(), "stale_write_accepted").ops, vec![0, 1]);
    // Rejected though only a shared writer had a higher token: not fenced by it.
    let mut h = Builder::with_policy(pool4());
    h.op(shared_write("r", 9), 0, 1, ok(Value::StoreAccepted));
    h.op(write("x", 5), 2, 3, ok(Value::StoreRejected { highest: 9 }));
    the(&h.check(), "fresh_write_rejected");
}
