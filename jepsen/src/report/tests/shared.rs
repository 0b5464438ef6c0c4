//! The report of shared leases and transfers.

use super::*;

/// Shared co-holders get lanes of their own, coloured by mode and labelled with their units;
/// a transfer draws an arrow into the new holder's lane and counts as a grant of its kind.
#[test]
fn shared_leases_and_transfers_are_drawn() {
    use crate::history::{Mode, ResourcePolicy};
    let mut b = Builder { ops: Vec::new() };
    let shared = |h: &str, mode, units| Call::Acquire {
        resource: "s0".into(),
        holder: h.into(),
        ttl_ms: 3000,
        mode,
        units,
        wait_ms: 0,
        many: 0,
        session_id: String::new(),
        session_alive_ns: 0,
    };
    b.op(1, shared("c1", Mode::Read, 2), 100, 5, granted(3));
    b.op(2, shared("c2", Mode::Write, 1), 120, 5, granted(4));
    b.op(
        1,
        release("s0", "c1", 3),
        900,
        5,
        ok(Value::Released { token: 3 }),
    );
    b.op(3, acquire("x0", "c3"), 100, 5, granted(5));
    b.op(
        3,
        Call::Transfer {
            resource: "x0".into(),
            holder: "c3".into(),
            lease_id: "lse_5".into(),
            token: 5,
            to_holder: "c4".into(),
        },
        500,
        5,
        ok(Value::Transferred {
            token: 9,
            lease_id: "lse_9".into(),
            mode: Mode::Exclusive,
            units: 0,
        }),
    );
    b.op(
        4,
        renew("x0", "c4", 9),
        700,
        5,
        ok(Value::Renewed { token: 9 }),
    );
    b.op(
        4,
        release("x0", "c4", 9),
        900,
        5,
        ok(Value::Released { token: 9 }),
    );
    let history = History {
        seed: 3,
        nodes: 3,
        started_ns: T0,
        ops: b.ops,
        resources: [
            (
                "s0".to_string(),
                ResourcePolicy {
                    shared_modes: vec![Mode::Read, Mode::Write],
                    total_units: 4,
                    ..ResourcePolicy::default()
                },
            ),
            (
                "x0".to_string(),
                ResourcePolicy {
                    transferable: true,
                    ..ResourcePolicy::default()
                },
            ),
        ]
        .into_iter()
        .collect(),
        ..History::default()
    };
    let check = crate::checker::check(&history, &crate::checker::CheckParams::default());
    assert!(check.ok(), "{:#?}", check.anomalies);
    let s = summarize(&history, &check);
    assert_eq!(
        (
            s.grants,
            s.grants_by_kind.exclusive,
            s.grants_by_kind.shared,
            s.grants_by_kind.transfer
        ),
        (4, 1, 2, 1)
    );
    assert_eq!(s.tenures_ended_by_expiry, 1, "c2's write lease");
    assert_eq!(s.calls.transfer.ok, 1);
    let page = html(&history, &check, &s);
    assert_eq!(page.matches("<rect class=\"tenure\"").count(), 4);
    assert!(
        page.contains("#3 R2") && page.contains("#4 W1"),
        "unit labels"
    );
    assert_eq!(page.matches("<line class=\"transfer\"").count(), 1);
    assert!(page.contains("handed over by p3"));
    assert!(
        page.contains("shared read+write, 4 units"),
        "the policy is shown"
    );
    assert!(text(&s, &check).contains("exclusive 1, shared 2, by transfer 1"));
}
