//! The HTML page: summary tables, the anomaly list, a timeline per resource (drawn by
//! [`super::timeline`]) and a latency scatter, on one time scale with the nemesis bands and
//! leader changes behind every chart.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use super::tables::{anomaly_table, summary_tables};
use super::timeline::{legend_timeline, tenures, timeline, TimelineInput};
use super::{distinct_leaders, kind_of, Span, Summary, KINDS};
use crate::checker::CheckReport;
use crate::history::{History, Nanos, Op, Outcome};

/// Latency points drawn at most (uniformly sampled beyond; anomaly ops are always drawn).
pub(super) const MAX_POINTS: usize = 20_000;

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

pub(super) const WIDTH: f64 = 1240.0;
pub(super) const LEFT: f64 = 130.0;
const RIGHT: f64 = 16.0;
pub(super) const LANE_H: f64 = 22.0;
const LABEL_ROW_H: f64 = 13.0;
pub(super) const AXIS_H: f64 = 20.0;
const MAX_LABEL_ROWS: usize = 3;
pub(super) const ANOMALY_RED: &str = "#e03131";

/// Maps harness time to x.
pub(super) struct Scale {
    pub(super) span: Span,
}

impl Scale {
    pub(super) fn plot_w() -> f64 {
        WIDTH - LEFT - RIGHT
    }

    pub(super) fn x(&self, ns: Nanos) -> f64 {
        let d = (self.span.t1 - self.span.t0).max(1) as f64;
        let frac = (ns.clamp(self.span.t0, self.span.t1) - self.span.t0) as f64 / d;
        LEFT + frac * Self::plot_w()
    }

    /// A "nice" tick step in seconds for about ten ticks.
    fn tick_step(&self) -> f64 {
        let d = self.span.duration_s().max(1e-3);
        let steps = [
            0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
            60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
        ];
        steps
            .iter()
            .copied()
            .find(|s| d / s <= 12.0)
            .unwrap_or(86400.0)
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        let step = self.tick_step();
        let d = self.span.duration_s();
        let mut out = Vec::new();
        let mut i = 0u64;
        loop {
            let t = i as f64 * step;
            if t > d + 1e-9 {
                break;
            }
            let x = LEFT + if d > 0.0 { t / d } else { 0.0 } * Self::plot_w();
            let label = if step < 1.0 {
                format!("{t:.3}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_string()
            } else {
                format!("{t:.0}")
            };
            out.push((x, format!("{label}s")));
            i += 1;
        }
        out
    }
}

pub(super) fn nemesis_color(kind: &str) -> &'static str {
    match kind {
        "partition" => "#7048e8",
        "kill" => "#495057",
        "pause" => "#1971c2",
        "clock" => "#0b7285",
        "loss" => "#a0522d",
        "member" => "#2b8a3e",
        _ => "#868e96",
    }
}

/// Where each nemesis label goes: `(row, x0, x1)` per event (row `None`: not labelled), shared by
/// every chart so the bands line up.
pub(super) struct Bands {
    placed: Vec<(Option<usize>, f64, f64)>,
    rows: usize,
}

impl Bands {
    fn layout(history: &History, scale: &Scale) -> Bands {
        let mut order: Vec<usize> = (0..history.nemesis.len()).collect();
        order.sort_by_key(|&i| history.nemesis[i].start_ns);
        let mut row_end: Vec<f64> = Vec::new();
        let mut placed = vec![(None, 0.0, 0.0); history.nemesis.len()];
        for i in order {
            let event = &history.nemesis[i];
            let x0 = scale.x(event.start_ns);
            let x1 = event.end_ns.map(|e| scale.x(e)).unwrap_or(x0);
            let label_w = 6.2 * event.kind.chars().count() as f64 + 4.0;
            let row =
                (0..MAX_LABEL_ROWS).find(|&r| !matches!(row_end.get(r), Some(&end) if end >= x0));
            if let Some(r) = row {
                if r == row_end.len() {
                    row_end.push(0.0);
                }
                row_end[r] = x0 + label_w;
            }
            placed[i] = (row, x0, x1);
        }
        Bands {
            placed,
            rows: row_end.len(),
        }
    }

    pub(super) fn strip_h(&self) -> f64 {
        self.rows as f64 * LABEL_ROW_H + if self.rows > 0 { 3.0 } else { 0.0 }
    }

    /// Bands (and labels in the strip above `top`) over `[top, bottom]`.
    pub(super) fn draw(
        &self,
        out: &mut String,
        history: &History,
        span: Span,
        top: f64,
        bottom: f64,
    ) {
        for (event, &(row, x0, x1)) in history.nemesis.iter().zip(&self.placed) {
            let color = nemesis_color(&event.kind);
            let until = match event.end_ns {
                Some(end) => format!(
                    "{:.3}s to {:.3}s",
                    span.secs(event.start_ns),
                    span.secs(end)
                ),
                None => format!("at {:.3}s", span.secs(event.start_ns)),
            };
            let title = esc(&format!("{}: {} ({until})", event.kind, event.detail));
            if event.end_ns.is_some() {
                w!(
                    out,
                    r#"<rect class="band" x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{color}" fill-opacity="0.13"><title>{title}</title></rect>"#,
                    (x1 - x0).max(1.5),
                    bottom - top
                );
            } else {
                w!(
                    out,
                    r#"<line class="band" x1="{x0:.1}" x2="{x0:.1}" y1="{top:.1}" y2="{bottom:.1}" stroke="{color}" stroke-width="1.5" stroke-dasharray="4,3"><title>{title}</title></line>"#
                );
            }
            if let Some(r) = row {
                let y = top - self.strip_h() + (r as f64 + 1.0) * LABEL_ROW_H - 2.0;
                w!(
                    out,
                    r#"<text class="nem-label" x="{:.1}" y="{y:.1}" fill="{color}">{}<title>{title}</title></text>"#,
                    x0 + 1.0,
                    esc(&event.kind)
                );
            }
        }
    }
}

pub(super) fn draw_leaders(
    out: &mut String,
    leaders: &[(Nanos, u64, u64)],
    scale: &Scale,
    top: f64,
    bottom: f64,
) {
    for &(at, node, term) in leaders {
        let x = scale.x(at);
        w!(
            out,
            r##"<line class="leader" x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}" stroke="#343a40" stroke-width="0.8" stroke-opacity="0.55"><title>leader n{node}, term {term} at {:.3}s</title></line>"##,
            scale.span.secs(at)
        );
    }
}

pub(super) fn draw_time_axis(out: &mut String, scale: &Scale, top: f64, bottom: f64) {
    for (x, label) in scale.ticks() {
        w!(
            out,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}" stroke="#dee2e6" stroke-width="0.6"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            bottom + 13.0
        );
    }
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

fn scatter(
    out: &mut String,
    history: &History,
    check: &CheckReport,
    scale: &Scale,
    bands: &Bands,
    leaders: &[(Nanos, u64, u64)],
    anomalous: &HashMap<u64, Vec<usize>>,
) {
    const PLOT_H: f64 = 300.0;
    let span = scale.span;
    let mut ops: Vec<&Op> = history.ops.iter().collect();
    ops.sort_by_key(|op| (op.invoke_ns, op.id));
    let total = ops.len();
    let stride = total.div_ceil(MAX_POINTS).max(1);
    let shown: Vec<&Op> = ops
        .iter()
        .enumerate()
        .filter(|(i, op)| i % stride == 0 || anomalous.contains_key(&op.id))
        .map(|(_, op)| *op)
        .collect();
    let ms = |op: &Op| op.complete_ns.saturating_sub(op.invoke_ns) as f64 / 1e6;
    let positive = shown.iter().map(|op| ms(op)).filter(|m| *m > 0.0);
    let lo = positive.clone().fold(f64::INFINITY, f64::min);
    let hi = positive.fold(0.0, f64::max);
    let (lo_dec, hi_dec) = if lo.is_finite() && hi > 0.0 {
        let l = lo.max(1e-3).log10().floor() as i32;
        let h = hi.log10().ceil() as i32;
        (l, h.max(l + 1))
    } else {
        (-1, 3)
    };

    out.push_str("<div class=\"legend\">");
    for kind in KINDS {
        w!(
            out,
            "<svg width=\"10\" height=\"10\"><circle class=\"k-{kind}\" cx=\"5\" cy=\"5\" r=\"3.5\"/></svg>{kind}"
        );
    }
    out.push_str("<svg width=\"10\" height=\"10\"><circle class=\"k-write u\" cx=\"5\" cy=\"5\" r=\"3.5\"/></svg>unknown outcome (hollow)");
    out.push_str("<svg width=\"10\" height=\"10\"><rect class=\"k-write\" x=\"1.5\" y=\"1.5\" width=\"7\" height=\"7\"/></svg>fail (square)");
    w!(out, "<svg width=\"12\" height=\"12\"><circle cx=\"6\" cy=\"6\" r=\"4.5\" fill=\"none\" stroke=\"{ANOMALY_RED}\" stroke-width=\"2\"/></svg>op in an anomaly");
    if stride > 1 {
        w!(out, " <span class=muted>· showing {} of {total} ops (1 in {stride}, plus every anomaly op)</span>", shown.len());
    }
    out.push_str("</div>\n");

    let top = bands.strip_h() + 4.0;
    let bottom = top + PLOT_H;
    let height = bottom + AXIS_H + 4.0;
    w!(
        out,
        "<svg class=\"latency\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    w!(
        out,
        r##"<rect x="{LEFT}" y="{top:.1}" width="{:.1}" height="{PLOT_H}" fill="#fcfcfd" stroke="#dee2e6"/>"##,
        Scale::plot_w()
    );
    let y_of = |m: f64| {
        let l = m.max(10f64.powi(lo_dec)).log10();
        let frac = (l - lo_dec as f64) / (hi_dec - lo_dec) as f64;
        bottom - frac.clamp(0.0, 1.0) * PLOT_H
    };
    for d in lo_dec..=hi_dec {
        let m = 10f64.powi(d);
        let y = y_of(m);
        let label = if m >= 1000.0 {
            format!("{}s", m / 1000.0)
        } else if m >= 1.0 {
            format!("{m}ms")
        } else {
            format!("{}ms", format!("{m:.3}").trim_end_matches('0'))
        };
        w!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e9ecef"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 3.5
        );
    }
    w!(
        out,
        r##"<text class="tick" x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">latency (log)</text>"##,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0
    );
    draw_time_axis(out, scale, top, bottom);
    bands.draw(out, history, span, top, bottom);
    draw_leaders(out, leaders, scale, top, bottom);
    let mut red = String::new();
    for op in &shown {
        let x = scale.x(op.invoke_ns);
        let y = y_of(ms(op));
        let kind = kind_of(&op.call);
        match op.outcome {
            Outcome::Ok { .. } => w!(
                out,
                r#"<circle class="k-{kind}" cx="{x:.1}" cy="{y:.1}" r="2"/>"#
            ),
            Outcome::Fail { .. } | Outcome::QuotaExceeded { .. } => w!(
                out,
                r#"<rect class="k-{kind}" x="{:.1}" y="{:.1}" width="4" height="4"/>"#,
                x - 2.0,
                y - 2.0
            ),
            Outcome::Unknown { .. } => w!(
                out,
                r#"<circle class="k-{kind} u" cx="{x:.1}" cy="{y:.1}" r="3"/>"#
            ),
        }
        if let Some(ids) = anomalous.get(&op.id) {
            w!(
                red,
                r#"<g class="anomaly" data-op="{}"><title>{}</title><circle cx="{x:.1}" cy="{y:.1}" r="6" fill="{ANOMALY_RED}" fill-opacity="0.2" stroke="{ANOMALY_RED}" stroke-width="2"/></g>"#,
                op.id,
                anomaly_title(op, ids, check, span)
            );
        }
    }
    out.push_str(&red);
    out.push_str("</svg>\n");
}
