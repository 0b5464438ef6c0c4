//! The checker: an independent model of SPEC §4 (exclusive and shared leases, unit pools,
//! transfers and the renewal grace, each resource under the policy the history records) and a
//! linearizability search over it, plus cheaper invariants.
//!
//! * `model`: the per-resource state (live leases, token floor) and what each op does to it.
//! * `linear`: a Wing–Gong search with Lowe's memoisation, per resource (P-compositionality).
//! * `invariants`: exclusive tenures never overlap others, shared ones fit the pool, tokens
//!   increase (also across transfers) and die when transferred, the fenced store keeps its word.
//! * `waiting`: the waiting room on the cluster's own record (each resource's history, read
//!   after the run) and the clients' answers: FIFO admissions in the entry that frees the
//!   resource, no barging, every grant and every wait's end recorded.
//! * `watch`: what the watchers were sent is exactly that record, in order, without gap or
//!   duplicate, across reconnections; `compacted` only where retention dropped something.
//! * `quota`: a refusal for the `leases` (`waiters`) quota only where the principal could have
//!   held that many leases (waits) during the call, on that record and the clients' answers.
//!   The lease model sees a quota refusal as what it is: nothing happened.
//!
//! Time: every op carries `invoke_ns`/`complete_ns` on the harness's one monotonic clock. A lease
//! granted by an acquire invoked at `t` with `ttl` cannot expire before `t + ttl·(1−ε)`, nor be
//! reclaimed before `t + (ttl + grace)·(1−ε)` (a successful renew invoked at `t` replaces both
//! bounds, a transfer keeps them); after them, it may expire at any moment (leader changes lose
//! time), so the search considers both.

mod invariants;
mod linear;
mod many;
mod model;
mod quota;
mod register;
mod retention;
mod sessions;
pub mod sim;
mod waiting;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use tenure_proto::contract::Reason;

use crate::history::{History, Nanos, Op};
pub use many::ManyStats;
use model::{at, compile, describe_op, describe_state, Compiled, Holders, Rules};
pub use quota::QuotaStats;
pub use register::RegisterStats;
pub use sessions::SessionStats;
pub use waiting::WaitStats;
pub use watch::WatchStats;

/// Reasons that prove the lease a call named is not the live one (SPEC §3.2).
const NOT_LIVE_REASONS: [Reason; 3] = [
    Reason::StaleFencingToken,
    Reason::LeaseExpired,
    Reason::LeaseNotFound,
];

/// Whether a recorded refusal proves that the lease its call named is not live.
fn proves_not_live(reason: &str) -> bool {
    reason
        .parse()
        .is_ok_and(|reason| NOT_LIVE_REASONS.contains(&reason))
}

/// Knobs of [`check`].
#[derive(Clone, Debug)]
pub struct CheckParams {
    /// Bound of the clock-rate error (0.02 = 2 %): a lease lasts at least `ttl·(1−ε)`.
    pub clock_epsilon: f64,
    /// Search budget per resource: configurations (linearized ops, model state) explored, after
    /// memoisation and dominance pruning (each keeps ~100 bytes, plus 4 per unknown op in use).
    pub max_states_per_resource: usize,
}

impl CheckParams {
    /// ε from the history, the default budget.
    pub fn for_history(history: &History) -> Self {
        CheckParams {
            clock_epsilon: history.clock_epsilon,
            ..CheckParams::default()
        }
    }
}

impl Default for CheckParams {
    fn default() -> Self {
        CheckParams {
            clock_epsilon: 0.01,
            max_states_per_resource: 2_000_000,
        }
    }
}

/// What the checker found.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub anomalies: Vec<Anomaly>,
    /// Distinct resources in the history.
    pub resources_checked: usize,
    /// Ops the lease model or the fenced-store check looked at (failures that prove nothing,
    /// and reads/validates that got no answer, are not counted).
    pub ops_checked: usize,
    /// Distinct tenures granted: (resource, holder, token) of `Granted` answers and of
    /// successful transfers (to the new holder).
    pub grants: usize,
    /// Every resource's search finished and found a linearization.
    pub linearizable: bool,
    /// Resources whose search hit `max_states_per_resource` (undecided).
    pub search_exhausted: Vec<String>,
    /// The waits and the waiting-room checks.
    pub waits: WaitStats,
    /// The `AcquireMany` calls and their checks.
    pub many: ManyStats,
    /// The sessions and their checks.
    pub sessions: SessionStats,
    /// The watchers and the watch checks.
    pub watch: WatchStats,
    /// The refusals for a quota and the quota checks.
    pub quota: QuotaStats,
    /// The `fenced` workload's register in PostgreSQL and its checks.
    pub register: RegisterStats,
}

impl CheckReport {
    /// No anomaly, and every search finished.
    pub fn ok(&self) -> bool {
        self.anomalies.is_empty() && self.search_exhausted.is_empty()
    }

    /// Anomalies of one kind.
    pub fn of_kind(&self, kind: &str) -> Vec<&Anomaly> {
        self.anomalies.iter().filter(|a| a.kind == kind).collect()
    }
}

/// One violation, with the ops that show it.
#[derive(Debug, Clone, Serialize)]
pub struct Anomaly {
    /// `nonlinearizable`, `overlapping_tenures`, `units_oversubscribed`, `token_not_increasing`,
    /// `transfer_token_not_higher`, `stale_token_accepted`, `stale_write_accepted`,
    /// `fresh_write_rejected`, `unexpected_value`; the waiting room's `fifo_violated`,
    /// `barging`, `admission_not_at_free`, `grant_unrecorded`, `wait_end_unrecorded`,
    /// `cancel_revision_wrong`; `AcquireMany`'s `partial_grant`, `multi_wait_unended`,
    /// `multi_wait_split`; the sessions' `session_ended_early`, `session_revived`,
    /// `session_split`, `session_end_unrecorded`, `outlived_session`; the
    /// watches' `watch_gap`, `watch_duplicate`, `watch_out_of_order`, `watch_unknown_event`,
    /// `watch_dishonest_compaction`; the quotas' `quota_refused_below_limit`,
    /// `quota_limit_mismatch`; the `fenced` register's `register_out_of_token_order`,
    /// `register_version_gap`, `register_write_unrecorded`, `register_write_lost`,
    /// `register_token_not_granted`; `node_would_not_start` (after a power cut).
    pub kind: String,
    pub resource: String,
    pub message: String,
    /// Offending op ids, ascending.
    pub ops: Vec<u64>,
}

/// Check a history: per resource, the linearizability search and the invariants.
pub fn check(history: &History, params: &CheckParams) -> CheckReport {
    let eps = if params.clock_epsilon.is_finite() {
        params.clock_epsilon.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let first_invoke = history.ops.iter().map(|op| op.invoke_ns).min().unwrap_or(0);
    let t0 = if history.started_ns > 0 && history.started_ns <= first_invoke {
        history.started_ns
    } else {
        first_invoke
    };

    let by_resource = by_resource(history);

    let mut report = CheckReport {
        anomalies: Vec::new(),
        resources_checked: by_resource.len(),
        ops_checked: 0,
        grants: 0,
        linearizable: true,
        search_exhausted: Vec::new(),
        waits: WaitStats::default(),
        many: ManyStats::default(),
        sessions: SessionStats::default(),
        watch: WatchStats::default(),
        quota: QuotaStats::default(),
        register: RegisterStats::default(),
    };

    for (resource, mut ops) in by_resource {
        ops.sort_by_key(|op| (op.invoke_ns, op.id));
        let policy = history.resources.get(resource).cloned().unwrap_or_default();
        let rules = Rules::of(&policy);

        // The lease model.
        let mut holders = Holders::default();
        let mut sops = Vec::new();
        for (src, op) in ops.iter().enumerate() {
            match compile(op, resource, eps, &policy, &mut holders) {
                Compiled::Model { op: mop, required } => {
                    sops.push(linear::SOp::new(src, op, mop, required))
                }
                Compiled::Write => report.ops_checked += 1,
                Compiled::Ignored => {}
                Compiled::Unexpected(what) => report.anomalies.push(Anomaly {
                    kind: "unexpected_value".into(),
                    resource: resource.to_owned(),
                    message: format!("{what}: {}", describe_op(op, t0)),
                    ops: vec![op.id],
                }),
            }
        }
        report.ops_checked += sops.len();
        let outcome = if rules.fits(holders.len()) {
            linear::search(&sops, rules, params.max_states_per_resource)
        } else {
            // More co-holders than the model holds: undecided rather than a false anomaly.
            linear::Outcome::Exhausted
        };
        match outcome {
            linear::Outcome::Linearizable => {}
            linear::Outcome::Exhausted => {
                report.linearizable = false;
                report.search_exhausted.push(resource.to_owned());
            }
            linear::Outcome::NotLinearizable(evidence) => {
                report.linearizable = false;
                report.anomalies.push(nonlinearizable(
                    resource, &ops, &sops, &evidence, &holders, t0,
                ));
            }
        }

        // The invariants.
        let tenures = invariants::tenures(&ops, eps, &policy);
        report.grants += tenures.len();
        let found = [
            invariants::overlapping_tenures(resource, &tenures, t0),
            invariants::units_oversubscribed(resource, &tenures, &policy, t0),
            invariants::token_not_increasing(resource, &tenures, t0),
            invariants::transfer_token_not_higher(resource, &ops, t0),
            invariants::stale_token_accepted(resource, &ops, t0),
            invariants::fenced_store(resource, &ops, t0),
        ];
        report.anomalies.extend(found.into_iter().flatten());
    }
    let (found, waits) = waiting::check(history, t0);
    report.anomalies.extend(found);
    report.waits = waits;
    let (found, many) = many::check(history, t0);
    report.anomalies.extend(found);
    report.many = many;
    let (found, sessions) = sessions::check(history, eps, t0);
    report.anomalies.extend(found);
    report.sessions = sessions;
    let (found, watch) = watch::check(history, t0);
    report.anomalies.extend(found);
    report.watch = watch;
    let (found, quota) = quota::check(history, t0);
    report.anomalies.extend(found);
    report.quota = quota;
    let (found, register) = register::check(history, t0);
    report.anomalies.extend(found);
    report.register = register;
    // A node that does not come back after a power cut is a failure of its own, whatever
    // the clients saw meanwhile.
    report.anomalies.extend(
        history
            .nemesis
            .iter()
            .filter(|e| e.kind == crate::nemesis::START_FAILED)
            .map(|e| Anomaly {
                kind: "node_would_not_start".into(),
                resource: String::new(),
                message: e.detail.clone(),
                ops: Vec::new(),
            }),
    );
    for anomaly in &mut report.anomalies {
        anomaly.ops.sort_unstable();
        anomaly.ops.dedup();
    }
    report
}

/// The ops of each resource. A session's renewals and its close concern every resource its
/// holder (the session's own, in the harness) acquired: they join those resources' ops.
fn by_resource(history: &History) -> BTreeMap<&str, Vec<&Op>> {
    let mut by_resource: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    let mut on_sessions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for op in history.ops.iter().filter(|op| !op.call.is_session()) {
        by_resource.entry(op.call.resource()).or_default().push(op);
        if let (Some(holder), Some(_)) = (op.call.holder(), op.call.session_id()) {
            on_sessions
                .entry(holder)
                .or_default()
                .insert(op.call.resource());
        }
    }
    for op in history.ops.iter().filter(|op| op.call.is_session()) {
        let resources = op.call.holder().and_then(|h| on_sessions.get(h));
        for resource in resources.into_iter().flatten() {
            by_resource.entry(resource).or_default().push(op);
        }
    }
    by_resource
}

fn nonlinearizable(
    resource: &str,
    ops: &[&Op],
    sops: &[linear::SOp],
    evidence: &linear::Evidence,
    holders: &Holders,
    t0: Nanos,
) -> Anomaly {
    let op_of = |i: usize| ops[sops[i].src];
    let mut message = format!(
        "no linearization of {} ops: after {} of them",
        evidence.total_required, evidence.linearized
    );
    if !evidence.path_tail.is_empty() {
        let tail: Vec<String> = evidence
            .path_tail
            .iter()
            .map(|&i| describe_op(op_of(i), t0))
            .collect();
        message.push_str(&format!(" (the last: {})", tail.join("; ")));
    }
    message.push_str(&format!(
        ", the model is {}",
        describe_state(&evidence.state, holders, t0)
    ));
    if evidence.state.may_expire_by(evidence.min_return) {
        message.push_str(" or expired");
    }
    let stuck: Vec<String> = evidence
        .stuck
        .iter()
        .map(|&i| describe_op(op_of(i), t0))
        .collect();
    message.push_str(&format!(
        ", and none of these can come next (one must take effect by {}): {}",
        at(evidence.min_return, t0),
        stuck.join("; ")
    ));
    let mut ids: BTreeSet<u64> = evidence.stuck.iter().map(|&i| op_of(i).id).collect();
    // The op that put the model in this state is part of the evidence (e.g. the release a stale
    // read contradicts).
    if let Some(&last) = evidence.path_tail.last() {
        ids.insert(op_of(last).id);
    }
    Anomaly {
        kind: "nonlinearizable".into(),
        resource: resource.to_owned(),
        message,
        ops: ids.into_iter().collect(),
    }
}
