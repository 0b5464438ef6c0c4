//! Quotas per principal (docs/operations.md, "Quotas"): a refusal for a quota is a legal answer
//! only when the quota is really full.
//!
//! * `quota_refused_below_limit`: a call refused for the `leases` (`waiters`) quota with limit
//!   `n` needs a moment inside the call at which the principal could have held `n` live leases
//!   (queued waits). The checker counts, for each such refusal, what may have been held then —
//!   a sound upper bound, over every holder of the run (the clients share one principal;
//!   counting others' too only raises the bound) — and reports the refusal when that is below
//!   `n`;
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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::model::{at, describe_op};
use super::retention::Retention;
use super::{proves_not_live, Anomaly};
use crate::history::{Call, EventKind, History, Nanos, Op, Outcome, Value};

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

/// What a quota counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lease,
    Wait,
}

impl Kind {
    fn of(quota: &str) -> Option<Kind> {
        match quota {
            "leases" => Some(Kind::Lease),
            "waiters" => Some(Kind::Wait),
            _ => None,
        }
    }
}

/// One lease or wait the principal may have held, as far as the history shows it.
#[derive(Clone, Debug)]
struct Holding {
    kind: Kind,
    resource: String,
    holder: String,
    /// The lease's token (None: a lease an unanswered call may have made; always None for a
    /// wait).
    token: Option<u64>,
    /// The entry that began it, if known.
    from_index: Option<u64>,
    /// It cannot have begun before this instant (0: at any time).
    from_ns: Nanos,
    /// The entry that ended it, if known.
    until_index: Option<u64>,
    /// It had certainly ended by this instant (MAX: nothing shows it ended).
    until_ns: Nanos,
}

impl Holding {
    fn new(kind: Kind, resource: &str, holder: &str) -> Self {
        Holding {
            kind,
            resource: resource.to_owned(),
            holder: holder.to_owned(),
            token: None,
            from_index: None,
            from_ns: 0,
            until_index: None,
            until_ns: Nanos::MAX,
        }
    }

    /// Could it have been held by the entry that decided a refusal invoked at `invoke` and
    /// answered at `complete`, with `applied` the highest index known applied before the
    /// invocation and `bound` an index known at or above that entry?
    fn may_be_held(&self, (invoke, complete): (Nanos, Nanos), applied: u64, bound: u64) -> bool {
        let ended = self.until_index.is_some_and(|i| i <= applied) || self.until_ns < invoke;
        let later = self.from_index.is_some_and(|i| i > bound) || self.from_ns > complete;
        !ended && !later
    }

    /// `x0 token 41 of c3`, `w1 wait of c5`, `r2 lease of c1 (unknown acquire)`.
    fn describe(&self) -> String {
        match (self.kind, self.token) {
            (Kind::Lease, Some(token)) => {
                format!("{} token {token} of {}", self.resource, self.holder)
            }
            (Kind::Lease, None) => format!(
                "{} lease of {} (an unanswered call may have made it)",
                self.resource, self.holder
            ),
            (Kind::Wait, _) => format!("{} wait of {}", self.resource, self.holder),
        }
    }
}

/// The leases and waits of one resource from its complete record.
fn from_events(resource: &str, events: &[crate::history::Event]) -> Vec<Holding> {
    let mut out: Vec<Holding> = Vec::new();
    let mut leases: HashMap<u64, usize> = HashMap::new();
    let mut waits: HashMap<&str, usize> = HashMap::new();
    let begin = |out: &mut Vec<Holding>, kind, holder: &str, revision, token| {
        out.push(Holding {
            token,
            from_index: Some(revision),
            ..Holding::new(kind, resource, holder)
        });
        out.len() - 1
    };
    let end = |out: &mut Vec<Holding>, at: Option<usize>, revision| {
        if let Some(k) = at {
            out[k].until_index = Some(revision);
        }
    };
    for e in events {
        match e.kind {
            EventKind::Acquired | EventKind::Admitted => {
                if e.kind == EventKind::Admitted {
                    end(&mut out, waits.remove(e.holder.as_str()), e.revision);
                }
                let k = begin(&mut out, Kind::Lease, &e.holder, e.revision, Some(e.token));
                leases.insert(e.token, k);
            }
            EventKind::Transferred => {
                end(&mut out, leases.remove(&e.token), e.revision);
                let k = begin(
                    &mut out,
                    Kind::Lease,
                    &e.to_holder,
                    e.revision,
                    Some(e.to_token),
                );
                leases.insert(e.to_token, k);
            }
            EventKind::Released | EventKind::Reclaimed => {
                end(&mut out, leases.remove(&e.token), e.revision);
            }
            EventKind::Queued => {
                let k = begin(&mut out, Kind::Wait, &e.holder, e.revision, None);
                waits.insert(e.holder.as_str(), k);
            }
            EventKind::WaitTimedOut | EventKind::WaitCancelled => {
                end(&mut out, waits.remove(e.holder.as_str()), e.revision);
            }
            _ => {}
        }
    }
    out
}

/// (holder, token) of a lease an answer granted: an acquire's, or a transfer's new one.
fn granted(op: &Op) -> Option<(&str, u64)> {
    match (&op.call, &op.outcome) {
        (
            Call::Acquire { holder, .. },
            Outcome::Ok {
                value: Value::Granted { token, .. },
            },
        ) => Some((holder, *token)),
        (
            Call::Transfer { to_holder, .. },
            Outcome::Ok {
                value: Value::Transferred { token, .. },
            },
        ) => Some((to_holder, *token)),
        _ => None,
    }
}

/// The lease (holder, token) an answer proves gone by its return, if any.
fn ended(op: &Op) -> Option<(&str, u64)> {
    let (holder, token) = match &op.call {
        Call::Release { holder, token, .. }
        | Call::Transfer { holder, token, .. }
        | Call::Renew { holder, token, .. } => (holder.as_str(), *token),
        _ => return None,
    };
    let gone = match (&op.call, &op.outcome) {
        (Call::Release { .. }, Outcome::Ok { .. }) => true,
        (Call::Transfer { .. }, Outcome::Ok { value }) => {
            matches!(value, Value::Transferred { .. })
        }
        (_, Outcome::Fail { reason }) => proves_not_live(reason),
        _ => false,
    };
    gone.then_some((holder, token))
}

/// The leases a read or a listing shows, if it was answered.
fn shown(op: &Op) -> Option<BTreeSet<u64>> {
    match (&op.call, &op.outcome) {
        (
            Call::Read { .. },
            Outcome::Ok {
                value:
                    Value::Read {
                        holder,
                        token,
                        leases,
                        ..
                    },
            },
        ) => Some(
            Value::read_leases(holder, token, leases)
                .iter()
                .map(|l| l.token)
                .collect(),
        ),
        (
            Call::ListLeases { .. },
            Outcome::Ok {
                value: Value::Leases { leases },
            },
        ) => Some(leases.iter().map(|l| l.token).collect()),
        _ => None,
    }
}

/// The leases and waits of one resource from the clients' answers alone (`ops` by invocation).
fn from_ops(resource: &str, ops: &[&Op]) -> Vec<Holding> {
    let mut out = Vec::new();
    // Every granted (holder, token): the first answer that granted it.
    let mut grants: BTreeMap<(&str, u64), &Op> = BTreeMap::new();
    for op in ops {
        if let Some(key) = granted(op) {
            let first = grants.entry(key).or_insert(op);
            if op.complete_ns < first.complete_ns {
                *first = op;
            }
        }
    }
    for (&(holder, token), first) in &grants {
        // Made by one of its grants or by an unanswered acquire of (transfer to) the holder
        // made before the first grant returned.
        let from_ns = ops
            .iter()
            .filter(|op| match (&op.call, &op.outcome) {
                (Call::Acquire { holder: h, .. }, Outcome::Unknown { .. })
                | (Call::Transfer { to_holder: h, .. }, Outcome::Unknown { .. }) => {
                    h == holder && op.invoke_ns < first.complete_ns
                }
                _ => granted(op) == Some((holder, token)),
            })
            .map(|op| op.invoke_ns)
            .min()
            .unwrap_or(0);
        // Gone: a call on it proved so, or a read or listing of the holder made after the
        // grant returned does not show it.
        let until_ns = ops
            .iter()
            .filter(|op| {
                ended(op) == Some((holder, token))
                    || (op.invoke_ns > first.complete_ns
                        && op.call.holder().is_none_or(|h| h == holder)
                        && shown(op).is_some_and(|tokens| !tokens.contains(&token)))
            })
            .map(|op| op.complete_ns)
            .min()
            .unwrap_or(Nanos::MAX);
        out.push(Holding {
            token: Some(token),
            from_index: Some(token),
            from_ns,
            until_ns,
            ..Holding::new(Kind::Lease, resource, holder)
        });
    }
    for op in ops {
        match (&op.call, &op.outcome) {
            (Call::Acquire { holder, .. }, Outcome::Unknown { .. })
            | (
                Call::Transfer {
                    to_holder: holder, ..
                },
                Outcome::Unknown { .. },
            ) => {
                out.push(Holding {
                    from_ns: op.invoke_ns,
                    ..Holding::new(Kind::Lease, resource, holder)
                });
            }
            _ => {}
        }
        if let Call::Acquire {
            holder, wait_ms, ..
        } = &op.call
        {
            // A wait lies inside its answered call; an unanswered one may go on.
            let until_ns = match &op.outcome {
                Outcome::Ok { .. } => op.complete_ns,
                Outcome::Unknown { .. } => Nanos::MAX,
                Outcome::Fail { .. } | Outcome::QuotaExceeded { .. } => continue,
            };
            if *wait_ms > 0 {
                out.push(Holding {
                    from_ns: op.invoke_ns,
                    until_ns,
                    ..Holding::new(Kind::Wait, resource, holder)
                });
            }
        }
    }
    out
}

/// Every lease and wait of the run: from the cluster's record where it is complete, else from
/// the clients' answers.
fn holdings(history: &History) -> Vec<Holding> {
    let retention = Retention::of(history);
    let mut by_resource: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &history.ops {
        by_resource.entry(op.call.resource()).or_default().push(op);
    }
    let complete = |resource: &str| {
        history
            .events
            .get(resource)
            .filter(|events| retention.floor(events) == 0)
            .filter(|_| !history.unread.contains_key(resource))
    };
    let mut out = Vec::new();
    for (resource, events) in &history.events {
        if complete(resource).is_some() {
            out.extend(from_events(resource, events));
        }
    }
    for (resource, mut ops) in by_resource {
        if complete(resource).is_none() {
            ops.sort_by_key(|op| (op.invoke_ns, op.id));
            out.extend(from_ops(resource, &ops));
        }
    }
    out
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
        if (held.len() as u64) >= limit {
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
                "quota refusal while at most {} of {limit} {what} could be held: {} (decided by an entry above {applied} and at or below {bound}; the call ran {}..{}); could be held: {}",
                held.len(),
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
