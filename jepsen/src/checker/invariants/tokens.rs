//! Fencing tokens: unique, increasing in real time, higher after a transfer, dead once
//! transferred.

use std::collections::{BTreeMap, HashMap};

use super::{at, describe_op, Anomaly, Tenure};
use crate::history::{Call, Mode, Nanos, Op, Outcome, Value};

/// Tokens are unique per resource (shared leases admitted by one entry aside), and a grant
/// that returned before another was invoked has a lower token: tokens are log indexes.
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
        let shared_admission = ts.iter().all(|t| t.mode != Mode::Exclusive);
        if ts.len() > 1 && !shared_admission {
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

/// `(old token, new token)` of a successful transfer.
fn transfer(op: &Op) -> Option<(u64, u64)> {
    match (&op.call, &op.outcome) {
        (
            Call::Transfer { token, .. },
            Outcome::Ok {
                value: Value::Transferred { token: new, .. },
            },
        ) => Some((*token, *new)),
        _ => None,
    }
}

/// A transfer's token is the transfer entry's index: above the transferred lease's.
pub(crate) fn transfer_token_not_higher(resource: &str, ops: &[&Op], t0: Nanos) -> Vec<Anomaly> {
    ops.iter()
        .filter_map(|op| transfer(op).map(|t| (op, t)))
        .filter(|(_, (old, new))| new <= old)
        .map(|(op, (old, new))| Anomaly {
            kind: "transfer_token_not_higher".into(),
            resource: resource.to_owned(),
            message: format!(
                "the transfer of token {old} gave the new holder token {new}, not a higher one: {}",
                describe_op(op, t0)
            ),
            ops: vec![op.id],
        })
        .collect()
}

/// The tokens an answer accepted as live: a renew, release or transfer that succeeded with it,
/// a validation that found it valid, a read or listing that showed it, a grant that returned it.
fn accepted_tokens(op: &Op) -> Vec<u64> {
    let Outcome::Ok { value } = &op.outcome else {
        return Vec::new();
    };
    match (&op.call, value) {
        (Call::Renew { token, .. }, Value::Renewed { .. })
        | (Call::Release { token, .. }, Value::Released { .. })
        | (Call::Transfer { token, .. }, Value::Transferred { .. }) => vec![*token],
        (Call::Validate { token, .. }, Value::Validated { valid: true, .. }) => vec![*token],
        (_, Value::Granted { token, .. }) => vec![*token],
        (
            _,
            Value::Read {
                holder,
                token,
                leases,
                ..
            },
        ) => Value::read_leases(holder, token, leases)
            .iter()
            .map(|l| l.token)
            .collect(),
        (_, Value::Leases { leases }) => leases.iter().map(|l| l.token).collect(),
        _ => Vec::new(),
    }
}

/// Once a transfer of token `t` has returned, `t` is dead: no op invoked later accepts it.
pub(crate) fn stale_token_accepted(resource: &str, ops: &[&Op], t0: Nanos) -> Vec<Anomaly> {
    const MAX_PER_TRANSFER: usize = 3;
    let mut out = Vec::new();
    let mut accepting: HashMap<u64, Vec<&Op>> = HashMap::new();
    for op in ops {
        for t in accepted_tokens(op) {
            accepting.entry(t).or_default().push(op);
        }
    }
    for tr in ops.iter().filter(|op| transfer(op).is_some()) {
        let Some((old, _)) = transfer(tr) else {
            continue;
        };
        let late = accepting
            .get(&old)
            .into_iter()
            .flatten()
            .filter(|op| op.invoke_ns > tr.complete_ns);
        for op in late.take(MAX_PER_TRANSFER) {
            out.push(Anomaly {
                kind: "stale_token_accepted".into(),
                resource: resource.to_owned(),
                message: format!(
                    "token {old} was transferred away at {}, yet a later op accepted it: {} then {}",
                    at(tr.complete_ns, t0),
                    describe_op(tr, t0),
                    describe_op(op, t0)
                ),
                ops: vec![tr.id, op.id],
            });
        }
    }
    out
}
