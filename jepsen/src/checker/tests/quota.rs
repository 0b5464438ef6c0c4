//! Quota refusals: legal only while the principal could hold as many leases (waits) as the
//! limit, on the clients' answers alone or on the cluster's record; the lease model sees a
//! quota refusal as a no-op. Each history has one anomaly, or none.

use super::*;
use crate::history::EventKind::{Acquired, Reclaimed};
use crate::history::QuotaSettings;

const OTHER: &str = "other";
const THIRD: &str = "third";

fn on(resource: &str, mut call: Call) -> Call {
    match &mut call {
        Call::Acquire { resource: r, .. }
        | Call::Release { resource: r, .. }
        | Call::Read { resource: r, .. } => *r = resource.to_owned(),
        _ => unreachable!("not used here"),
    }
    call
}

fn quota_exceeded(quota: &str, limit: u64) -> Outcome {
    Outcome::QuotaExceeded {
        quota: quota.into(),
        limit,
    }
}

fn released(token: u64) -> Outcome {
    ok(Value::Released { token })
}

/// A read at the applied index `revision` that saw `holder` with `token`.
fn read_at(holder: &str, token: u64, revision: u64) -> Outcome {
    let held = Held {
        holder: holder.into(),
        token,
        mode: Mode::Exclusive,
        units: 0,
        grace: false,
    };
    ok(Value::read_at(vec![held], revision))
}

/// The end of a lease in the cluster's record (`released`, `reclaimed`), with its token.
fn ended(
    h: &mut Builder,
    resource: &str,
    revision: u64,
    kind: EventKind,
    holder: &str,
    token: u64,
) {
    h.event(resource, revision, kind, holder);
    if let Some(last) = h.events.get_mut(resource).and_then(|e| e.last_mut()) {
        last.token = token;
    }
}

/// The check of `h` with the quotas the run set.
fn check_with(h: &Builder, limits: &[(&str, u64)]) -> CheckReport {
    let mut history = h.history();
    history.quotas = Some(QuotaSettings {
        principal: "jepsen-client".into(),
        limits: limits.iter().map(|(q, l)| (q.to_string(), *l)).collect(),
    });
    check(&history, &CheckParams::for_history(&history))
}

/// a holds `res` (token 2) and b holds `other` (token 3) when c is refused for its 2 leases;
/// a's release returns while c's call runs: it may have come after the refusal.
fn two_held() -> (Builder, u64) {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.op(on(OTHER, acquire("b", 5000)), 5, 15, granted(3));
    let refused = h.op(
        on(THIRD, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 2),
    );
    h.op(release("a", 2), 22, 28, released(2));
    (h, refused)
}

#[test]
fn a_quota_refusal_while_the_limit_is_really_full_passes() {
    let (h, _) = two_held();
    let report = check_with(&h, &[("leases", 2)]);
    assert_ok(&report);
    assert_eq!(report.quota.refusals.get("leases"), Some(&1));
    assert_eq!(report.quota.checked, 1);
}

#[test]
fn a_quota_refusal_while_fewer_leases_could_be_held_is_reported() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    // a's release returned before c asked: a's lease is gone by then.
    h.op(release("a", 2), 11, 15, released(2));
    h.op(on(OTHER, acquire("b", 5000)), 5, 15, granted(3));
    let refused = h.op(
        on(THIRD, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 2),
    );
    let report = check_with(&h, &[("leases", 2)]);
    let a = the(&report, "quota_refused_below_limit");
    assert_eq!(a.ops, vec![refused]);
    assert_eq!(a.resource, THIRD);
    assert!(
        a.message
            .contains("quota refusal while at most 1 of 2 leases could be held"),
        "{}",
        a.message
    );
    assert!(a.message.contains("other token 3 of b"), "{}", a.message);
    assert_eq!(kinds(&report), vec!["quota_refused_below_limit"]);
}

#[test]
fn a_lease_an_unanswered_acquire_may_have_made_counts_from_its_invocation() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.op(on(OTHER, acquire("b", 5000)), 25, 2025, unknown());
    h.op(
        on(THIRD, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 2),
    );
    assert_ok(&check_with(&h, &[("leases", 2)]));

    // Made after the refusal returned, it cannot have filled the quota.
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.op(on(OTHER, acquire("b", 5000)), 35, 2035, unknown());
    h.op(
        on(THIRD, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 2),
    );
    the(
        &check_with(&h, &[("leases", 2)]),
        "quota_refused_below_limit",
    );
}

/// a holds `res` (token 2); b's lease on `other` (token 3) is never released: the cluster
/// reclaims it at revision 4. c is refused for its 2 leases at 20..30.
fn b_reclaimed() -> Builder {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.event(R, 2, Acquired, "a");
    h.op(on(OTHER, acquire("b", 1000)), 5, 15, granted(3));
    h.event(OTHER, 3, Acquired, "b");
    ended(&mut h, OTHER, 4, Reclaimed, "b", 3);
    h.op(
        on(THIRD, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 2),
    );
    h
}

#[test]
fn an_expiry_counts_only_once_the_clusters_record_proves_it_before_the_refusal() {
    // Nothing shows the reclaim (revision 4) applied before c asked: b's lease may be live.
    assert_ok(&check_with(&b_reclaimed(), &[("leases", 2)]));

    // A read that returned before c asked was at revision 5: the reclaim came before.
    let mut h = b_reclaimed();
    h.op(read(1), 16, 18, read_at("a", 2, 5));
    let report = check_with(&h, &[("leases", 2)]);
    let a = the(&report, "quota_refused_below_limit");
    assert!(
        a.message.contains("at most 1 of 2 leases") && a.message.contains("res token 2 of a"),
        "{}",
        a.message
    );
    assert_eq!(kinds(&report), vec!["quota_refused_below_limit"]);
}

#[test]
fn a_lease_begun_after_the_refusals_entry_does_not_count() {
    // d's lease (revision 7) may have begun before c's refusal was decided...
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.event(R, 2, Acquired, "a");
    h.op(
        on(THIRD, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 2),
    );
    h.op(on(OTHER, acquire("d", 5000)), 25, 50, granted(7));
    h.event(OTHER, 7, Acquired, "d");
    assert_ok(&check_with(&h, &[("leases", 2)]));

    // ...unless a read made after the refusal returned was at revision 6, below it.
    h.op(read(1), 40, 45, read_at("a", 2, 6));
    the(
        &check_with(&h, &[("leases", 2)]),
        "quota_refused_below_limit",
    );
}

#[test]
fn a_waiters_refusal_needs_as_many_waits_as_its_limit() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    // b's wait lies inside its call, which ended before c asked.
    h.op(
        acquire_waiting("b", 5000, 1000),
        5,
        15,
        ok(Value::Refused {
            reason: "wait_cancelled".into(),
            holder: None,
            token: None,
            holders: vec![],
        }),
    );
    let refused = h.op(
        acquire_waiting("c", 5000, 1000),
        20,
        30,
        quota_exceeded("waiters", 1),
    );
    let report = check_with(&h, &[("leases", 2), ("waiters", 1)]);
    let a = the(&report, "quota_refused_below_limit");
    assert_eq!(a.ops, vec![refused]);
    assert!(a.message.contains("at most 0 of 1 waits"), "{}", a.message);

    // d waits meanwhile, and its wait has no known end.
    h.op(acquire_waiting("d", 5000, 3000), 18, 2018, unknown());
    let report = check_with(&h, &[("leases", 2), ("waiters", 1)]);
    assert_ok(&report);
    assert_eq!(report.quota.refusals.get("waiters"), Some(&1));
    assert_eq!(report.waits.quota_exceeded, 1);
}

#[test]
fn a_refusal_naming_another_limit_than_the_run_set_is_reported() {
    let (h, refused) = two_held();
    let report = check_with(&h, &[("leases", 1)]);
    let a = the(&report, "quota_limit_mismatch");
    assert_eq!(a.ops, vec![refused]);
    assert!(a.message.contains("limit as 2"), "{}", a.message);
    assert_eq!(kinds(&report), vec!["quota_limit_mismatch"]);
}

#[test]
fn a_quota_refusal_changes_nothing_in_the_lease_model() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    // b is refused for a quota on a's resource, and c on a free one: neither holds anything.
    h.op(acquire("b", 5000), 20, 30, quota_exceeded("leases", 1));
    h.op(
        on(OTHER, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 1),
    );
    h.op(read(1), 40, 50, read_held("a", 2));
    h.op(on(OTHER, read(1)), 40, 50, read_free());
    let list = Call::ListLeases {
        resource: R.into(),
        holder: "b".into(),
    };
    h.op(list, 60, 70, ok(Value::Leases { leases: vec![] }));
    h.op(on(OTHER, acquire("c", 5000)), 80, 90, granted(5));
    let report = check_with(&h, &[("leases", 1)]);
    assert_ok(&report);
    assert_eq!(report.quota.checked, 2);
    assert_eq!(report.grants, 2);
}

#[test]
fn a_history_without_quota_refusals_has_no_quota_numbers() {
    let (mut h, refused) = two_held();
    h.ops.retain(|op| op.id != refused);
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.quota, QuotaStats::default());
}

#[test]
fn a_lease_that_only_a_quota_refused_acquire_could_have_made_is_nonlinearizable() {
    // Were the refusal unknown, c's acquire might have made the lease the read shows.
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.op(
        on(OTHER, acquire("c", 5000)),
        20,
        30,
        quota_exceeded("leases", 1),
    );
    h.op(on(OTHER, read(1)), 40, 50, read_held("c", 3));
    let report = check_with(&h, &[("leases", 1)]);
    assert_eq!(the(&report, "nonlinearizable").resource, OTHER);
    assert_eq!(kinds(&report), vec!["nonlinearizable"]);
}
