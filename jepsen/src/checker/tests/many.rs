//! `AcquireMany` (SPEC §4.25): one call's parts on two resources, against the cluster's record.
//! Each history has one anomaly, or none.

use super::*;
use crate::history::EventKind::{Acquired, Admitted, Queued, Released, WaitTimedOut};
use crate::history::NemesisEvent;

const X: &str = "m0";
const Y: &str = "m1";

fn part(resource: &str, holder: &str, wait_ms: u64, many: u64) -> Call {
    Call::Acquire {
        resource: resource.into(),
        holder: holder.into(),
        ttl_ms: 5_000,
        mode: Mode::Exclusive,
        units: 0,
        wait_ms,
        many,
        session_id: String::new(),
        session_alive_ns: 0,
    }
}

/// b holds y (token 2); a waits for x and y together (queued at 3), and is admitted in both
/// rooms by b's release at 5.
fn admitted_together() -> Builder {
    let mut h = Builder::new();
    h.op(part(Y, "b", 0, 1), 0, 10, granted(2));
    h.op(part(X, "b", 0, 1), 0, 10, granted(2));
    h.event(X, 2, Acquired, "b");
    h.event(Y, 2, Acquired, "b");
    h.op(release("b", 2), 15, 18, ok(Value::Released { token: 2 }));
    h.event(X, 4, Released, "b");
    for resource in [X, Y] {
        h.op(part(resource, "a", 3_000, 2), 20, 300, granted(5));
        h.event(resource, 3, Queued, "a");
    }
    h.event(Y, 5, Released, "b");
    h.event(X, 5, Admitted, "a");
    h.event(Y, 5, Admitted, "a");
    h
}

#[test]
fn a_multi_wait_admitted_in_every_room_by_one_entry_passes() {
    let report = admitted_together().check();
    assert!(
        !kinds(&report).iter().any(|k| k.starts_with("multi_wait")
            || *k == "partial_grant"
            || *k == "admission_not_at_free"),
        "{:?}",
        report.anomalies
    );
    assert_eq!(report.many.calls, 2);
    assert_eq!(report.many.granted, 2);
    assert_eq!(report.many.queued, 2);
    assert_eq!(report.many.ended, 2);
}

#[test]
fn a_grant_of_some_of_the_named_resources_is_partial() {
    let mut h = Builder::new();
    h.op(part(X, "a", 0, 1), 0, 10, granted(2));
    h.op(part(Y, "a", 0, 1), 0, 10, granted(2));
    h.event(X, 2, Acquired, "a");
    let report = h.check();
    assert_eq!(the(&report, "partial_grant").resource, X);
}

#[test]
fn answers_with_different_tokens_are_partial() {
    let mut h = Builder::new();
    h.op(part(X, "a", 0, 1), 0, 10, granted(2));
    h.op(part(Y, "a", 0, 1), 0, 10, granted(3));
    h.event(X, 2, Acquired, "a");
    h.event(Y, 3, Acquired, "a");
    assert!(kinds(&h.check()).contains(&"partial_grant"));
}

#[test]
fn a_wait_that_never_ends_is_reported() {
    let mut h = admitted_together();
    h.op(part(X, "c", 3_000, 3), 30, 3_100, unknown());
    h.op(part(Y, "c", 3_000, 3), 30, 3_100, unknown());
    h.event(X, 6, Queued, "c");
    h.event(Y, 6, Queued, "c");
    h.event(Y, 9, WaitTimedOut, "c");
    let report = h.check();
    assert_eq!(the(&report, "multi_wait_unended").resource, X);
}

#[test]
fn waits_of_one_call_that_end_apart_are_split() {
    let mut h = admitted_together();
    h.op(part(X, "c", 3_000, 3), 30, 3_100, unknown());
    h.op(part(Y, "c", 3_000, 3), 30, 3_100, unknown());
    h.event(X, 6, Queued, "c");
    h.event(Y, 6, Queued, "c");
    h.event(X, 8, WaitTimedOut, "c");
    h.event(Y, 9, WaitTimedOut, "c");
    assert!(kinds(&h.check()).contains(&"multi_wait_split"));
}

#[test]
fn the_same_call_again_may_answer_the_tokens_the_holder_already_had() {
    let mut h = Builder::new();
    h.op(part(X, "a", 0, 1), 0, 10, granted(2));
    h.op(part(Y, "a", 0, 1), 0, 10, granted(2));
    h.event(X, 2, Acquired, "a");
    h.event(Y, 2, Acquired, "a");
    h.op(part(Y, "a", 0, 2), 20, 30, granted(2));
    h.op(part("m2", "a", 0, 2), 20, 30, granted(4));
    h.op(part("m2", "a", 0, 3), 15, 18, granted(4));
    h.op(part("m3", "a", 0, 3), 15, 18, granted(4));
    h.event("m2", 4, Acquired, "a");
    h.event("m3", 4, Acquired, "a");
    let report = h.check();
    assert!(
        !kinds(&report).contains(&"partial_grant"),
        "{:?}",
        report.anomalies
    );
}

/// The 30-minute fault run's case: a holds m2 from one call (token 4) and m1 from another
/// whose client gave up (token 6, as the cluster recorded); the same claims again answer
/// both, each with its own token (spec §4.25 before rules 3). `grant_at_6` is who the record
/// has granted m1 at 6, `unknown_call` whether that call is in the history.
fn answered_with_two_grants(grant_at_6: &str, unknown_call: bool) -> Builder {
    let mut h = Builder::new();
    h.op(part("m2", "a", 0, 1), 0, 10, granted(4));
    h.op(part("m0", "a", 0, 1), 0, 10, granted(4));
    h.event("m2", 4, Acquired, "a");
    h.event("m0", 4, Acquired, "a");
    if unknown_call {
        h.op(part(Y, "a", 3_000, 2), 20, 40, unknown());
        h.op(part("m3", "a", 3_000, 2), 20, 40, unknown());
    }
    h.event(Y, 6, Acquired, grant_at_6);
    h.event("m3", 6, Acquired, grant_at_6);
    h.op(part(Y, "a", 0, 3), 50, 60, granted(6));
    h.op(part("m2", "a", 0, 3), 50, 60, granted(4));
    h
}

/// Whether the call itself is judged partial (not only the cluster's record of it).
fn partial(history: &History) -> bool {
    let params = CheckParams {
        clock_epsilon: history.clock_epsilon,
        max_states_per_resource: 2_000_000,
    };
    check(history, &params)
        .anomalies
        .iter()
        .any(|a| a.kind == "partial_grant" && a.message.contains("was told granted"))
}

#[test]
fn a_lease_an_unknown_call_was_granted_counts_as_the_holders_before_rules_3() {
    let legal = answered_with_two_grants("a", true).history();
    assert!(!partial(&legal));
    // Without the call of unknown outcome, nobody could have granted a token 6 on m1.
    assert!(partial(&answered_with_two_grants("a", false).history()));
    // With it, but the record has another holder granted at 6.
    assert!(partial(&answered_with_two_grants("b", true).history()));
    // After the raise to rules 3 the same answer is partial.
    let mut raised = legal;
    raised.nemesis.push(NemesisEvent {
        kind: "upgrade".into(),
        detail: format!("{} 3", crate::nemesis::RAISED),
        start_ns: 44 * MS,
        end_ns: Some(45 * MS),
        power: None,
    });
    assert!(partial(&raised));
}

#[test]
fn a_wait_admitted_in_some_of_its_rooms_only_is_partial() {
    let mut h = admitted_together();
    h.op(part(X, "c", 3_000, 3), 30, 3_100, unknown());
    h.op(part(Y, "c", 3_000, 3), 30, 3_100, unknown());
    h.event(X, 6, Queued, "c");
    h.event(Y, 6, Queued, "c");
    h.event(X, 7, Released, "a");
    h.event(X, 7, Admitted, "c");
    h.event(Y, 9, WaitTimedOut, "c");
    assert!(kinds(&h.check()).contains(&"partial_grant"));
}
