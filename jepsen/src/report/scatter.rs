//! The latency scatter: every op (sampled beyond [`MAX_POINTS`]) by its invocation and its
//! latency on a log scale, the ops anomalies name in red.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::chart::{
    draw_leaders, draw_time_axis, Bands, Scale, ANOMALY_RED, AXIS_H, LEFT, RIGHT, WIDTH,
};
use super::html::anomaly_title;
use super::{kind_of, KINDS};
use crate::checker::CheckReport;
use crate::history::{History, Nanos, Op, Outcome};

/// Latency points drawn at most (uniformly sampled beyond; anomaly ops are always drawn).
pub(super) const MAX_POINTS: usize = 20_000;

pub(super) fn scatter(
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
