//! The numbers of a run and of its check: a [`Summary`], also written as `summary.json`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::{distinct_leaders, kind_of, Span, KINDS};
use crate::checker::{CheckReport, QuotaStats, WaitStats, WatchStats};
use crate::history::{Call, History, Outcome, QuotaSettings, ResourcePolicy, Value};

/// Latency of the `Ok` ops of one call kind, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Outcomes of one call kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CallStats {
    pub ok: usize,
    pub fail: usize,
    /// Refused for a quota (not counted in `fail`).
    pub quota_exceeded: usize,
    pub unknown: usize,
    /// Over `Ok` ops only; `None` when there were none.
    pub latency: Option<Latency>,
}

impl CallStats {
    pub fn total(&self) -> usize {
        self.ok + self.fail + self.quota_exceeded + self.unknown
    }
}

/// Outcomes per call kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Calls {
    pub acquire: CallStats,
    pub renew: CallStats,
    pub release: CallStats,
    pub transfer: CallStats,
    pub validate: CallStats,
    pub read: CallStats,
    pub list: CallStats,
    pub cancel_wait: CallStats,
    pub create_session: CallStats,
    pub renew_session: CallStats,
    pub close_session: CallStats,
    pub write: CallStats,
}

impl Calls {
    /// `(kind, stats)` in display order.
    pub fn iter(&self) -> [(&'static str, &CallStats); 12] {
        [
            ("acquire", &self.acquire),
            ("renew", &self.renew),
            ("release", &self.release),
            ("transfer", &self.transfer),
            ("validate", &self.validate),
            ("read", &self.read),
            ("list", &self.list),
            ("cancel_wait", &self.cancel_wait),
            ("create_session", &self.create_session),
            ("renew_session", &self.renew_session),
            ("close_session", &self.close_session),
            ("write", &self.write),
        ]
    }

    fn get_mut(&mut self, kind: &str) -> &mut CallStats {
        match kind {
            "acquire" => &mut self.acquire,
            "renew" => &mut self.renew,
            "release" => &mut self.release,
            "transfer" => &mut self.transfer,
            "validate" => &mut self.validate,
            "read" => &mut self.read,
            "list" => &mut self.list,
            "cancel_wait" => &mut self.cancel_wait,
            "create_session" => &mut self.create_session,
            "renew_session" => &mut self.renew_session,
            "close_session" => &mut self.close_session,
            _ => &mut self.write,
        }
    }
}

/// Fresh grants by kind: distinct `(resource, token)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GrantsByKind {
    /// Exclusive leases granted by an acquire.
    pub exclusive: usize,
    /// READ or WRITE leases granted by an acquire.
    pub shared: usize,
    /// Leases a transfer handed to a new holder.
    pub transfer: usize,
}

/// The numbers of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub nodes: u64,
    pub nemeses: Vec<String>,
    pub clock_epsilon: f64,
    /// From the run's start (or first event) to its last event.
    pub duration_s: f64,
    pub ops: usize,
    pub ok: usize,
    pub fail: usize,
    /// Refused for a quota (not counted in `fail`).
    pub quota_exceeded: usize,
    pub unknown: usize,
    /// Ops (of any outcome) per second.
    pub throughput_ops_per_s: f64,
    /// `Ok` ops per second.
    pub ok_per_s: f64,
    pub calls: Calls,
    /// Fresh grants: distinct `(resource, token)` over `Ok Granted` acquires (idempotent repeats
    /// of the same lease count once) and successful transfers.
    pub grants: usize,
    pub grants_by_kind: GrantsByKind,
    /// Registered resources and their policies (others are ad hoc).
    pub resources: BTreeMap<String, ResourcePolicy>,
    /// The quotas the clients ran under (None: they called as an admin).
    pub quotas: Option<QuotaSettings>,
    /// The refusals for a quota, by quota, and how many were checked.
    pub quota: QuotaStats,
    /// Grants never released successfully: their tenure ended by expiry (reclaims are not
    /// observed directly), including any still live when the run stopped.
    pub tenures_ended_by_expiry: usize,
    /// Distinct `(node, term)` leaders observed, minus the first.
    pub leader_changes: usize,
    pub nemesis_events: BTreeMap<String, usize>,
    /// What the power cuts did, all together.
    pub power: PowerTotals,
    pub anomalies: BTreeMap<String, usize>,
    pub anomaly_count: usize,
    pub resources_checked: usize,
    pub ops_checked: usize,
    pub linearizable: bool,
    pub search_exhausted: Vec<String>,
    /// `WAIT` acquires and what they came to.
    pub waits: WaitStats,
    /// The `AcquireMany` calls (SPEC §4.25).
    pub many: crate::checker::ManyStats,
    /// The sessions (SPEC §4.24).
    pub sessions: crate::checker::SessionStats,
    /// The `fenced` workload's register in PostgreSQL.
    pub register: crate::checker::RegisterStats,
    /// The watchers and what they were sent.
    pub watch: WatchStats,
    pub pass: bool,
    /// `PASS` or `FAIL: <why>`.
    pub verdict: String,
}

fn latency(micros: &[u64]) -> Option<Latency> {
    if micros.is_empty() {
        return None;
    }
    let mut hist =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 24 * 3_600_000_000, 3).ok()?;
    for &us in micros {
        hist.saturating_record(us);
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Some(Latency {
        count: hist.len(),
        p50_ms: ms(hist.value_at_quantile(0.50)),
        p99_ms: ms(hist.value_at_quantile(0.99)),
        max_ms: ms(hist.max()),
    })
}

/// `(passed, "PASS" | "FAIL: <why>")`.
fn verdict(check: &CheckReport) -> (bool, String) {
    if check.ok() {
        return (true, "PASS".to_string());
    }
    let mut why = Vec::new();
    if !check.anomalies.is_empty() {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for anomaly in &check.anomalies {
            *kinds.entry(anomaly.kind.as_str()).or_default() += 1;
        }
        let kinds: Vec<String> = kinds
            .iter()
            .map(|(kind, n)| {
                if *n == 1 {
                    kind.to_string()
                } else {
                    format!("{kind} x{n}")
                }
            })
            .collect();
        let n = check.anomalies.len();
        why.push(format!(
            "{n} anomal{} ({})",
            if n == 1 { "y" } else { "ies" },
            kinds.join(", ")
        ));
    }
    let named = check.anomalies.iter().any(|a| a.kind == "nonlinearizable");
    if !check.linearizable && !named && check.search_exhausted.is_empty() {
        why.push("not linearizable".to_string());
    }
    if !check.search_exhausted.is_empty() {
        why.push(format!(
            "undecided, search exhausted on {}",
            check.search_exhausted.join(", ")
        ));
    }
    if why.is_empty() {
        why.push("the checker did not pass the history".to_string());
    }
    (false, format!("FAIL: {}", why.join("; ")))
}

/// `(resource, token)`.
type LeaseKey<'a> = (&'a str, u64);

/// `(resource, token)` of every fresh grant (with its kind), and of every lease that ended by
/// a successful release or transfer.
fn grants_and_releases(
    history: &History,
) -> (BTreeMap<LeaseKey<'_>, &'static str>, HashSet<LeaseKey<'_>>) {
    let mut grants = BTreeMap::new();
    let mut released = HashSet::new();
    for op in &history.ops {
        match (&op.call, &op.outcome) {
            (
                Call::Acquire { resource, mode, .. },
                Outcome::Ok {
                    value: Value::Granted { token, .. },
                },
            ) => {
                let kind = if mode.is_exclusive() {
                    "exclusive"
                } else {
                    "shared"
                };
                grants.entry((resource.as_str(), *token)).or_insert(kind);
            }
            (
                Call::Transfer {
                    resource, token, ..
                },
                Outcome::Ok {
                    value: Value::Transferred { token: new, .. },
                },
            ) => {
                grants.insert((resource.as_str(), *new), "transfer");
                released.insert((resource.as_str(), *token));
            }
            (
                Call::Release {
                    resource, token, ..
                },
                Outcome::Ok {
                    value: Value::Released { .. },
                },
            ) => {
                released.insert((resource.as_str(), *token));
            }
            _ => {}
        }
    }
    (grants, released)
}

/// The numbers of a run and of its check.
/// The power cuts of a run, added up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PowerTotals {
    pub cuts: usize,
    /// Cuts of a majority of the nodes at once.
    pub majority_cuts: usize,
    /// Cuts while a target was inside a sync.
    pub during_sync: usize,
    pub dropped_bytes: u64,
    pub kept_bytes: u64,
    pub undone: u64,
}

impl PowerTotals {
    fn of(history: &History) -> PowerTotals {
        let mut totals = PowerTotals::default();
        for cut in history.power_cuts() {
            totals.cuts += 1;
            totals.majority_cuts += usize::from(cut.majority());
            totals.during_sync += usize::from(cut.during_sync);
            totals.dropped_bytes += cut.dropped_bytes;
            totals.kept_bytes += cut.kept_bytes;
            totals.undone += cut.undone;
        }
        totals
    }
}

pub fn summarize(history: &History, check: &CheckReport) -> Summary {
    let span = Span::of(history);
    let mut calls = Calls::default();
    let mut micros: HashMap<&str, Vec<u64>> = HashMap::new();
    let (mut ok, mut fail, mut quota_exceeded, mut unknown) = (0, 0, 0, 0);
    for op in &history.ops {
        let kind = kind_of(&op.call);
        let stats = calls.get_mut(kind);
        match op.outcome {
            Outcome::Ok { .. } => {
                ok += 1;
                stats.ok += 1;
                micros
                    .entry(kind)
                    .or_default()
                    .push(op.complete_ns.saturating_sub(op.invoke_ns) / 1000);
            }
            Outcome::Fail { .. } => {
                fail += 1;
                stats.fail += 1;
            }
            Outcome::QuotaExceeded { .. } => {
                quota_exceeded += 1;
                stats.quota_exceeded += 1;
            }
            Outcome::Unknown { .. } => {
                unknown += 1;
                stats.unknown += 1;
            }
        }
    }
    for kind in KINDS {
        calls.get_mut(kind).latency = micros.get(kind).and_then(|m| latency(m));
    }
    let (grants, released) = grants_and_releases(history);
    let expired = grants.keys().filter(|g| !released.contains(*g)).count();
    let count = |kind: &str| grants.values().filter(|k| **k == kind).count();
    let grants_by_kind = GrantsByKind {
        exclusive: count("exclusive"),
        shared: count("shared"),
        transfer: count("transfer"),
    };
    let mut nemesis_events = BTreeMap::new();
    for event in &history.nemesis {
        *nemesis_events.entry(event.kind.clone()).or_default() += 1;
    }
    let mut anomalies = BTreeMap::new();
    for anomaly in &check.anomalies {
        *anomalies.entry(anomaly.kind.clone()).or_default() += 1;
    }
    let duration_s = span.duration_s();
    let per_s = |n: usize| {
        if duration_s > 0.0 {
            n as f64 / duration_s
        } else {
            0.0
        }
    };
    let (pass, verdict) = verdict(check);
    Summary {
        seed: history.seed,
        nodes: history.nodes,
        nemeses: history.nemeses.clone(),
        clock_epsilon: history.clock_epsilon,
        duration_s,
        ops: history.ops.len(),
        ok,
        fail,
        quota_exceeded,
        unknown,
        throughput_ops_per_s: per_s(history.ops.len()),
        ok_per_s: per_s(ok),
        calls,
        grants: grants.len(),
        grants_by_kind,
        resources: history.resources.clone(),
        quotas: history.quotas.clone(),
        quota: check.quota.clone(),
        tenures_ended_by_expiry: expired,
        leader_changes: distinct_leaders(history).len().saturating_sub(1),
        nemesis_events,
        power: PowerTotals::of(history),
        anomalies,
        anomaly_count: check.anomalies.len(),
        resources_checked: check.resources_checked,
        ops_checked: check.ops_checked,
        linearizable: check.linearizable,
        search_exhausted: check.search_exhausted.clone(),
        waits: check.waits.clone(),
        many: check.many.clone(),
        sessions: check.sessions.clone(),
        register: check.register.clone(),
        watch: check.watch.clone(),
        pass,
        verdict,
    }
}
