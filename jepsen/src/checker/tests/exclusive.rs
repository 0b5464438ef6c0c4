//! Ad-hoc exclusive leases: each history has one anomaly, or none.

use super::*;

#[test]
fn a_valid_control_history_passes() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(5));
    h.op(acquire("b", 1000), 5, 15, refused(Some("a"), Some(5)));
    h.op(read(1), 20, 25, read_held("a", 5));
    h.op(
        validate(5),
        20,
        30,
        ok(Value::Validated {
            valid: true,
            reason: "ok".into(),
        }),
    );
    h.op(renew("a", 5, 1000), 30, 40, ok(Value::Renewed { token: 5 }));
    h.op(write("a", 5), 41, 42, ok(Value::StoreAccepted));
    h.op(acquire("a", 1000), 43, 44, granted(5)); // idempotent
    h.op(release("a", 5), 50, 60, ok(Value::Released { token: 5 }));
    h.op(
        validate(5),
        61,
        62,
        ok(Value::Validated {
            valid: false,
            reason: "lease released".into(),
        }),
    );
    h.op(acquire("b", 1000), 61, 70, granted(9));
    h.op(write("b", 9), 71, 72, ok(Value::StoreAccepted));
    h.op(
        write("a", 5),
        73,
        74,
        ok(Value::StoreRejected { highest: 9 }),
    );
    h.op(renew("a", 5, 1000), 75, 76, fail("stale_fencing_token"));
    h.op(release("a", 5), 75, 77, fail("unavailable"));
    h.op(read(2), 80, 85, read_held("b", 9));
    // Concurrent: c is refused, b releases, a read sees the resource free.
    h.op(acquire("c", 1000), 90, 200, refused(Some("b"), Some(9)));
    h.op(release("b", 9), 100, 110, ok(Value::Released { token: 9 }));
    h.op(read(3), 105, 120, read_free());
    h.op(acquire("c", 1000), 210, 220, granted(12));
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.grants, 3);
    assert_eq!(report.resources_checked, 1);
    assert_eq!(report.ops_checked, 18); // the release that failed `unavailable` proves nothing
}

#[test]
fn a_stale_read_after_another_grant_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(release("a", 3), 20, 30, ok(Value::Released { token: 3 }));
    let grant = h.op(acquire("b", 5000), 40, 50, granted(8));
    let stale = h.op(read(2), 60, 70, read_held("a", 3));
    let report = h.check();
    let a = the(&report, "nonlinearizable");
    // The evidence: the read, and the grant that put b in charge before it.
    assert_eq!(a.ops, vec![grant, stale], "{a:#?}");
    assert!(
        a.message.contains("read(node 2)") && a.message.contains("held by b"),
        "{}",
        a.message
    );
    assert!(!report.ok() && !report.linearizable);
}

#[test]
fn a_lost_release_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    let rel = h.op(release("a", 3), 20, 30, ok(Value::Released { token: 3 }));
    let seen = h.op(read(1), 40, 50, read_held("a", 3));
    let report = h.check();
    let a = the(&report, "nonlinearizable");
    assert_eq!(a.ops, vec![rel, seen], "{a:#?}");
    assert!(a.message.contains("free"), "{}", a.message);
}

#[test]
fn overlapping_tenures_are_reported() {
    let mut h = Builder::new();
    let first = h.op(acquire("a", 10_000), 0, 10, granted(3));
    let second = h.op(acquire("b", 10_000), 100, 110, granted(7));
    let report = h.check();
    let a = the(&report, "overlapping_tenures");
    assert_eq!(a.ops, vec![first, second]);
    the(&report, "nonlinearizable");
}

#[test]
fn a_token_going_down_is_reported() {
    let mut h = Builder::new();
    let high = h.op(acquire("a", 10_000), 0, 10, granted(10));
    h.op(release("a", 10), 20, 30, ok(Value::Released { token: 10 }));
    let low = h.op(acquire("b", 10_000), 40, 50, granted(5));
    let report = h.check();
    let a = the(&report, "token_not_increasing");
    assert_eq!(a.ops, vec![high, low]);
    the(&report, "nonlinearizable");
    assert!(
        report.of_kind("overlapping_tenures").is_empty(),
        "{report:#?}"
    );
}

#[test]
fn a_token_granted_twice_is_reported() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(4));
    h.op(release("a", 4), 20, 30, ok(Value::Released { token: 4 }));
    h.op(acquire("b", 1000), 40, 50, granted(4));
    let report = h.check();
    assert!(
        report
            .of_kind("token_not_increasing")
            .iter()
            .any(|a| a.message.contains("2 different holders")),
        "{report:#?}"
    );
    the(&report, "nonlinearizable");
}

#[test]
fn an_acquire_refused_while_free_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(release("a", 3), 20, 30, ok(Value::Released { token: 3 }));
    let refused_op = h.op(acquire("b", 5000), 40, 50, refused(None, None));
    let report = h.check();
    assert!(the(&report, "nonlinearizable").ops.contains(&refused_op));
    assert_eq!(kinds(&report), vec!["nonlinearizable"]);
}

#[test]
fn a_refusal_naming_the_wrong_holder_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("b", 5000), 20, 30, refused(Some("c"), Some(3)));
    the(&h.check(), "nonlinearizable");
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("b", 5000), 20, 30, refused(Some("a"), Some(2)));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn an_idempotent_acquire_must_return_the_same_token() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("a", 5000), 20, 30, granted(3));
    assert_ok(&h.check());
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("a", 5000), 20, 30, granted(4));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn unknown_ops_may_take_effect_late_or_never() {
    let mut h = Builder::new();
    // An acquire that timed out but took effect: revealed by b's refusal and a read.
    h.op(acquire("a", 1000), 0, 500, unknown());
    h.op(acquire("b", 1000), 600, 610, refused(Some("a"), Some(4)));
    h.op(read(1), 620, 630, read_held("a", 4));
    // A release that timed out and never took effect.
    h.op(release("a", 4), 700, 1000, unknown());
    h.op(read(2), 1100, 1110, read_held("a", 4));
    // An acquire that timed out and never took effect.
    h.op(acquire("c", 1000), 1200, 5000, unknown());
    h.op(read(3), 1300, 1310, read_held("a", 4));
    h.op(
        release("a", 4),
        1400,
        1410,
        ok(Value::Released { token: 4 }),
    );
    h.op(acquire("b", 1000), 1500, 1510, granted(9));
    h.op(
        renew("b", 9, 1000),
        1600,
        1610,
        ok(Value::Renewed { token: 9 }),
    );
    assert_ok(&h.check());
}

#[test]
fn an_unknown_grant_still_needs_a_higher_token() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(4));
    h.op(release("a", 4), 20, 30, ok(Value::Released { token: 4 }));
    h.op(acquire("b", 1000), 40, 500, unknown());
    // Token 4 was a's: b's grant (if any) has a higher one.
    h.op(read(1), 600, 610, read_held("b", 4));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn an_unknown_release_that_never_happened_cannot_free_another_tenure() {
    let mut h = Builder::new();
    h.op(acquire("a", 10_000), 0, 10, granted(4));
    h.op(release("a", 3), 20, 500, unknown());
    h.op(read(1), 600, 610, read_free());
    the(&h.check(), "nonlinearizable");
}

#[test]
fn a_lease_expires_after_its_ttl_and_not_before() {
    // ttl 1000 ms, ε 2 %: a's lease cannot expire before 980 ms.
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(3));
    h.op(read(1), 1500, 1510, read_held("a", 3)); // may still be held after the bound
    h.op(acquire("b", 1000), 2000, 2010, granted(7));
    h.op(renew("a", 3, 1000), 2100, 2110, fail("lease_not_found"));
    assert_ok(&h.check());

    let mut h = Builder::new();
    let a = h.op(acquire("a", 1000), 0, 10, granted(3));
    let b = h.op(acquire("b", 1000), 500, 510, granted(7));
    let report = h.check();
    assert_eq!(the(&report, "nonlinearizable").ops, vec![a, b]);
    the(&report, "overlapping_tenures");

    // An expired lease stays expired.
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(3));
    h.op(read(1), 1500, 1510, read_free());
    h.op(read(2), 1600, 1610, read_held("a", 3));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn a_renew_moves_the_bound() {
    let history = |b_at: u64| {
        let mut h = Builder::new();
        h.op(acquire("a", 1000), 0, 10, granted(3));
        h.op(
            renew("a", 3, 1000),
            800,
            810,
            ok(Value::Renewed { token: 3 }),
        );
        h.op(acquire("b", 1000), b_at, b_at + 10, granted(7));
        h.check()
    };
    assert_ok(&history(1900)); // 800 + 980 = 1780 ≤ 1900
    let report = history(1500);
    the(&report, "nonlinearizable");
    the(&report, "overlapping_tenures");
}

#[test]
fn a_renew_after_expiry_cannot_succeed() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(3));
    h.op(read(1), 1500, 1510, read_free());
    h.op(
        renew("a", 3, 1000),
        1600,
        1610,
        ok(Value::Renewed { token: 3 }),
    );
    the(&h.check(), "nonlinearizable");
}

#[test]
fn the_fenced_store_is_checked() {
    // Accepted after a higher token was accepted and returned.
    let mut h = Builder::new();
    h.op(write("a", 9), 0, 1, ok(Value::StoreAccepted));
    h.op(write("b", 5), 2, 3, ok(Value::StoreAccepted));
    assert_eq!(the(&h.check(), "stale_write_accepted").ops, vec![0, 1]);

    // Rejected though nothing higher was accepted.
    let mut h = Builder::new();
    h.op(write("a", 5), 0, 1, ok(Value::StoreAccepted));
    h.op(write("b", 7), 2, 3, ok(Value::StoreRejected { highest: 9 }));
    assert_eq!(the(&h.check(), "fresh_write_rejected").ops, vec![1]);
    let mut h = Builder::new();
    h.op(write("a", 5), 0, 1, ok(Value::StoreAccepted));
    h.op(write("b", 7), 2, 3, ok(Value::StoreRejected { highest: 5 }));
    the(&h.check(), "fresh_write_rejected");

    // A concurrent higher write justifies a rejection; an equal token is accepted.
    let mut h = Builder::new();
    h.op(write("b", 9), 0, 10, ok(Value::StoreAccepted));
    h.op(write("a", 5), 5, 8, ok(Value::StoreRejected { highest: 9 }));
    h.op(write("b", 9), 11, 12, ok(Value::StoreAccepted));
    assert_ok(&h.check());
}

#[test]
fn an_answer_that_does_not_fit_the_call_is_reported() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, ok(Value::StoreAccepted));
    the(&h.check(), "unexpected_value");
}

#[test]
fn a_search_over_budget_is_reported_as_exhausted() {
    let mut h = Builder::new();
    for i in 0..6 {
        h.op(read(i), 0, 100, read_free());
    }
    let history = h.history();
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: 2,
        },
    );
    assert_eq!(report.search_exhausted, vec![R.to_owned()]);
    assert!(!report.ok() && !report.linearizable && report.anomalies.is_empty());
}

#[test]
fn a_report_serializes() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("b", 5000), 20, 30, granted(4));
    let json = serde_json::to_string(&h.check()).expect("json");
    assert!(json.contains("\"nonlinearizable\""), "{json}");
}
