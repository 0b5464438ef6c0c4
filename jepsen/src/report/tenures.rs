//! The tenures a timeline draws: one bar per (resource, token, process), from the grant's (or
//! transfer's) return to the release or transfer away, or else to the last renew + ttl (a
//! transferred lease keeps the expiry of the one it replaced).

use std::collections::{BTreeMap, HashMap};

use super::Span;
use crate::history::{Call, History, Mode, Nanos, Op, Outcome, Value};

/// How a tenure ended, as far as the history shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Released,
    /// Handed to another holder by a transfer.
    Transferred,
    /// Neither: it ran out (drawn to the last renew + ttl).
    Expired,
}

/// One holder's hold on a lease, as drawn.
pub(super) struct Tenure {
    pub(super) process: u64,
    pub(super) token: u64,
    pub(super) holder: String,
    pub(super) lease_id: String,
    pub(super) mode: Mode,
    pub(super) units: u64,
    pub(super) start_ns: Nanos,
    pub(super) end_ns: Nanos,
    pub(super) end: End,
    /// For a tenure a transfer began: the process that handed it over.
    pub(super) from: Option<u64>,
    /// Grant (or transfer), renews, release (or transfer away).
    pub(super) ops: Vec<u64>,
}

type Key<'a> = (&'a str, u64, u64);

/// Tenures per resource, keyed by `(resource, token, process)` so that a token wrongly granted
/// to two holders shows as two bars.
pub(super) fn tenures(history: &History, span: Span) -> BTreeMap<String, Vec<Tenure>> {
    let mut ops: Vec<&Op> = history.ops.iter().collect();
    ops.sort_by_key(|op| (op.invoke_ns, op.id));
    let mut process_of: HashMap<&str, u64> = HashMap::new();
    for op in &ops {
        if let Some(holder) = op.call.holder() {
            process_of.entry(holder).or_insert(op.process);
        }
    }
    let mut by_key: BTreeMap<Key<'_>, Tenure> = BTreeMap::new();
    // Latest "valid until" per key: an acquire's or renew's invoke + its ttl.
    let mut until: HashMap<Key<'_>, Nanos> = HashMap::new();
    // A transferred lease's key → the key of the lease it replaced.
    let mut replaced: HashMap<Key<'_>, Key<'_>> = HashMap::new();
    let mut ended: HashMap<Key<'_>, (Nanos, u64, End)> = HashMap::new();
    let ms = |ms: u64| ms.saturating_mul(1_000_000);
    for op in &ops {
        let (key, holder, lease_id, mode, units, from) = match (&op.call, &op.outcome) {
            (
                Call::Acquire {
                    resource,
                    holder,
                    ttl_ms,
                    mode,
                    units,
                    wait_ms,
                    ..
                },
                Outcome::Ok {
                    value: Value::Granted { token, lease_id },
                },
            ) => {
                let key = (resource.as_str(), *token, op.process);
                let policy = history.resources.get(resource).cloned().unwrap_or_default();
                let u = until.entry(key).or_insert(0);
                // A waited lease's ttl runs from its admission, which its return shows.
                let from = if *wait_ms > 0 {
                    op.complete_ns
                } else {
                    op.invoke_ns
                };
                *u = (*u).max(from.saturating_add(ms(*ttl_ms)));
                let units = policy.effective_units(*mode, *units);
                (key, holder, lease_id, *mode, units, None)
            }
            (
                Call::Transfer {
                    resource,
                    holder,
                    token: old,
                    to_holder,
                    ..
                },
                Outcome::Ok {
                    value:
                        Value::Transferred {
                            token,
                            lease_id,
                            mode,
                            units,
                        },
                },
            ) => {
                let to = process_of.get(to_holder.as_str()).copied().unwrap_or(0);
                let key = (resource.as_str(), *token, to);
                let old_key = (resource.as_str(), *old, op.process);
                replaced.insert(key, old_key);
                ended
                    .entry(old_key)
                    .or_insert((op.invoke_ns, op.id, End::Transferred));
                let _ = holder;
                (key, to_holder, lease_id, *mode, *units, Some(op.process))
            }
            _ => continue,
        };
        match by_key.get_mut(&key) {
            Some(t) => t.ops.push(op.id),
            None => {
                by_key.insert(
                    key,
                    Tenure {
                        process: key.2,
                        token: key.1,
                        holder: holder.clone(),
                        lease_id: lease_id.clone(),
                        mode,
                        units,
                        start_ns: op.complete_ns,
                        end_ns: 0,
                        end: End::Expired,
                        from,
                        ops: vec![op.id],
                    },
                );
            }
        }
    }
    for op in &ops {
        match (&op.call, &op.outcome) {
            (
                Call::Renew {
                    resource,
                    token,
                    ttl_ms,
                    ..
                },
                Outcome::Ok {
                    value: Value::Renewed { .. },
                },
            ) => {
                let key = (resource.as_str(), *token, op.process);
                if let Some(t) = by_key.get_mut(&key) {
                    t.ops.push(op.id);
                    let u = until.entry(key).or_insert(0);
                    *u = (*u).max(op.invoke_ns.saturating_add(ms(*ttl_ms)));
                }
            }
            (
                Call::Release {
                    resource, token, ..
                },
                Outcome::Ok {
                    value: Value::Released { .. },
                },
            ) => {
                let key = (resource.as_str(), *token, op.process);
                if by_key.contains_key(&key) {
                    ended
                        .entry(key)
                        .or_insert((op.invoke_ns, op.id, End::Released));
                }
            }
            _ => {}
        }
    }
    // A transferred lease keeps its predecessor's expiry (tokens ascending: predecessors first).
    let mut keys: Vec<Key<'_>> = by_key.keys().copied().collect();
    keys.sort_by_key(|k| (k.1, k.0, k.2));
    for key in keys {
        if let Some(old) = replaced.get(&key).and_then(|old| until.get(old)).copied() {
            let u = until.entry(key).or_insert(0);
            *u = (*u).max(old);
        }
    }
    let mut out: BTreeMap<String, Vec<Tenure>> = BTreeMap::new();
    for (key, mut tenure) in by_key {
        match ended.get(&key) {
            Some(&(at, id, how)) => {
                tenure.end_ns = at;
                tenure.end = how;
                tenure.ops.push(id);
            }
            None => tenure.end_ns = until.get(&key).copied().unwrap_or(tenure.start_ns),
        }
        tenure.end_ns = tenure
            .end_ns
            .clamp(tenure.start_ns, span.t1.max(tenure.start_ns));
        out.entry(key.0.to_string()).or_default().push(tenure);
    }
    for list in out.values_mut() {
        list.sort_by_key(|t| (t.start_ns, t.token));
    }
    out
}
