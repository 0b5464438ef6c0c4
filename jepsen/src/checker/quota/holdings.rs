//! What the principal may have held: every lease and wait of the run, from the cluster's
//! complete record of a resource, else from the clients' answers alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::checker::proves_not_live;
use crate::checker::retention::Retention;
use crate::history::{Call, EventKind, History, Nanos, Op, Outcome, Value};

/// What a quota counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Lease,
    Wait,
}

impl Kind {
    pub(super) fn of(quota: &str) -> Option<Kind> {
        match quota {
            "leases" => Some(Kind::Lease),
            "waiters" => Some(Kind::Wait),
            _ => None,
        }
    }
}

/// One lease or wait the principal may have held, as far as the history shows it.
#[derive(Clone, Debug)]
pub(super) struct Holding {
    pub(super) kind: Kind,
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
    pub(super) fn may_be_held(
        &self,
        (invoke, complete): (Nanos, Nanos),
        applied: u64,
        bound: u64,
    ) -> bool {
        let ended = self.until_index.is_some_and(|i| i <= applied) || self.until_ns < invoke;
        let later = self.from_index.is_some_and(|i| i > bound) || self.from_ns > complete;
        !ended && !later
    }

    /// `x0 token 41 of c3`, `w1 wait of c5`, `r2 lease of c1 (unknown acquire)`.
    pub(super) fn describe(&self) -> String {
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
pub(super) fn holdings(history: &History) -> Vec<Holding> {
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
