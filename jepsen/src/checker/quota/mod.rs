//! Quotas per principal (docs/operations.md, "Quotas"): a refusal for a quota is a legal answer
//! only when the quota is really full.
//!
//! * `quota_refused_below_limit`: a call refused for the `leases` (`waiters`) quota with limit
//!   `n` needs a moment inside the call at which the principal could have held `n` live leases
//!   (queued waits), or more than `n − k` for an `AcquireMany` of `k` resources. The checker
//!   counts, for each such refusal, what may have been held then — a sound upper bound, over
//!   every holder of the run (the clients share one principal; counting others' too only
//!   raises the bound) — and reports the refusal when that plus what the call asked for (1, or
//!   `k`) is at most `n`;
//! * `quota_limit_mismatch`: a refusal names another limit than the one the run set before its
//!   clients started (every later decision of the cluster holds them to it).
//!
//! The bound. The refusal was decided by one log entry, `Q`, proposed after the call's
//! invocation and applied before its answer (a retry with the same request id gets the kept
//! answer of that entry). So an index the history shows applied before the invocation — a
//! grant's token, a transfer's new token, a read's revision, a revision a watcher was sent —
//! is below `Q`; and an index a call invoked after the answer created or read at — a transfer's
//! new token, a linearizable read's revision — is above (at least, for a read) `Q`. From the
//! cluster's record of a resource (its history, read after the run, when retention cannot have
//! dropped any of it) every lease is an interval of entries: from its `acquired`, `admitted` or
//! `transferred` event to its `released`, `reclaimed` or `transferred` event (every wait: from
//! `queued` to `admitted`, `wait_timed_out` or `wait_cancelled`). A lease counts unless it
//! ended at an index below `Q` or began at one above it, as far as those indexes prove.
//! Without a complete record, the clients' answers alone: a granted (holder, token) counts from
//! the invocation of the first call that may have created it until an answer proves it gone (a
//! release or transfer of it that returned, a renew, release or transfer refused because it is
//! not live, a read or listing invoked after it was granted that does not show it); an acquire
//! (transfer) with an unknown outcome may have created a lease that nothing proves gone, and
//! counts from its invocation on. A `WAIT` acquire's wait lies inside the call when the call
//! was answered, and runs on from its invocation when it was not. Expiry alone ends nothing
//! here: the lease clock stops while there is no leader, so no real-time bound on an expiry
//! holds; the reclaim the cluster recorded does.

mod holdings;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::model::{at, describe_op};
use super::Anomaly;
use crate::history::{Call, History, Nanos, Op, Outcome, Value};
use holdings::{holdings, Holding, Kind};

/// Holdings listed in an anomaly's message, at most.
const LISTED: usize = 12;

/// The quota refusals of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QuotaStats {
    /// Refusals for a quota, by quota.
    pub refusals: BTreeMap<String, usize>,
    /// Of those, the refusals for `leases` or `waiters`, each judged against what the
    /// principal could hold during the call.
    pub checked: usize,
}

impl QuotaStats {
    pub fn total(&self) -> usize {
        self.refusals.values().sum()
    }
}

/// What the history proves about where the log was in real time.
struct Revealed {
    /// `(t, i)`: entry `i` had been applied by `t`; by `t`, ascending, `i` a running maximum.
    applied: Vec<(Nanos, u64)>,
    /// `(t, i)`: every entry applied before `t` is at or below `i`; by `t`, ascending, `i` a
    /// running minimum from the end.
    bounded: Vec<(Nanos, u64)>,
}

impl Revealed {
    fn of(history: &History) -> Self {
        let mut applied: Vec<(Nanos, u64)> = Vec::new();
        let mut bounded: Vec<(Nanos, u64)> = Vec::new();
        for op in &history.ops {
            let Outcome::Ok { value } = &op.outcome else {
                continue;
            };
            match (&op.call, value) {
                (_, Value::Granted { token, .. }) => applied.push((op.complete_ns, *token)),
                // A transfer's new token is the index of its own entry, proposed after the
                // call was made.
                (_, Value::Transferred { token, .. }) => {
                    applied.push((op.complete_ns, *token));
                    bounded.push((op.invoke_ns, token.saturating_sub(1)));
                }
                // A linearizable read's revision is at least every index committed before the
                // read began.
                (Call::Read { .. }, Value::Read { revision, .. }) if *revision > 0 => {
                    applied.push((op.complete_ns, *revision));
                    bounded.push((op.invoke_ns, *revision));
                }
                _ => {}
            }
        }
        for session in &history.watches {
            for message in &session.messages {
                let newest = message.events.iter().map(|e| e.revision).max();
                applied.push((message.at_ns, message.revision.max(newest.unwrap_or(0))));
            }
        }
        applied.sort_unstable();
        let mut highest = 0;
        for entry in &mut applied {
            highest = highest.max(entry.1);
            entry.1 = highest;
        }
        bounded.sort_unstable();
        let mut lowest = u64::MAX;
        for entry in bounded.iter_mut().rev() {
            lowest = lowest.min(entry.1);
            entry.1 = lowest;
        }
        Revealed { applied, bounded }
    }

    /// The highest index the history shows applied before `t` (0: none).
    fn applied_before(&self, t: Nanos) -> u64 {
        let n = self.applied.partition_point(|&(at, _)| at < t);
        n.checked_sub(1).map_or(0, |k| self.applied[k].1)
    }

    /// An index at or above every entry applied by `t` (MAX: none known).
    fn bound_after(&self, t: Nanos) -> u64 {
        let n = self.bounded.partition_point(|&(at, _)| at <= t);
        self.bounded.get(n).map_or(u64::MAX, |&(_, i)| i)
    }
}

fn anomaly(kind: &str, op: &Op, message: String) -> Anomaly {
    Anomaly {
        kind: kind.into(),
        resource: op.call.resource().to_owned(),
        message,
        ops: vec![op.id],
    }
}

/// The quota anomalies of `history`, and its quota refusals.
pub(crate) fn check(history: &History, t0: Nanos) -> (Vec<Anomaly>, QuotaStats) {
    let mut stats = QuotaStats::default();
    let refusals: Vec<(&Op, &str, u64)> = history
        .ops
        .iter()
        .filter_map(|op| match &op.outcome {
            Outcome::QuotaExceeded { quota, limit } => Some((op, quota.as_str(), *limit)),
            _ => None,
        })
        .collect();
    if refusals.is_empty() {
        return (Vec::new(), stats);
    }
    let revealed = Revealed::of(history);
    let holdings = holdings(history);
    // An `AcquireMany` needs a lease (a wait) for every resource it names, all at once.
    let mut parts: HashMap<u64, u64> = HashMap::new();
    for op in &history.ops {
        if let Call::Acquire { many, .. } = &op.call {
            if *many != 0 {
                *parts.entry(*many).or_default() += 1;
            }
        }
    }
    let set = history.quotas.as_ref().map(|q| &q.limits);
    let mut out = Vec::new();
    for (op, quota, limit) in refusals {
        *stats.refusals.entry(quota.to_owned()).or_default() += 1;
        if let Some(&expected) = set.and_then(|limits| limits.get(quota)) {
            if expected != limit {
                out.push(anomaly(
                    "quota_limit_mismatch",
                    op,
                    format!(
                        "a refusal names the {quota} quota's limit as {limit}, but the run set it to {expected} before the clients started: {}",
                        describe_op(op, t0)
                    ),
                ));
            }
        }
        let Some(kind) = Kind::of(quota) else {
            continue;
        };
        stats.checked += 1;
        let applied = revealed.applied_before(op.invoke_ns);
        let bound = revealed.bound_after(op.complete_ns);
        let held: Vec<&Holding> = holdings
            .iter()
            .filter(|h| h.kind == kind)
            .filter(|h| h.may_be_held((op.invoke_ns, op.complete_ns), applied, bound))
            .collect();
        let needs = match &op.call {
            Call::Acquire { many, .. } if *many != 0 => parts.get(many).copied().unwrap_or(1),
            _ => 1,
        };
        if held.len() as u64 + needs > limit {
            continue;
        }
        let what = match kind {
            Kind::Lease => "leases",
            Kind::Wait => "waits",
        };
        let mut listed: Vec<String> = held.iter().take(LISTED).map(|h| h.describe()).collect();
        if held.len() > LISTED {
            listed.push(format!("… +{}", held.len() - LISTED));
        }
        let bound = match bound {
            u64::MAX => "none known".to_owned(),
            b => b.to_string(),
        };
        out.push(anomaly(
            "quota_refused_below_limit",
            op,
            format!(
                "quota refusal while at most {} of {limit} {what} could be held{}: {} (decided by an entry above {applied} and at or below {bound}; the call ran {}..{}); could be held: {}",
                held.len(),
                match needs {
                    1 => String::new(),
                    n => format!(" (an AcquireMany needing {n})"),
                },
                describe_op(op, t0),
                at(op.invoke_ns, t0),
                at(op.complete_ns, t0),
                if listed.is_empty() {
                    "nothing".to_owned()
                } else {
                    listed.join(", ")
                }
            ),
        ));
    }
    (out, stats)
}
