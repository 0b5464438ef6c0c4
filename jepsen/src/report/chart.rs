//! What every chart of the page shares: the time scale, the nemesis bands with their labels,
//! the leader changes and the time axis.

use std::fmt::Write as _;

use super::html::esc;
use super::Span;
use crate::history::{History, Nanos};

pub(super) const WIDTH: f64 = 1240.0;
pub(super) const LEFT: f64 = 130.0;
pub(super) const RIGHT: f64 = 16.0;
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
    pub(super) fn layout(history: &History, scale: &Scale) -> Bands {
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
