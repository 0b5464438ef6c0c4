//! What a person reads at a glance after a run: a [`Summary`] (also written as `summary.json`),
//! a few terminal lines ([`text`]) and one self-contained HTML page ([`html`](fn@html)) with a
//! timeline of tenures per resource and a latency scatter, nemesis windows and leader changes
//! drawn behind both, and every op an anomaly names marked in red.
//!
//! A run's history and its check are only useful if someone can see at once whether the run
//! passed and, if not, where it went wrong; this module turns them into that. `summary` holds
//! the numbers ([`summarize`]); this file [`write_all`] and the small helpers the outputs share;
//! `text` writes the terminal lines, `html` lays out the page, `chart` the time scale, nemesis
//! bands and leader lines every chart shares, `scatter` the latency scatter, `tables` the page's
//! tables (summary, policies, anomalies) and `timeline` the tenures of one resource (co-holders
//! of shared leases in lanes of their own, transfers as arrows).

use std::collections::HashSet;
use std::path::Path;

use crate::checker::CheckReport;
use crate::history::{Call, History, Nanos};

/// `write!` into a `String`, which cannot fail.
macro_rules! w {
    ($dst:expr, $($arg:tt)*) => {{
        let _ = write!($dst, $($arg)*);
    }};
}

mod chart;
mod html;
mod scatter;
mod summary;
mod tables;
mod tenures;
#[cfg(test)]
mod tests;
mod text;
mod timeline;

pub use html::html;
pub use summary::{summarize, CallStats, Calls, GrantsByKind, Latency, Summary};
pub use text::text;
use text::{counts, fmt_ms, op_list};

/// The call kinds, in the order they are shown.
const KINDS: [&str; 12] = [
    "acquire",
    "renew",
    "release",
    "transfer",
    "validate",
    "read",
    "list",
    "cancel_wait",
    "create_session",
    "renew_session",
    "close_session",
    "write",
];

fn kind_of(call: &Call) -> &'static str {
    call.name()
}

/// The time frame of a run: its start and its last event.
#[derive(Clone, Copy, Debug)]
struct Span {
    t0: Nanos,
    t1: Nanos,
}

impl Span {
    fn of(history: &History) -> Span {
        let firsts = history
            .ops
            .iter()
            .map(|op| op.invoke_ns)
            .chain(history.nemesis.iter().map(|e| e.start_ns))
            .chain(history.leaders.iter().map(|l| l.0));
        let first = firsts.min();
        let t0 = match (history.started_ns, first) {
            (0, Some(first)) => first,
            (0, None) => 0,
            (started, Some(first)) => started.min(first),
            (started, None) => started,
        };
        let lasts = history
            .ops
            .iter()
            .map(|op| op.complete_ns.max(op.invoke_ns))
            .chain(
                history
                    .nemesis
                    .iter()
                    .map(|e| e.end_ns.unwrap_or(e.start_ns).max(e.start_ns)),
            )
            .chain(history.leaders.iter().map(|l| l.0));
        let t1 = lasts.max().unwrap_or(t0).max(t0);
        Span { t0, t1 }
    }

    fn secs(&self, ns: Nanos) -> f64 {
        ns.saturating_sub(self.t0) as f64 / 1e9
    }

    fn duration_s(&self) -> f64 {
        self.secs(self.t1)
    }
}

/// Distinct `(node, term)` leaders in order of first sight.
fn distinct_leaders(history: &History) -> Vec<(Nanos, u64, u64)> {
    let mut leaders = history.leaders.clone();
    leaders.sort_by_key(|l| l.0);
    let mut seen = HashSet::new();
    leaders.retain(|&(_, node, term)| seen.insert((node, term)));
    leaders
}

/// `yes`, `no`, or `undecided` when a search ran out of budget without finding a violation.
fn linearizable_word(s: &Summary) -> &'static str {
    if s.linearizable {
        "yes"
    } else if !s.anomalies.contains_key("nonlinearizable") && !s.search_exhausted.is_empty() {
        "undecided"
    } else {
        "no"
    }
}

/// Writes `summary.json` and `report.html` into `dir`; returns the summary.
pub fn write_all(dir: &Path, history: &History, check: &CheckReport) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(dir)?;
    let summary = summarize(history, check);
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    std::fs::write(dir.join("report.html"), html(history, check, &summary))?;
    Ok(summary)
}
