//! Invariants cheaper than the linearizability search, each on the ops of one resource:
//!
//! * `overlapping_tenures`: an exclusive tenure never overlaps another holder's tenure (of any
//!   mode) in real time;
//! * `units_oversubscribed`: shared tenures that overlap in real time never hold more than the
//!   pool's `total_units` together;
//! * `token_not_increasing` (`tokens`): tokens are unique per resource and increase in
//!   real-time order (they are log indexes), exclusive tenures' and transfers' included;
//! * `transfer_token_not_higher` (`tokens`): a transfer's token is above the transferred one;
//! * `stale_token_accepted` (`tokens`): once a transfer of (holder, token) has returned, nothing
//!   accepts that token again;
//! * `stale_write_accepted` / `fresh_write_rejected` (`store`): the simulated fenced store.
//!
//! A tenure is built from the ops with a definite outcome only: it runs from the first return
//! of a grant of (holder, token) — an acquire, or a transfer to the holder — to the earliest of
//! a release's or transfer's invocation and a sound lower bound of the lease's expiry (the last
//! successful renew's invocation + ttl·(1−ε), or the grant's; a transferred lease keeps the
//! expiry of the lease it replaced). Ops with an unknown outcome only ever shorten a tenure (an
//! unknown acquire or transfer may have been the grant that created it; an unknown renew may
//! have shortened it), so that nothing that may legally have happened is reported. The renewal
//! grace is not counted: a tenure ends at the expiry, not at the reclaim.

mod store;
mod tokens;

use std::collections::{BTreeMap, HashMap};

pub(crate) use store::fenced_store;
pub(crate) use tokens::{stale_token_accepted, token_not_increasing, transfer_token_not_higher};

use super::model::{alive_since, at, describe_op, ttl_floor_ns};
use super::Anomaly;
use crate::history::{Call, Mode, Nanos, Op, Outcome, ResourcePolicy, Value};

/// One holder's unbroken ownership, as far as the definite outcomes show it.
#[derive(Clone, Debug)]
pub(crate) struct Tenure<'a> {
    pub holder: &'a str,
    pub token: u64,
    pub mode: Mode,
    /// Units drawn from the pool.
    pub units: u64,
    /// The answers that granted this (holder, token) (acquires, or the transfer), by invocation.
    pub grants: Vec<&'a Op>,
    /// First return of a grant.
    pub start: Nanos,
    /// Earliest invocation of an op that may have created the lease.
    pub created_by: Nanos,
    /// The tenure is over from here on (released, transferred, or the lease may have expired).
    pub end: Nanos,
    /// The op that fixed `end` (a release, transfer or renew), if not the grant itself.
    pub ended_by: Option<u64>,
}

/// (holder, token, mode, units) of a grant: an acquire's `Granted`, a transfer's `Transferred`.
fn granted<'a>(op: &'a Op, policy: &ResourcePolicy) -> Option<(&'a str, u64, Mode, u64)> {
    match (&op.call, &op.outcome) {
        (
            Call::Acquire {
                holder,
                mode,
                units,
                ..
            },
            Outcome::Ok {
                value: Value::Granted { token, .. },
            },
        ) => Some((
            holder.as_str(),
            *token,
            *mode,
            policy.effective_units(*mode, *units),
        )),
        (
            Call::Transfer { to_holder, .. },
            Outcome::Ok {
                value:
                    Value::Transferred {
                        token, mode, units, ..
                    },
            },
        ) => Some((to_holder.as_str(), *token, *mode, *units)),
        _ => None,
    }
}

/// The tenures of one resource's ops, sorted by start.
pub(crate) fn tenures<'a>(ops: &[&'a Op], eps: f64, policy: &ResourcePolicy) -> Vec<Tenure<'a>> {
    let mut groups: BTreeMap<(u64, &str), Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some((holder, token, _, _)) = granted(op, policy) {
            groups.entry((token, holder)).or_default().push(op);
        }
    }
    // Ops that may have created each lease: its grants, and any acquire of the holder or
    // transfer to it with an unknown outcome invoked before the first answer.
    struct Found<'a> {
        holder: &'a str,
        token: u64,
        grants: Vec<&'a Op>,
        start: Nanos,
        creators: Vec<&'a Op>,
        created_by: Nanos,
    }
    let mut found: Vec<Found<'a>> = Vec::with_capacity(groups.len());
    for ((token, holder), mut grants) in groups {
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
                (Call::Acquire { holder: h, .. }, Outcome::Unknown { .. })
                | (Call::Transfer { to_holder: h, .. }, Outcome::Unknown { .. }) => {
                    h == holder && op.invoke_ns < start
                }
                _ => granted(op, policy).is_some_and(|g| g.0 == holder && g.1 == token),
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
    // Expiry bounds by (holder, token), for the leases transfers replace (tokens ascending:
    // a transferred lease's is computed before its successor's).
    let mut expiries: HashMap<(&str, u64), Nanos> = HashMap::new();
    let mut out = Vec::with_capacity(found.len());
    for f in &found {
        let Found {
            holder,
            token,
            start,
            created_by,
            ..
        } = *f;
        let (mode, units) =
            granted(f.grants[0], policy).map_or((Mode::Exclusive, 0), |g| (g.2, g.3));
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
            let bound = match &op.call {
                // A lease on a session lives at least as long as the session was known to.
                Call::Acquire { ttl_ms, .. } => alive_since(op)
                    .unwrap_or(op.invoke_ns.max(after))
                    .saturating_add(ttl_floor_ns(*ttl_ms, eps)),
                // The expiry is kept: the replaced lease's bound, if known; else none at all.
                Call::Transfer { holder, token, .. } => expiries
                    .get(&(holder.as_str(), *token))
                    .copied()
                    .unwrap_or(start),
                _ => continue,
            };
            deadline = deadline.min(bound);
        }
        let mut ended_by = None;
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
            }
            | Call::Transfer {
                holder: h,
                token: t,
                ..
            } => h == holder && *t == token,
            // A session's renewals and close concern every lease of its holder.
            Call::RenewSession { holder: h, .. } | Call::CloseSession { holder: h, .. } => {
                h == holder
            }
            _ => false,
        };
        let renews_ok: Vec<&Op> = ops
            .iter()
            .filter(mine)
            .filter(|op| {
                matches!(
                    (&op.call, &op.outcome),
                    (
                        Call::Renew { .. },
                        Outcome::Ok {
                            value: Value::Renewed { .. }
                        }
                    ) | (
                        Call::RenewSession { .. },
                        Outcome::Ok {
                            value: Value::SessionRenewed
                        }
                    )
                )
            })
            .copied()
            .collect();
        if let Some(last_invoke) = renews_ok.iter().map(|op| op.invoke_ns).max() {
            // A renew replaces the expiry; of the renews that may have been applied last, take
            // the one giving the earliest bound.
            deadline = Nanos::MAX;
            for op in renews_ok.iter().filter(|op| op.complete_ns >= last_invoke) {
                if let Call::Renew { ttl_ms, .. } | Call::RenewSession { ttl_ms, .. } = op.call {
                    let bound = op.invoke_ns.saturating_add(ttl_floor_ns(ttl_ms, eps));
                    if bound < deadline {
                        deadline = bound;
                        ended_by = Some(op.id);
                    }
                }
            }
        }
        let mut expiry = deadline;
        let mut end_ops: Vec<(Nanos, u64)> = Vec::new();
        for op in ops.iter().filter(mine) {
            match (&op.call, &op.outcome) {
                // An unknown renew may be applied late and shorten the lease (a session's
                // renewal cannot: its ttl is the session's, always).
                (Call::Renew { ttl_ms, .. }, Outcome::Unknown { .. }) => {
                    let bound = op.invoke_ns.saturating_add(ttl_floor_ns(*ttl_ms, eps));
                    if bound < expiry {
                        expiry = bound;
                        ended_by = Some(op.id);
                    }
                }
                // The holder gives the lease up when it asks to release or transfer it, or
                // to close its session.
                (Call::Release { .. } | Call::Transfer { .. } | Call::CloseSession { .. }, _) => {
                    end_ops.push((op.invoke_ns, op.id));
                }
                _ => {}
            }
        }
        expiries.insert((holder, token), expiry);
        let mut end = expiry;
        for (invoke, id) in end_ops {
            if invoke < end {
                end = invoke;
                ended_by = Some(id);
            }
        }
        out.push(Tenure {
            holder,
            token,
            mode,
            units,
            grants: f.grants.clone(),
            start,
            created_by,
            end,
            ended_by,
        });
    }
    out.sort_by_key(|t| (t.start, t.token));
    out
}

fn kind_of(t: &Tenure<'_>) -> String {
    match t.mode {
        Mode::Exclusive => "exclusive".to_owned(),
        m => format!("{} ({} units)", m.name(), t.units),
    }
}

/// An exclusive tenure never overlaps another holder's tenure on the same resource.
pub(crate) fn overlapping_tenures(
    resource: &str,
    tenures: &[Tenure<'_>],
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let live: Vec<&Tenure<'_>> = tenures.iter().filter(|t| t.end > t.start).collect();
    for (i, a) in live.iter().enumerate() {
        for b in live[i + 1..].iter().take_while(|b| b.start < a.end) {
            if a.holder == b.holder || (a.mode != Mode::Exclusive && b.mode != Mode::Exclusive) {
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
                    "{}'s {} tenure (token {}) runs [{}, {}) and {}'s {} tenure (token {}) begins at {} inside it: {} and {}",
                    a.holder,
                    kind_of(a),
                    a.token,
                    at(a.start, t0),
                    at(a.end, t0),
                    b.holder,
                    kind_of(b),
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

/// Shared tenures that overlap in real time draw at most `total_units` together: at the start
/// of each tenure, the tenures live then must fit the pool.
pub(crate) fn units_oversubscribed(
    resource: &str,
    tenures: &[Tenure<'_>],
    policy: &ResourcePolicy,
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    if policy.total_units == 0 {
        return out;
    }
    let shared: Vec<&Tenure<'_>> = tenures
        .iter()
        .filter(|t| t.mode != Mode::Exclusive && t.end > t.start)
        .collect();
    let mut live: Vec<&Tenure<'_>> = Vec::new();
    let mut over = false;
    for b in shared {
        live.retain(|a| a.end > b.start);
        live.push(b);
        let drawn: u64 = live.iter().map(|t| t.units).sum();
        if drawn <= policy.total_units {
            over = false;
            continue;
        }
        if over {
            continue; // one report per stretch over the pool
        }
        over = true;
        let listed: Vec<String> = live
            .iter()
            .map(|t| {
                format!(
                    "{} {} with token {} [{}, {})",
                    t.holder,
                    kind_of(t),
                    t.token,
                    at(t.start, t0),
                    at(t.end, t0)
                )
            })
            .collect();
        out.push(Anomaly {
            kind: "units_oversubscribed".into(),
            resource: resource.to_owned(),
            message: format!(
                "at {} shared leases hold {drawn} units of a pool of {}: {}; granted by {}",
                at(b.start, t0),
                policy.total_units,
                listed.join(", "),
                live.iter()
                    .map(|t| describe_op(t.grants[0], t0))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            ops: live.iter().map(|t| t.grants[0].id).collect(),
        });
    }
    out
}
