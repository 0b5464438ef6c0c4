//! The terminal summary: a few lines ending with `PASS` or `FAIL: <why>`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{linearizable_word, Summary};
use crate::checker::CheckReport;

pub(super) fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{ms:.1}ms")
    }
}

pub(super) fn counts(map: &BTreeMap<String, usize>) -> String {
    if map.is_empty() {
        return "none".to_string();
    }
    map.iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn op_list(ops: &[u64], max: usize) -> String {
    let mut s: Vec<String> = ops.iter().take(max).map(|id| id.to_string()).collect();
    if ops.len() > max {
        s.push(format!("... +{}", ops.len() - max));
    }
    s.join(", ")
}

/// A compact terminal summary ending with `PASS` or `FAIL: <why>`.
pub fn text(summary: &Summary, check: &CheckReport) -> String {
    const MAX_ANOMALY_LINES: usize = 50;
    let s = summary;
    let mut out = String::new();
    let nemeses = if s.nemeses.is_empty() {
        "none".to_string()
    } else {
        s.nemeses.join(",")
    };
    let quota = |n: usize| {
        if s.quota_exceeded > 0 {
            format!(", quota {n}")
        } else {
            String::new()
        }
    };
    w!(
        out,
        "seed {} | {} nodes | nemeses {} | {:.1}s | {} ops ({:.1}/s): ok {}, fail {}{}, unknown {}\n",
        s.seed,
        s.nodes,
        nemeses,
        s.duration_s,
        s.ops,
        s.throughput_ops_per_s,
        s.ok,
        s.fail,
        quota(s.quota_exceeded),
        s.unknown
    );
    w!(
        out,
        "grants {} (exclusive {}, shared {}, by transfer {}) | ended by expiry {} | leader changes {} | nemesis events: {}\n",
        s.grants,
        s.grants_by_kind.exclusive,
        s.grants_by_kind.shared,
        s.grants_by_kind.transfer,
        s.tenures_ended_by_expiry,
        s.leader_changes,
        counts(&s.nemesis_events)
    );
    if s.power.cuts > 0 {
        let p = &s.power;
        w!(
            out,
            "power cuts {} ({} of a majority, {} during a sync): {} unsynced bytes dropped, {} kept, {} name changes undone\n",
            p.cuts,
            p.majority_cuts,
            p.during_sync,
            p.dropped_bytes,
            p.kept_bytes,
            p.undone
        );
    }
    if s.many.calls > 0 {
        let m = &s.many;
        w!(
            out,
            "acquire_many {}: granted {} ({} entries granted several rooms at once) | multi-waits queued {}, ended {}\n",
            m.calls,
            m.granted,
            m.admitted_together,
            m.queued,
            m.ended
        );
    }
    if s.register.accepted + s.register.refused + s.register.failed + s.register.unknown > 0 {
        let r = &s.register;
        w!(
            out,
            "register (PostgreSQL, fenced): writes taken {}, refused by the guard {}, failed {}, unknown {} | the register holds {}\n",
            r.accepted,
            r.refused,
            r.failed,
            r.unknown,
            r.writes
        );
    }
    if s.sessions.created > 0 {
        let x = &s.sessions;
        w!(
            out,
            "sessions {}: renewed {} times, closed {}, expired {} | leases on them {}; ends that ended several at once {}\n",
            x.created,
            x.renewals,
            x.closed,
            x.expired,
            x.leases,
            x.ended_together
        );
    }
    if s.waits.waits > 0 || s.watch.watchers > 0 {
        let (w, v) = (&s.waits, &s.watch);
        w!(
            out,
            "waits {}: granted at once {}, admitted {}, timed out {}, cancelled {}, unknown {}{} | watch: {} watchers, {} sessions ({} compacted), {} events sent, {} checked, {} unverifiable\n",
            w.waits,
            w.granted_at_once,
            w.admitted,
            w.timed_out,
            w.cancelled,
            w.unknown,
            quota(w.quota_exceeded),
            v.watchers,
            v.sessions,
            v.compacted,
            v.events_delivered,
            v.events_checked,
            v.unverifiable
        );
    }
    if s.quotas.is_some() || s.quota_exceeded > 0 {
        let set = match &s.quotas {
            Some(q) => format!("quotas of {}: {}", q.principal, q.describe()),
            None => "no quotas set".to_owned(),
        };
        w!(
            out,
            "{set} | refused for a quota: {} ({} checked against what could be held)\n",
            counts(&s.quota.refusals),
            s.quota.checked
        );
    }
    for (kind, stats) in s.calls.iter() {
        if stats.total() == 0 {
            continue;
        }
        w!(
            out,
            "  {kind:<14} ok {:>7}  fail {:>6}",
            stats.ok,
            stats.fail
        );
        if s.quota_exceeded > 0 {
            w!(out, "  quota {:>6}", stats.quota_exceeded);
        }
        w!(out, "  unknown {:>6}", stats.unknown);
        if let Some(l) = &stats.latency {
            w!(
                out,
                "  p50 {:>7}  p99 {:>7}  max {:>7}",
                fmt_ms(l.p50_ms),
                fmt_ms(l.p99_ms),
                fmt_ms(l.max_ms)
            );
        }
        out.push('\n');
    }
    w!(
        out,
        "checker: {} resources, {} ops, linearizable: {}",
        s.resources_checked,
        s.ops_checked,
        linearizable_word(s)
    );
    if !s.search_exhausted.is_empty() {
        w!(
            out,
            ", search exhausted on {}",
            s.search_exhausted.join(", ")
        );
    }
    out.push('\n');
    for anomaly in check.anomalies.iter().take(MAX_ANOMALY_LINES) {
        w!(
            out,
            "  ANOMALY {} [{}]: {} (ops {})\n",
            anomaly.kind,
            anomaly.resource,
            anomaly.message,
            op_list(&anomaly.ops, 12)
        );
    }
    if check.anomalies.len() > MAX_ANOMALY_LINES {
        w!(
            out,
            "  ... and {} more anomalies (see report.html)\n",
            check.anomalies.len() - MAX_ANOMALY_LINES
        );
    }
    out.push_str(&s.verdict);
    out.push('\n');
    out
}
