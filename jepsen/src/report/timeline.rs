//! The timeline of one resource: its tenures (grant to release, or to the last renew + ttl),
//! one lane per holding process (co-holders of shared leases stack in their lanes; colour by
//! mode), transfers as arrows from the old holder's lane to the new one's, fenced-store writes,
//! and the ops anomalies name in red.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::chart::{
    draw_leaders, draw_time_axis, nemesis_color, Bands, Scale, ANOMALY_RED, AXIS_H, LANE_H, LEFT,
    WIDTH,
};
use super::html::{anomaly_title, describe, esc, resource_id};
use super::op_list;
pub(super) use super::tenures::tenures;
use super::tenures::{End, Tenure};
use crate::checker::CheckReport;
use crate::history::{Call, History, Mode, Nanos, Op, Outcome, Value};

/// `(solid, light, label text)` colours of a tenure bar by mode.
fn colors(mode: Mode) -> (&'static str, &'static str, &'static str) {
    match mode {
        Mode::Exclusive => ("#339af0", "#a5d8ff", "#1864ab"),
        Mode::Read => ("#37b24d", "#b2f2bb", "#2b8a3e"),
        Mode::Write => ("#f08c00", "#ffd8a8", "#d9480f"),
    }
}

const TRANSFER: &str = "#d6336c";

pub(super) fn legend_timeline(out: &mut String) {
    out.push_str("<div class=\"legend\">");
    out.push_str("<svg width=\"26\" height=\"12\"><rect x=\"1\" y=\"1\" width=\"24\" height=\"10\" fill=\"#339af0\"/></svg>exclusive tenure (grant .. release)");
    out.push_str("<svg width=\"26\" height=\"12\"><rect x=\"1\" y=\"1\" width=\"24\" height=\"10\" fill=\"#a5d8ff\" stroke=\"#339af0\" stroke-dasharray=\"3,2\"/></svg>tenure never released (.. last renew + ttl)");
    out.push_str("<svg width=\"26\" height=\"12\"><rect x=\"1\" y=\"1\" width=\"24\" height=\"10\" fill=\"#37b24d\"/></svg>read lease");
    out.push_str("<svg width=\"26\" height=\"12\"><rect x=\"1\" y=\"1\" width=\"24\" height=\"10\" fill=\"#f08c00\"/></svg>write lease (label: #token R/W units)");
    w!(out, "<svg width=\"26\" height=\"14\"><line x1=\"3\" x2=\"23\" y1=\"2\" y2=\"12\" stroke=\"{TRANSFER}\" stroke-width=\"1.5\"/><circle cx=\"23\" cy=\"12\" r=\"2\" fill=\"{TRANSFER}\"/></svg>transfer (old holder → new)");
    out.push_str("<svg width=\"8\" height=\"14\"><line x1=\"4\" x2=\"4\" y1=\"0\" y2=\"14\" stroke=\"#212529\" stroke-width=\"2\"/></svg>write accepted");
    out.push_str("<svg width=\"8\" height=\"14\"><line x1=\"4\" x2=\"4\" y1=\"0\" y2=\"14\" stroke=\"#fd7e14\" stroke-width=\"2.5\"/></svg>write rejected");
    w!(out, "<svg width=\"14\" height=\"14\"><rect x=\"2\" y=\"1\" width=\"10\" height=\"12\" fill=\"{ANOMALY_RED}\" fill-opacity=\"0.35\" stroke=\"{ANOMALY_RED}\" stroke-width=\"1.5\"/></svg>op in an anomaly");
    out.push_str("<svg width=\"8\" height=\"14\"><line x1=\"4\" x2=\"4\" y1=\"0\" y2=\"14\" stroke=\"#343a40\" stroke-opacity=\"0.55\"/></svg>leader elected");
    for kind in ["partition", "kill", "pause", "clock", "loss", "member"] {
        w!(
            out,
            "<svg width=\"18\" height=\"12\"><rect width=\"18\" height=\"12\" fill=\"{}\" fill-opacity=\"0.2\"/></svg>{kind}",
            nemesis_color(kind)
        );
    }
    out.push_str("</div>\n");
}

pub(super) struct TimelineInput<'a> {
    pub(super) history: &'a History,
    pub(super) resource: &'a str,
    pub(super) index: usize,
    pub(super) tenures: &'a [Tenure],
    pub(super) anomalous: &'a HashMap<u64, Vec<usize>>,
    pub(super) check: &'a CheckReport,
    pub(super) scale: &'a Scale,
    pub(super) bands: &'a Bands,
    pub(super) leaders: &'a [(Nanos, u64, u64)],
    pub(super) anomaly_count: usize,
}

pub(super) fn timeline(out: &mut String, input: TimelineInput<'_>) {
    let TimelineInput {
        history,
        resource,
        index,
        tenures,
        anomalous,
        check,
        scale,
        bands,
        leaders,
        anomaly_count,
    } = input;
    let span = scale.span;
    let ops: Vec<&Op> = history
        .ops
        .iter()
        .filter(|op| op.call.resource() == resource)
        .collect();
    let writes: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| matches!(op.call, Call::Write { .. }))
        .collect();
    let flagged: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| anomalous.contains_key(&op.id))
        .collect();

    // Lanes: every process that held the resource (plus writers and flagged ops' processes).
    let mut holder_of: BTreeMap<u64, String> = BTreeMap::new();
    for t in tenures {
        holder_of
            .entry(t.process)
            .or_insert_with(|| t.holder.clone());
    }
    for op in writes.iter().chain(&flagged) {
        let holder = op.call.holder().unwrap_or_default().to_owned();
        holder_of.entry(op.process).or_insert(holder);
    }
    let lanes: Vec<u64> = holder_of.keys().copied().collect();
    let lane_of: HashMap<u64, usize> = lanes.iter().enumerate().map(|(i, p)| (*p, i)).collect();

    let rejected = writes
        .iter()
        .filter(|op| {
            matches!(
                op.outcome,
                Outcome::Ok {
                    value: Value::StoreRejected { .. }
                }
            )
        })
        .count();
    let released = tenures.iter().filter(|t| t.end == End::Released).count();
    let shared = tenures.iter().filter(|t| t.mode != Mode::Exclusive).count();
    let transfers = tenures.iter().filter(|t| t.from.is_some()).count();
    let mut kinds = String::new();
    if shared > 0 {
        w!(kinds, ", {shared} shared");
    }
    if transfers > 0 {
        w!(kinds, ", {transfers} by transfer");
    }
    let policy = match history.resources.get(resource) {
        Some(p) => format!(" · {}", p.describe()),
        None => String::new(),
    };
    w!(
        out,
        "<h3 id=\"{}\">{}<span class=sub>{} tenures ({} released{}) · {} holders · {} writes ({} rejected) · {} ops{}{}</span></h3>\n",
        resource_id(index),
        esc(resource),
        tenures.len(),
        released,
        kinds,
        lanes.len(),
        writes.len(),
        rejected,
        ops.len(),
        esc(&policy),
        if anomaly_count > 0 {
            format!(" · <span class=red>{anomaly_count} anomal{}</span>", if anomaly_count == 1 { "y" } else { "ies" })
        } else {
            String::new()
        }
    );

    let top = bands.strip_h() + 2.0;
    let n_lanes = lanes.len().max(1);
    let bottom = top + n_lanes as f64 * LANE_H;
    let height = bottom + AXIS_H;
    w!(
        out,
        "<svg class=\"timeline\" data-resource=\"{}\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" xmlns=\"http://www.w3.org/2000/svg\">",
        esc(resource)
    );
    // Lane backgrounds and labels.
    for (i, p) in lanes.iter().enumerate() {
        let y = top + i as f64 * LANE_H;
        let fill = if i % 2 == 0 { "#f8f9fa" } else { "#ffffff" };
        w!(
            out,
            r#"<rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{LANE_H}" fill="{fill}"/>"#,
            Scale::plot_w()
        );
        let holder = holder_of.get(p).map(String::as_str).unwrap_or("");
        let mut label = format!("p{p} {holder}");
        if label.chars().count() > 20 {
            label = label.chars().take(19).collect::<String>() + "…";
        }
        w!(
            out,
            r#"<text class="lane" x="{:.1}" y="{:.1}" text-anchor="end">{}<title>process {p}, holder {}</title></text>"#,
            LEFT - 6.0,
            y + LANE_H / 2.0 + 4.0,
            esc(&label),
            esc(holder)
        );
    }
    if lanes.is_empty() {
        w!(
            out,
            r#"<text class="lane" x="{:.1}" y="{:.1}">no tenures, no writes</text>"#,
            LEFT + 6.0,
            top + LANE_H / 2.0 + 4.0
        );
    }
    draw_time_axis(out, scale, top, bottom);
    bands.draw(out, history, span, top, bottom);
    draw_leaders(out, leaders, scale, top, bottom);

    // Tenure bars; their token labels go on top of the write ticks.
    let mut labels = String::new();
    for t in tenures {
        let Some(&lane) = lane_of.get(&t.process) else {
            continue;
        };
        let y = top + lane as f64 * LANE_H + 5.0;
        let x0 = scale.x(t.start_ns);
        let x1 = scale.x(t.end_ns).max(x0 + 1.0);
        let flagged_ops: Vec<u64> = t
            .ops
            .iter()
            .copied()
            .filter(|id| anomalous.contains_key(id))
            .collect();
        let (solid, light, dark) = colors(t.mode);
        let ended = t.end != End::Expired;
        let style = if ended {
            format!(r#"fill="{solid}""#)
        } else {
            format!(r#"fill="{light}" stroke="{solid}" stroke-width="0.8" stroke-dasharray="3,2""#)
        };
        let stroke = if flagged_ops.is_empty() {
            String::new()
        } else {
            format!(r#" stroke="{ANOMALY_RED}" stroke-width="2""#)
        };
        let how = match t.end {
            End::Released => "released",
            End::Transferred => "transferred away",
            End::Expired => "not released (until last renew + ttl)",
        };
        let mode = match t.mode {
            Mode::Exclusive => "exclusive".to_string(),
            m => format!("{} {} units", m.name(), t.units),
        };
        let from = match t.from {
            Some(p) => format!(", handed over by p{p}"),
            None => String::new(),
        };
        let mut title = format!(
            "{resource} token {} ({mode}) held by {} (p{}{from}), lease {}: {:.3}s..{:.3}s, {how}; ops {}",
            t.token,
            t.holder,
            t.process,
            t.lease_id,
            span.secs(t.start_ns),
            span.secs(t.end_ns),
            op_list(&t.ops, 20)
        );
        if !flagged_ops.is_empty() {
            w!(title, "; in anomalies: ops {}", op_list(&flagged_ops, 20));
        }
        w!(
            out,
            r#"<rect class="tenure" x="{x0:.1}" y="{y:.1}" width="{:.1}" height="12" {style}{stroke}><title>{}</title></rect>"#,
            x1 - x0,
            esc(&title)
        );
        if let Some(&from) = t.from.and_then(|p| lane_of.get(&p)) {
            // The transfer: from the old holder's lane to the new one's.
            let y_from = top + from as f64 * LANE_H + LANE_H / 2.0;
            w!(
                out,
                r#"<line class="transfer" x1="{x0:.1}" x2="{x0:.1}" y1="{y_from:.1}" y2="{:.1}" stroke="{TRANSFER}" stroke-width="1.5"/><circle cx="{x0:.1}" cy="{:.1}" r="2.5" fill="{TRANSFER}"/>"#,
                y + 6.0,
                y + 6.0
            );
        }
        let label = match t.mode {
            Mode::Exclusive => format!("#{}", t.token),
            m => format!("#{} {}{}", t.token, m.letter(), t.units),
        };
        if x1 - x0 >= 6.0 * label.len() as f64 + 4.0 {
            let fill = if ended {
                String::new()
            } else {
                format!(r#" style="fill:{dark}""#)
            };
            w!(
                labels,
                r#"<text class="tok" x="{:.1}" y="{:.1}"{fill}>{label}</text>"#,
                x0 + 3.0,
                y + 9.5
            );
        }
    }

    // Fenced-store writes (thinner when they are too many to tell apart, so the bars show).
    let accepted_w = if writes.len() > 1500 { 0.6 } else { 1.5 };
    for op in &writes {
        let Some(&lane) = lane_of.get(&op.process) else {
            continue;
        };
        let y = top + lane as f64 * LANE_H;
        let x = scale.x(op.invoke_ns);
        let (color, width) = match &op.outcome {
            Outcome::Ok {
                value: Value::StoreAccepted,
            } => ("#212529", accepted_w),
            Outcome::Ok {
                value: Value::StoreRejected { .. },
            } => ("#fd7e14", 2.5),
            _ => ("#adb5bd", accepted_w),
        };
        w!(
            out,
            r#"<line class="write" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="{width}"><title>{}</title></line>"#,
            y + 2.0,
            y + LANE_H - 2.0,
            esc(&describe(op, span))
        );
    }

    out.push_str(&labels);

    // Ops named by anomalies, on top.
    for op in &flagged {
        let Some(&lane) = lane_of.get(&op.process) else {
            continue;
        };
        let y = top + lane as f64 * LANE_H;
        let x0 = scale.x(op.invoke_ns);
        let x1 = scale.x(op.complete_ns);
        let w = (x1 - x0).max(6.0);
        let x0 = x0.min(x1 - w / 2.0).max(LEFT - 3.0);
        let ids = anomalous.get(&op.id).map(Vec::as_slice).unwrap_or(&[]);
        let xm = x0 + w / 2.0;
        w!(
            out,
            r#"<g class="anomaly" data-op="{}"><title>{}</title><line x1="{xm:.1}" x2="{xm:.1}" y1="{top:.1}" y2="{bottom:.1}" stroke="{ANOMALY_RED}" stroke-opacity="0.45" stroke-dasharray="3,2"/><rect x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{ANOMALY_RED}" fill-opacity="0.35" stroke="{ANOMALY_RED}" stroke-width="1.5"/><path d="M{:.1},{:.1} l-4,-6 h8 z" fill="{ANOMALY_RED}"/></g>"#,
            op.id,
            anomaly_title(op, ids, check, span),
            y + 1.0,
            LANE_H - 2.0,
            x0 + w / 2.0,
            y + 7.0
        );
    }
    out.push_str("</svg>\n");
}
