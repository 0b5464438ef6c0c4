//! Invariants cheaper than the linearizability search, each on the ops of one resource:
//!
//! * `overlapping_tenures`: tenures of different holders never overlap in real time;
//! * `token_not_increasing`: tokens are unique per resource and increase in real-time order;
//! * `stale_write_accepted` / `fresh_write_rejected`: the simulated fenced store.
//!
//! A tenure is built from the ops with a definite outcome only: it runs from the first return
//! of a grant of (holder, token) to the earliest of a release's invocation and a sound lower
//! bound of the lease's expiry (the last successful renew's invocation + ttl·(1−ε), or the
//! grant's). Ops with an unknown outcome only ever shorten a tenure (an unknown acquire may have
//! been the grant that created it; an unknown renew may have shortened it), so that nothing
//! that may legally have happened is reported.

use std::collections::BTreeMap;

use super::model::{at, describe_op, ttl_floor_ns};
use super::Anomaly;
use crate::history::{Call, Nanos, Op, Outcome, Value};

/// One holder's unbroken ownership, as far as the definite outcomes show it.
#[derive(Clone, Debug)]
pub(crate) struct Tenure<'a> {
    pub holder: &'a str,
    pub token: u64,
    /// The `Granted` answers of this (holder, token), by invocation.
    pub grants: Vec<&'a Op>,
    /// First return of a grant.
    pub start: Nanos,
    /// Earliest invocation of an op that may have created the lease.
    pub created_by: Nanos,
    /// The tenure is over from here on (release invoked or the lease may have expired).
    pub end: Nanos,
    /// The op that fixed `end` (a release or a renew), if not the grant itself.
    pub ended_by: Option<u64>,
}

fn granted(op: &Op) -> Option<(&str, u64, u64)> {
    match (&op.call, &op.outcome) {
        (
            Call::Acquire { holder, ttl_ms, .. },
            Outcome::Ok {
                value: Value::Granted { token, .. },
            },
        ) => Some((holder.as_str(), *token, *ttl_ms)),
        _ => None,
    }
}

/// The tenures of one resource's ops, sorted by start.
pub(crate) fn tenures<'a>(ops: &[&'a Op], eps: f64) -> Vec<Tenure<'a>> {
    let mut groups: BTreeMap<(&str, u64), Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some((holder, token, _)) = granted(op) {
            groups.entry((holder, token)).or_default().push(op);
        }
    }
    // Ops that may have created each lease: its Granted answers, and any acquire of the same
    // holder with an unknown outcome invoked before the first answer.
    struct Found<'a> {
        holder: &'a str,
        token: u64,
        grants: Vec<&'a Op>,
        start: Nanos,
        creators: Vec<&'a Op>,
        created_by: Nanos,
    }
    let mut found: Vec<Found<'a>> = Vec::with_capacity(groups.len());
    for ((holder, token), mut grants) in groups {
        grants.sort_by_key(|op| (op.invoke_ns, op.id));
        let start = grants
            .iter()
            .map(|op| op.complete_ns)
            .min()
            .unwrap_or(Nanos::MAX);
        let creators: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|op| match (&op.call, &op.outcome) {
                (Call::Acquire { holder: h, .. }, Outcome::Unknown { .. }) => {
                    h == holder && op.invoke_ns < start
                }
                _ => granted(op).is_some_and(|g| g.0 == holder && g.1 == token),
            })
            .collect();
        let created_by = creators
            .iter()
            .map(|op| op.invoke_ns)
            .min()
            .unwrap_or(start);
        found.push(Found {
            holder,
            token,
            grants,
            start,
            creators,
            created_by,
        });
    }
    let mut out = Vec::with_capacity(found.len());
    for f in &found {
        let Found {
            holder,
            token,
            start,
            created_by,
            ..
        } = *f;
        let grants = f.grants.clone();
        // The entry that created this lease has index `token`: it was appended after every
        // entry with a lower index, so after the creating call of every lower token was made.
        let after = found
            .iter()
            .filter(|g| g.token < token)
            .map(|g| g.created_by)
            .max()
            .unwrap_or(0);
        let mut deadline = Nanos::MAX;
        for op in &f.creators {
            if let Call::Acquire { ttl_ms, .. } = op.call {
                deadline = deadline.min(
                    op.invoke_ns
                        .max(after)
                        .saturating_add(ttl_floor_ns(ttl_ms, eps)),
                );
            }
        }
        let mut ended_by = None;

        // Renews and releases of this lease.
        let mine = |op: &&&Op| match &op.call {
            Call::Renew {
                holder: h,
                token: t,
                ..
            }
            | Call::Release {
                holder: h,
                token: t,
                ..
            } => h == holder && *t == token,
            _ => false,
        };
        let renews_ok: Vec<&Op> = ops
            .iter()
            .filter(mine)
            .filter(|op| {
                matches!(op.call, Call::Renew { .. })
                    && matches!(
                        op.outcome,
                        Outcome::Ok {
                            value: Value::Renewed { .. }
                        }
                    )
            })
            .copied()
            .collect();
        if let Some(last_invoke) = renews_ok.iter().map(|op| op.invoke_ns).max() {
            // A renew replaces the expiry; of the renews that may have been applied last, take
            // the one giving the earliest bound.
            deadline = Nanos::MAX;
            for op in renews_ok.iter().filter(|op| op.complete_ns >= last_invoke) {
                if let Call::Renew { ttl_ms, .. } = op.call {
                    let bound = op.invoke_ns.saturating_add(ttl_floor_ns(ttl_ms, eps));
                    if bound < deadline {
                        deadline = bound;
                        ended_by = Some(op.id);
                    }
                }
            }
        }
        let mut end = deadline;
        for op in ops.iter().filter(mine) {
            match (&op.call, &op.outcome) {
                // An unknown renew may be applied late and shorten the lease.
                (Call::Renew { ttl_ms, .. }, Outcome::Unknown { .. }) => {
                    let bound = op.invoke_ns.saturating_add(ttl_floor_ns(*ttl_ms, eps));
                    if bound < end {
                        end = bound;
                        ended_by = Some(op.id);
                    }
                }
                // The holder gives the lease up when it asks to release it.
                (Call::Release { .. }, _) if op.invoke_ns < end => {
                    end = op.invoke_ns;
                    ended_by = Some(op.id);
                }
                _ => {}
            }
        }
        out.push(Tenure {
            holder,
            token,
            grants,
            start,
            created_by,
            end,
            ended_by,
        });
    }
    out.sort_by_key(|t| (t.start, t.token));
    out
}

/// Tenures of different holders on one resource never overlap.
pub(crate) fn overlapping_tenures(
    resource: &str,
    tenures: &[Tenure<'_>],
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let live: Vec<&Tenure<'_>> = tenures.iter().filter(|t| t.end > t.start).collect();
    for (i, a) in live.iter().enumerate() {
        for b in live[i + 1..].iter().take_while(|b| b.start < a.end) {
            if a.holder == b.holder {
                continue;
            }
            let mut ops: Vec<u64> = vec![a.grants[0].id, b.grants[0].id];
            ops.extend(a.ended_by);
            ops.sort_unstable();
            ops.dedup();
            out.push(Anomaly {
                kind: "overlapping_tenures".into(),
                resource: resource.to_owned(),
                message: format!(
                    "{}'s tenure (token {}) runs [{}, {}) and {}'s (token {}) begins at {} inside it: {} and {}",
                    a.holder,
                    a.token,
                    at(a.start, t0),
                    at(a.end, t0),
                    b.holder,
                    b.token,
                    at(b.start, t0),
                    describe_op(a.grants[0], t0),
                    describe_op(b.grants[0], t0),
                ),
                ops,
            });
        }
    }
    out
}

/// Tokens are unique per resource, and a grant that returned before another was invoked has a
/// lower token.
pub(crate) fn token_not_increasing(
    resource: &str,
    tenures: &[Tenure<'_>],
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let mut by_token: BTreeMap<u64, Vec<&Tenure<'_>>> = BTreeMap::new();
    for t in tenures {
        by_token.entry(t.token).or_default().push(t);
    }
    for (token, ts) in &by_token {
        if ts.len() > 1 {
            out.push(Anomaly {
                kind: "token_not_increasing".into(),
                resource: resource.to_owned(),
                message: format!(
                    "token {token} was granted to {} different holders: {}",
                    ts.len(),
                    ts.iter()
                        .map(|t| describe_op(t.grants[0], t0))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                ops: ts.iter().map(|t| t.grants[0].id).collect(),
            });
        }
    }
    // `tenures` is sorted by start (first return); prefix maxima of the token.
    let mut prefix_max: Vec<usize> = Vec::with_capacity(tenures.len());
    for (i, t) in tenures.iter().enumerate() {
        let best = match prefix_max.last() {
            Some(&j) if tenures[j].token >= t.token => j,
            _ => i,
        };
        prefix_max.push(best);
    }
    for b in tenures {
        let n = tenures.partition_point(|a| a.start < b.created_by);
        if n == 0 {
            continue;
        }
        let a = &tenures[prefix_max[n - 1]];
        if a.token > b.token {
            out.push(Anomaly {
                kind: "token_not_increasing".into(),
                resource: resource.to_owned(),
                message: format!(
                    "{} was granted token {} at {}, before {} asked, yet {} got the lower token {}: {} then {}",
                    a.holder,
                    a.token,
                    at(a.start, t0),
                    b.holder,
                    b.holder,
                    b.token,
                    describe_op(a.grants[0], t0),
                    describe_op(b.grants[0], t0),
                ),
                ops: vec![a.grants[0].id, b.grants[0].id],
            });
        }
    }
    out
}

fn write_token(op: &Op) -> Option<u64> {
    match op.call {
        Call::Write { token, .. } => Some(token),
        _ => None,
    }
}

/// The fenced store keeps the highest token it accepted and refuses lower ones.
/// * `stale_write_accepted`: accepted with token t although a write with a higher token had
///   been accepted (and returned) before this one was invoked;
/// * `fresh_write_rejected`: rejected although no write with a higher token was accepted (or
///   may have been) before this one returned, or the store's own `highest` is not higher.
pub(crate) fn fenced_store(resource: &str, ops: &[&Op], t0: Nanos) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let writes: Vec<(&Op, u64)> = ops
        .iter()
        .filter_map(|op| write_token(op).map(|t| (*op, t)))
        .collect();
    let accepted = |op: &Op| {
        matches!(
            op.outcome,
            Outcome::Ok {
                value: Value::StoreAccepted
            }
        )
    };

    // Accepted writes by completion, with prefix maxima of their tokens.
    let mut done: Vec<(&Op, u64)> = writes
        .iter()
        .copied()
        .filter(|(op, _)| accepted(op))
        .collect();
    done.sort_by_key(|(op, _)| (op.complete_ns, op.id));
    let mut best_done: Vec<usize> = Vec::with_capacity(done.len());
    for (i, (_, t)) in done.iter().enumerate() {
        let best = match best_done.last() {
            Some(&j) if done[j].1 >= *t => j,
            _ => i,
        };
        best_done.push(best);
    }
    // Writes that were (or may have been) accepted, by invocation, with prefix maxima.
    let mut maybe: Vec<(&Op, u64)> = writes
        .iter()
        .copied()
        .filter(|(op, _)| accepted(op) || matches!(op.outcome, Outcome::Unknown { .. }))
        .collect();
    maybe.sort_by_key(|(op, _)| (op.invoke_ns, op.id));
    let mut best_maybe: Vec<usize> = Vec::with_capacity(maybe.len());
    for (i, (_, t)) in maybe.iter().enumerate() {
        let best = match best_maybe.last() {
            Some(&j) if maybe[j].1 >= *t => j,
            _ => i,
        };
        best_maybe.push(best);
    }

    for &(op, token) in &writes {
        match &op.outcome {
            Outcome::Ok {
                value: Value::StoreAccepted,
            } => {
                let n = done.partition_point(|(o, _)| o.complete_ns < op.invoke_ns);
                if n > 0 {
                    let (prev, prev_token) = done[best_done[n - 1]];
                    if prev_token > token {
                        out.push(Anomaly {
                            kind: "stale_write_accepted".into(),
                            resource: resource.to_owned(),
                            message: format!(
                                "the store accepted token {token} after it had accepted token {prev_token}: {} then {}",
                                describe_op(prev, t0),
                                describe_op(op, t0)
                            ),
                            ops: vec![prev.id, op.id],
                        });
                    }
                }
            }
            Outcome::Ok {
                value: Value::StoreRejected { highest },
            } => {
                let n = maybe.partition_point(|(o, _)| o.invoke_ns < op.complete_ns);
                let higher = (n > 0)
                    .then(|| maybe[best_maybe[n - 1]])
                    .filter(|(o, t)| *t > token && o.id != op.id);
                let message = if *highest <= token {
                    Some(format!(
                        "the store rejected token {token} saying it had seen {highest}, which is not higher: {}",
                        describe_op(op, t0)
                    ))
                } else if higher.is_none() {
                    Some(format!(
                        "the store rejected token {token} (saying it had seen {highest}) though no write with a higher token was accepted before: {}",
                        describe_op(op, t0)
                    ))
                } else {
                    None
                };
                if let Some(message) = message {
                    out.push(Anomaly {
                        kind: "fresh_write_rejected".into(),
                        resource: resource.to_owned(),
                        message,
                        ops: vec![op.id],
                    });
                }
            }
            _ => {}
        }
    }
    out
}
