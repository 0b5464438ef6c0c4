//! The HTML page: summary tables, the anomaly list, a timeline per resource (drawn by
//! [`super::timeline`]) and a latency scatter (drawn by [`super::scatter`]), on one time scale
//! ([`super::chart`]) with the nemesis bands and leader changes behind every chart.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use super::chart::{Bands, Scale};
use super::scatter::scatter;
use super::tables::{anomaly_table, summary_tables};
use super::timeline::{legend_timeline, tenures, timeline, TimelineInput};
use super::{distinct_leaders, Span, Summary};
use crate::checker::CheckReport;
use crate::history::{History, Op, Outcome};

/// Escapes text for HTML/SVG content and attribute values.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One line about an op, for tooltips.
pub(super) fn describe(op: &Op, span: Span) -> String {
    let outcome = match &op.outcome {
        Outcome::Ok { value } => format!("ok, {}", value.describe()),
        Outcome::Fail { reason } => format!("fail: {reason}"),
        Outcome::QuotaExceeded { quota, limit } => format!("refused: quota {quota} ({limit})"),
        Outcome::Unknown { error } => format!("unknown: {error}"),
    };
    format!(
        "op {} (p{}): {} on {}; {:.3}s..{:.3}s ({:.1}ms); {outcome}",
        op.id,
        op.process,
        op.call.describe(),
        op.call.resource(),
        span.secs(op.invoke_ns),
        span.secs(op.complete_ns),
        op.complete_ns.saturating_sub(op.invoke_ns) as f64 / 1e6
    )
}

const CSS: &str = r#"
body{font:13px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:18px 22px;color:#212529;background:#fff}
h1{font-size:20px;margin:0 0 10px}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #dee2e6;padding-bottom:3px}
h3{font-size:14px;margin:14px 0 2px}h3 .sub{font-weight:normal;color:#868e96;font-size:12px;margin-left:8px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:2px 10px 2px 0;text-align:left;vertical-align:top;border-bottom:1px solid #f1f3f5}
th{color:#868e96;font-weight:500}td.n{text-align:right}
.cols{display:flex;gap:36px;flex-wrap:wrap;align-items:flex-start}
.verdict{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;font-weight:600;font-size:15px}
.pass{background:#2b8a3e}.fail{background:#c92a2a}
.red{color:#c92a2a;font-weight:600}.muted{color:#868e96}
.legend{margin:4px 0 8px;color:#495057;font-size:12px}.legend svg{display:inline-block;vertical-align:middle;margin:0 3px 0 12px}
svg{display:block}svg text{font:11px system-ui,sans-serif}
text.tick{fill:#868e96;font-size:10px}text.lane{fill:#495057}text.nem-label{font-size:10.5px;font-weight:600}
text.tok{fill:#fff;font-size:9.5px;pointer-events:none}
.k-acquire{fill:#1c7ed6;stroke:#1c7ed6}.k-renew{fill:#37b24d;stroke:#37b24d}.k-release{fill:#ae3ec9;stroke:#ae3ec9}
.k-validate{fill:#f59f00;stroke:#f59f00}.k-read{fill:#15aabf;stroke:#15aabf}.k-write{fill:#495057;stroke:#495057}
.k-transfer{fill:#d6336c;stroke:#d6336c}.k-list{fill:#74b816;stroke:#74b816}
.k-cancel_wait{fill:#f76707;stroke:#f76707}
.k-create_session,.k-renew_session,.k-close_session{fill:#0b7285;stroke:#0b7285}
circle.u{fill:none;stroke-width:1}
details{margin:2px 0}summary{cursor:pointer}code{font-size:12px}
"#;

pub(super) fn resource_id(index: usize) -> String {
    format!("res-{index}")
}

/// One self-contained HTML page: summary, anomalies, a timeline per resource, a latency scatter.
pub fn html(history: &History, check: &CheckReport, summary: &Summary) -> String {
    let span = Span::of(history);
    let scale = Scale { span };
    let bands = Bands::layout(history, &scale);
    let leaders = distinct_leaders(history);
    let ops_by_id: HashMap<u64, &Op> = history.ops.iter().map(|op| (op.id, op)).collect();

    // Anomalous ops: id -> the anomalies naming it.
    let mut anomalous: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, anomaly) in check.anomalies.iter().enumerate() {
        for &id in &anomaly.ops {
            anomalous.entry(id).or_default().push(i);
        }
    }
    let tenures = tenures(history, span);

    // Resources, those with anomalies first.
    let mut resources: BTreeSet<&str> = history.ops.iter().map(|op| op.call.resource()).collect();
    let mut anomalies_of: HashMap<&str, BTreeSet<usize>> = HashMap::new();
    for (i, anomaly) in check.anomalies.iter().enumerate() {
        resources.insert(anomaly.resource.as_str());
        anomalies_of
            .entry(anomaly.resource.as_str())
            .or_default()
            .insert(i);
        for id in &anomaly.ops {
            if let Some(op) = ops_by_id.get(id) {
                anomalies_of
                    .entry(op.call.resource())
                    .or_default()
                    .insert(i);
            }
        }
    }
    let mut resources: Vec<&str> = resources.into_iter().collect();
    resources.sort_by_key(|r| {
        (
            std::cmp::Reverse(anomalies_of.get(r).map_or(0, |a| a.len())),
            *r,
        )
    });
    let index_of: HashMap<&str, usize> =
        resources.iter().enumerate().map(|(i, r)| (*r, i)).collect();

    let mut out = String::with_capacity(64 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    w!(
        out,
        "<title>Tenure jepsen: seed {} - {}</title>",
        summary.seed,
        esc(&summary.verdict)
    );
    w!(out, "<style>{CSS}</style></head><body>\n");
    w!(
        out,
        "<h1>Tenure fault-injection run, seed {}</h1>\n",
        summary.seed
    );
    w!(
        out,
        "<div class=\"verdict {}\">{}</div>\n",
        if summary.pass { "pass" } else { "fail" },
        esc(&summary.verdict)
    );

    summary_tables(&mut out, summary);
    anomaly_table(&mut out, check, span, &ops_by_id, &index_of);

    // Timelines.
    out.push_str("<h2>Tenures per resource</h2>\n");
    legend_timeline(&mut out);
    for (index, resource) in resources.iter().enumerate() {
        let empty = Vec::new();
        let list = tenures.get(*resource).unwrap_or(&empty);
        timeline(
            &mut out,
            TimelineInput {
                history,
                resource,
                index,
                tenures: list,
                anomalous: &anomalous,
                check,
                scale: &scale,
                bands: &bands,
                leaders: &leaders,
                anomaly_count: anomalies_of.get(resource).map_or(0, |a| a.len()),
            },
        );
    }

    // Latency scatter.
    out.push_str("<h2>Latency over time</h2>\n");
    scatter(
        &mut out, history, check, &scale, &bands, &leaders, &anomalous,
    );
    out.push_str("</body></html>\n");
    out
}

pub(super) fn anomaly_title(op: &Op, ids: &[usize], check: &CheckReport, span: Span) -> String {
    let mut t = describe(op, span);
    for &i in ids {
        if let Some(a) = check.anomalies.get(i) {
            w!(t, "\nANOMALY {} [{}]: {}", a.kind, a.resource, a.message);
        }
    }
    esc(&t)
}
