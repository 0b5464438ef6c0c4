//! The page's tables: the run, its outcomes and checker verdict, the resources' policies, and
//! the anomalies.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::html::{describe, esc, resource_id};
use super::{counts, fmt_ms, linearizable_word, op_list, Span, Summary};
use crate::checker::CheckReport;
use crate::history::Op;

pub(super) fn summary_tables(out: &mut String, s: &Summary) {
    out.push_str("<div class=\"cols\">\n<table><tr><th colspan=2>Run</th></tr>");
    let nemeses = if s.nemeses.is_empty() {
        "none".to_string()
    } else {
        s.nemeses.join(", ")
    };
    let rows: Vec<(&str, String)> = vec![
        ("seed", s.seed.to_string()),
        ("nodes", s.nodes.to_string()),
        ("nemeses", nemeses),
        ("clock ε", format!("{}", s.clock_epsilon)),
        ("duration", format!("{:.1} s", s.duration_s)),
        (
            "throughput",
            format!(
                "{:.1} ops/s ({:.1} ok/s)",
                s.throughput_ops_per_s, s.ok_per_s
            ),
        ),
        ("nemesis events", counts(&s.nemesis_events)),
        ("leader changes", s.leader_changes.to_string()),
        (
            "quotas",
            match &s.quotas {
                Some(q) => format!("{}: {}", q.principal, q.describe()),
                None => "none (admin clients)".to_string(),
            },
        ),
    ];
    for (k, v) in rows {
        w!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    out.push_str("</table>\n<table><tr><th colspan=2>Outcomes</th></tr>");
    let rows: Vec<(&str, String)> = vec![
        ("ops", s.ops.to_string()),
        ("ok", s.ok.to_string()),
        ("fail", s.fail.to_string()),
        ("quota exceeded", s.quota_exceeded.to_string()),
        ("unknown", s.unknown.to_string()),
        ("grants", s.grants.to_string()),
        ("  exclusive", s.grants_by_kind.exclusive.to_string()),
        ("  shared", s.grants_by_kind.shared.to_string()),
        ("  by transfer", s.grants_by_kind.transfer.to_string()),
        ("ended by expiry", s.tenures_ended_by_expiry.to_string()),
    ];
    for (k, v) in rows {
        w!(out, "<tr><th>{}</th><td class=n>{v}</td></tr>", esc(k));
    }
    out.push_str("</table>\n<table><tr><th colspan=2>Checker</th></tr>");
    w!(
        out,
        "<tr><th>resources</th><td class=n>{}</td></tr>",
        s.resources_checked
    );
    w!(
        out,
        "<tr><th>ops checked</th><td class=n>{}</td></tr>",
        s.ops_checked
    );
    w!(
        out,
        "<tr><th>linearizable</th><td class=\"{}\">{}</td></tr>",
        if s.linearizable { "" } else { "red" },
        linearizable_word(s)
    );
    w!(
        out,
        "<tr><th>anomalies</th><td class=\"{}\">{}</td></tr>",
        if s.anomaly_count == 0 { "" } else { "red" },
        if s.anomaly_count == 0 {
            "none".to_string()
        } else {
            esc(&counts(&s.anomalies))
        }
    );
    if !s.search_exhausted.is_empty() {
        w!(
            out,
            "<tr><th>search exhausted</th><td>{}</td></tr>",
            esc(&s.search_exhausted.join(", "))
        );
    }
    out.push_str("</table>\n");
    waits_and_watches(out, s);
    out.push_str("<table><tr><th>call</th><th>ok</th><th>fail</th><th>unknown</th><th>p50</th><th>p99</th><th>max</th></tr>");
    for (kind, c) in s.calls.iter() {
        if c.total() == 0 {
            continue;
        }
        w!(
            out,
            "<tr><th><svg width=\"9\" height=\"9\" style=\"display:inline\"><rect class=\"k-{kind}\" width=\"9\" height=\"9\"/></svg> {kind}</th><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td>",
            c.ok,
            c.fail,
            c.unknown
        );
        match &c.latency {
            Some(l) => w!(
                out,
                "<td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
                fmt_ms(l.p50_ms),
                fmt_ms(l.p99_ms),
                fmt_ms(l.max_ms)
            ),
            None => out.push_str("<td class=n>-</td><td class=n>-</td><td class=n>-</td></tr>"),
        }
    }
    out.push_str("</table>\n");
    if !s.resources.is_empty() {
        out.push_str("<table><tr><th colspan=2>Registered resources</th></tr>");
        for (name, policy) in &s.resources {
            w!(
                out,
                "<tr><th>{}</th><td>{}</td></tr>",
                esc(name),
                esc(&policy.describe())
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</div>\n");
}

/// The waiting room's and the watchers' numbers, when the run had them.
fn waits_and_watches(out: &mut String, s: &Summary) {
    let (w, v) = (&s.waits, &s.watch);
    if w.waits == 0 && v.watchers == 0 {
        return;
    }
    out.push_str("<table><tr><th colspan=2>Waits and watches</th></tr>");
    let rows: [(&str, usize); 13] = [
        ("WAIT acquires", w.waits),
        ("  granted at once", w.granted_at_once),
        ("  admitted", w.admitted),
        ("  timed out", w.timed_out),
        ("  cancelled", w.cancelled),
        ("  unknown", w.unknown),
        ("  quota exceeded", w.quota_exceeded),
        ("admitted events", w.admitted_events),
        ("watchers", v.watchers),
        ("watch sessions", v.sessions),
        ("  compacted", v.compacted),
        ("events sent", v.events_delivered),
        ("events checked", v.events_checked),
    ];
    for (k, n) in rows {
        w!(out, "<tr><th>{}</th><td class=n>{n}</td></tr>", esc(k));
    }
    out.push_str("</table>\n");
}

pub(super) fn anomaly_table(
    out: &mut String,
    check: &CheckReport,
    span: Span,
    ops_by_id: &HashMap<u64, &Op>,
    index_of: &HashMap<&str, usize>,
) {
    const MAX_ROWS: usize = 500;
    if check.anomalies.is_empty() {
        return;
    }
    w!(out, "<h2>Anomalies ({})</h2>\n<table><tr><th>kind</th><th>resource</th><th>what</th><th>ops</th></tr>", check.anomalies.len());
    for anomaly in check.anomalies.iter().take(MAX_ROWS) {
        let link = match index_of.get(anomaly.resource.as_str()) {
            Some(i) => format!(
                "<a href=\"#{}\">{}</a>",
                resource_id(*i),
                esc(&anomaly.resource)
            ),
            None => esc(&anomaly.resource),
        };
        w!(
            out,
            "<tr><td class=red>{}</td><td>{link}</td><td>{}</td><td><details><summary>{}</summary>",
            esc(&anomaly.kind),
            esc(&anomaly.message),
            esc(&op_list(&anomaly.ops, 12))
        );
        for id in anomaly.ops.iter().take(50) {
            match ops_by_id.get(id) {
                Some(op) => w!(out, "<div><code>{}</code></div>", esc(&describe(op, span))),
                None => w!(out, "<div><code>op {id}: not in the history</code></div>"),
            }
        }
        out.push_str("</details></td></tr>");
    }
    out.push_str("</table>\n");
    if check.anomalies.len() > MAX_ROWS {
        w!(
            out,
            "<p class=muted>... and {} more (see the checker's output).</p>",
            check.anomalies.len() - MAX_ROWS
        );
    }
}
