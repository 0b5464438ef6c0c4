//! The `fenced` workload's register (PostgreSQL's record of the writes) against the clients'
//! answers and the grants: each history has one anomaly of the register's, or none.

use super::*;
use crate::history::RegisterWrite;

fn register_write(holder: &str, token: u64) -> Call {
    Call::Write {
        resource: R.into(),
        holder: holder.into(),
        token,
        shared: false,
        register: true,
    }
}

/// What the register holds: version `version`, written by op `op`.
fn held(op: u64, version: u64, holder: &str, token: u64) -> RegisterWrite {
    RegisterWrite {
        resource: R.into(),
        version,
        token,
        holder: holder.into(),
        op,
    }
}

fn check_with(h: &Builder, register: Vec<RegisterWrite>) -> CheckReport {
    let mut history = h.history();
    history.register = register;
    check(&history, &CheckParams::for_history(&history))
}

/// `a` holds token 5 and writes; `b` acquires after `a`'s lease ran out (token 9) and writes;
/// `a` writes again late. Returns the ops of `a`'s first write, `b`'s, and `a`'s late one.
fn late_writer(h: &mut Builder, late: Outcome) -> (u64, u64, u64) {
    h.op(acquire("a", 100), 0, 10, granted(5));
    let first = h.op(register_write("a", 5), 20, 30, ok(Value::StoreAccepted));
    h.op(acquire("b", 1000), 300, 310, granted(9));
    let second = h.op(register_write("b", 9), 320, 330, ok(Value::StoreAccepted));
    let third = h.op(register_write("a", 5), 400, 410, late);
    (first, second, third)
}

/// The register holding all three of [`late_writer`]'s writes, in the order they were made.
fn all_three(first: u64, second: u64, third: u64) -> Vec<RegisterWrite> {
    vec![
        held(first, 1, "a", 5),
        held(second, 2, "b", 9),
        held(third, 3, "a", 5),
    ]
}

#[test]
fn a_late_writer_refused_by_the_guard_leaves_the_register_in_token_order() {
    let mut h = Builder::new();
    let (first, second, _) = late_writer(&mut h, ok(Value::StoreRejected { highest: 9 }));
    let report = check_with(&h, vec![held(first, 1, "a", 5), held(second, 2, "b", 9)]);
    assert_ok(&report);
    assert_eq!(report.register.writes, 2);
    assert_eq!(
        (
            report.register.accepted,
            report.register.refused,
            report.register.unknown
        ),
        (2, 1, 0)
    );
}

#[test]
fn a_write_of_an_ended_tenure_after_a_later_ones_is_out_of_token_order() {
    let mut h = Builder::new();
    let (first, second, third) = late_writer(&mut h, ok(Value::StoreAccepted));
    let report = check_with(&h, all_three(first, second, third));
    let anomaly = the(&report, "register_out_of_token_order");
    assert_eq!(anomaly.ops, vec![second, third]);
    // The register's own order: version 3 after version 2, whatever the answers' times said.
    assert!(anomaly.message.contains("version 3 (token 5, a)"));
}

#[test]
fn the_register_order_is_judged_not_the_answers_times() {
    // The answers alone look fine (b's write answered after a's), but the register says a's
    // write of the older tenure took effect after b's.
    let mut h = Builder::new();
    h.op(acquire("a", 100), 0, 10, granted(5));
    let a = h.op(register_write("a", 5), 20, 500, ok(Value::StoreAccepted));
    h.op(acquire("b", 1000), 300, 310, granted(9));
    let b = h.op(register_write("b", 9), 320, 330, ok(Value::StoreAccepted));
    let report = check_with(&h, vec![held(b, 1, "b", 9), held(a, 2, "a", 5)]);
    assert_eq!(kinds(&report), vec!["register_out_of_token_order"]);
    // In token order, the same answers are clean.
    assert_ok(&check_with(
        &h,
        vec![held(a, 1, "a", 5), held(b, 2, "b", 9)],
    ));
}

#[test]
fn a_write_answered_as_taken_that_the_register_lacks_is_lost() {
    let mut h = Builder::new();
    let (first, second, _) = late_writer(&mut h, ok(Value::StoreRejected { highest: 9 }));
    let report = check_with(&h, vec![held(first, 1, "a", 5)]);
    assert_eq!(the(&report, "register_write_lost").ops, vec![second]);
}

#[test]
fn a_write_its_writer_was_told_was_refused_must_not_be_in_the_register() {
    let mut h = Builder::new();
    let (first, second, third) = late_writer(&mut h, ok(Value::StoreRejected { highest: 9 }));
    let report = check_with(&h, all_three(first, second, third));
    assert!(report
        .of_kind("register_write_unrecorded")
        .iter()
        .any(|a| a.ops == vec![third]));
}

#[test]
fn a_write_that_failed_before_its_commit_must_not_be_in_the_register() {
    let mut h = Builder::new();
    let (first, second, third) = late_writer(&mut h, fail("postgres: connection reset"));
    let report = check_with(&h, all_three(first, second, third));
    assert!(report
        .of_kind("register_write_unrecorded")
        .iter()
        .any(|a| a.ops == vec![third]));
    assert_eq!(report.register.failed, 1);
    // Not in the register: nothing to say (the answers' check does not judge a failure).
    assert_ok(&check_with(
        &h,
        vec![held(first, 1, "a", 5), held(second, 2, "b", 9)],
    ));
}

#[test]
fn a_token_never_granted_to_the_writer_is_caught() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(5));
    let forged = h.op(register_write("a", 7), 20, 30, ok(Value::StoreAccepted));
    let report = check_with(&h, vec![held(forged, 1, "a", 7)]);
    assert_eq!(kinds(&report), vec!["register_token_not_granted"]);
}

#[test]
fn a_gap_in_the_versions_is_caught() {
    let mut h = Builder::new();
    let (first, second, _) = late_writer(&mut h, ok(Value::StoreRejected { highest: 9 }));
    let report = check_with(&h, vec![held(first, 1, "a", 5), held(second, 3, "b", 9)]);
    assert_eq!(kinds(&report), vec!["register_version_gap"]);
    // One missing version is one anomaly, not one per later write.
    let third = h.op(register_write("b", 9), 340, 350, ok(Value::StoreAccepted));
    let report = check_with(
        &h,
        vec![
            held(first, 1, "a", 5),
            held(second, 3, "b", 9),
            held(third, 4, "b", 9),
        ],
    );
    assert_eq!(kinds(&report), vec!["register_version_gap"]);
}
