//! From history ops to model ops: what each answer proves about the resource's state.

use std::collections::HashMap;

use tenure_proto::contract::Reason;

use super::{HolderId, MOp, Refusal, Seen};
use crate::checker::proves_not_live;
use crate::history::{Call, Held, Nanos, Op, Outcome, ResourcePolicy, Value};

mod sessions;

use sessions::{session_call, SESSION_NOT_FOUND};

/// Holder names of one resource.
#[derive(Default)]
pub(crate) struct Holders {
    names: Vec<String>,
    ids: HashMap<String, HolderId>,
}

impl Holders {
    pub(crate) fn intern(&mut self, name: &str) -> HolderId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as HolderId;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    pub(crate) fn name(&self, id: HolderId) -> &str {
        self.names
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// What a history op means to the checker.
pub(crate) enum Compiled {
    /// Part of the lease model; `required` = it must be linearized (outcome Ok or a proving Fail).
    Model { op: MOp, required: bool },
    /// A fenced-store write (checked by the invariants, not the model).
    Write,
    /// Constrains nothing (a failure that proves nothing, a read that timed out, …).
    Ignored,
    /// The answer does not fit the call (a harness bug or a protocol bug).
    Unexpected(String),
}

/// A refused acquire lists at most this many holders (the node's `HOLDERS_SHOWN`): a longer
/// list may be cut short, so it shows only some of the live leases.
const HOLDERS_SHOWN: usize = 100;

/// How a wait ends without a grant (SPEC §4.7); it leaves the leases as they were.
const WAIT_ENDS: [Reason; 2] = [Reason::WaitTimeout, Reason::WaitCancelled];

/// An acquire or transfer to a holder that holds the resource already: nothing changed.
const ALREADY_HELD: &str = Reason::AlreadyHeld.as_str();

/// `d·(1−ε)` in nanoseconds, for a duration `d` in milliseconds.
pub(crate) fn ttl_floor_ns(ttl_ms: u64, eps: f64) -> u64 {
    let ns = ttl_ms as f64 * 1e6 * (1.0 - eps.clamp(0.0, 1.0));
    if ns <= 0.0 {
        0
    } else {
        ns as u64
    }
}

fn units32(units: u64) -> u32 {
    units.min(u32::MAX as u64) as u32
}

fn seen(holders: &mut Holders, held: &Held, policy: &ResourcePolicy) -> Seen {
    Seen {
        holder: holders.intern(&held.holder),
        token: Some(held.token),
        mode: Some(held.mode),
        units: Some(units32(policy.effective_units(held.mode, held.units))),
        grace: Some(held.grace),
    }
}

/// Compiles one op of `resource` with policy `policy`; `eps` bounds the clock-rate error.
pub(crate) fn compile(
    op: &Op,
    resource: &str,
    eps: f64,
    policy: &ResourcePolicy,
    holders: &mut Holders,
) -> Compiled {
    let unexpected =
        |value: &Value| Compiled::Unexpected(format!("{} answered {:?}", op.call.name(), value));
    // Lower bounds of a lease's expiry and of its reclaim, for a grant or renew invoked now
    // (a lease on a session: from when its session was last known alive; sessions have no
    // grace).
    let bounds = |ttl_ms: u64| {
        let (from, grace) = match alive_since(op) {
            Some(alive) => (alive, 0),
            None => (op.invoke_ns, policy.renewal_grace_ms),
        };
        (
            from.saturating_add(ttl_floor_ns(ttl_ms, eps)),
            from.saturating_add(ttl_floor_ns(ttl_ms.saturating_add(grace), eps)),
        )
    };
    match (&op.call, &op.outcome) {
        (Call::Write { .. }, _) => Compiled::Write,
        // The waiting room is the waiting checker's: a cancelled wait changes no lease.
        (Call::CancelWait { .. }, _) => Compiled::Ignored,
        (Call::CreateSession { .. }, _) => Compiled::Ignored,
        (Call::RenewSession { holder, .. }, _) | (Call::CloseSession { holder, .. }, _) => {
            let holder = holders.intern(holder);
            session_call(op, resource, holder, bounds, unexpected)
        }
        (
            Call::Acquire {
                holder,
                ttl_ms,
                mode,
                units,
                wait_ms,
                many,
                ..
            },
            outcome,
        ) => {
            if let Outcome::Ok {
                value: value @ Value::Refused { reason, .. },
            } = outcome
            {
                // A `WAIT` acquire queues whatever the conflict: it ends granted or with its
                // wait's end; only it ends so.
                let wait_ended = WAIT_ENDS.iter().any(|end| *end == reason.as_str());
                if wait_ended != (*wait_ms > 0) {
                    return unexpected(value);
                }
            }
            let holder = holders.intern(holder);
            let (mode, units) = (*mode, units32(policy.effective_units(*mode, *units)));
            let (expiry, bound) = bounds(*ttl_ms);
            match outcome {
                Outcome::Ok {
                    value: Value::Granted { token, .. },
                } => Compiled::Model {
                    op: MOp::AcquireGranted {
                        holder,
                        mode,
                        units,
                        token: *token,
                        expiry,
                        bound,
                    },
                    required: true,
                },
                Outcome::Ok {
                    value:
                        Value::Refused {
                            reason,
                            holder: first,
                            token,
                            holders: all,
                        },
                } => {
                    let why = match reason.parse() {
                        Ok(Reason::ResourceUnavailable) => Refusal::Unavailable,
                        Ok(Reason::InsufficientUnits) => Refusal::Units,
                        _ => return Compiled::Ignored,
                    };
                    let (listed, exact): (Vec<Seen>, bool) = if all.is_empty() {
                        // Before shared modes only the first holder was recorded.
                        let listed = first.as_deref().map(|name| Seen {
                            holder: holders.intern(name),
                            token: *token,
                            mode: None,
                            units: None,
                            grace: None,
                        });
                        (listed.into_iter().collect(), false)
                    } else {
                        let listed = all.iter().map(|h| seen(holders, h, policy)).collect();
                        (listed, all.len() < HOLDERS_SHOWN)
                    };
                    Compiled::Model {
                        op: MOp::AcquireRefused {
                            holder,
                            mode,
                            units,
                            why,
                            holders: listed.into_boxed_slice(),
                            exact,
                        },
                        required: true,
                    }
                }
                Outcome::Ok { value } => unexpected(value),
                // An `AcquireMany` refused as a whole grants nothing anywhere, and its reason
                // may concern another of its resources (the all-or-nothing check is `many`'s).
                Outcome::Fail { reason } if reason == ALREADY_HELD && *many == 0 => {
                    Compiled::Model {
                        op: MOp::AlreadyHeld {
                            holder,
                            mode,
                            units,
                        },
                        required: true,
                    }
                }
                // Its session had ended, and with it every lease of its holder.
                Outcome::Fail { reason } if reason == SESSION_NOT_FOUND => Compiled::Model {
                    op: MOp::Holding {
                        holder,
                        lease: None,
                    },
                    required: true,
                },
                Outcome::Fail { .. } => Compiled::Ignored,
                // Refused for a quota: nothing happened to the resource, a legal no-op at any
                // point of the call (whether the quota was full is the quota checker's).
                Outcome::QuotaExceeded { .. } => Compiled::Ignored,
                Outcome::Unknown { .. } => Compiled::Model {
                    op: MOp::AcquireUnknown {
                        holder,
                        mode,
                        units,
                        expiry,
                        bound,
                    },
                    required: false,
                },
            }
        }
        (
            Call::Renew {
                holder,
                token,
                ttl_ms,
                ..
            },
            outcome,
        ) => {
            let holder = holders.intern(holder);
            let (expiry, bound) = bounds(*ttl_ms);
            let renew = MOp::Renew {
                holder,
                token: *token,
                expiry,
                bound,
            };
            let answered =
                |value: &Value| matches!(value, Value::Renewed { token: t } if t == token);
            lease_call(renew, holder, *token, outcome, answered, unexpected)
        }
        (Call::Release { holder, token, .. }, outcome) => {
            let holder = holders.intern(holder);
            let release = MOp::Release {
                holder,
                token: *token,
            };
            let answered =
                |value: &Value| matches!(value, Value::Released { token: t } if t == token);
            lease_call(release, holder, *token, outcome, answered, unexpected)
        }
        (
            Call::Transfer {
                holder,
                token,
                to_holder,
                ..
            },
            outcome,
        ) => {
            let holder = holders.intern(holder);
            let to = holders.intern(to_holder);
            let transfer = |new_token| MOp::Transfer {
                holder,
                token: *token,
                to,
                new_token,
            };
            match outcome {
                Outcome::Ok {
                    value: Value::Transferred { token: t, .. },
                } => Compiled::Model {
                    op: transfer(Some(*t)),
                    required: true,
                },
                Outcome::Fail { reason } if reason == ALREADY_HELD => Compiled::Model {
                    op: MOp::TransferToHolder {
                        holder,
                        token: *token,
                        to,
                    },
                    required: true,
                },
                _ => lease_call(
                    transfer(None),
                    holder,
                    *token,
                    outcome,
                    |_| false,
                    unexpected,
                ),
            }
        }
        (Call::Validate { token, .. }, outcome) => match outcome {
            Outcome::Ok {
                value: Value::Validated { valid, .. },
            } => Compiled::Model {
                op: MOp::Validate {
                    token: *token,
                    valid: *valid,
                },
                required: true,
            },
            Outcome::Ok { value } => unexpected(value),
            _ => Compiled::Ignored,
        },
        (Call::Read { .. }, outcome) => match outcome {
            Outcome::Ok {
                value:
                    Value::Read {
                        holder,
                        token,
                        leases,
                        ..
                    },
            } => {
                let all = Value::read_leases(holder, token, leases);
                let listed: Vec<Seen> = if leases.is_empty() {
                    // Before shared modes: the one exclusive lease, as seen.
                    all.iter()
                        .map(|h| Seen {
                            mode: None,
                            units: None,
                            grace: None,
                            ..seen(holders, h, policy)
                        })
                        .collect()
                } else {
                    all.iter().map(|h| seen(holders, h, policy)).collect()
                };
                if listed.is_empty() && holder.is_some() {
                    // A holder without a token (never written by the workload): held by it.
                    let h = holders.intern(holder.as_deref().unwrap_or_default());
                    return Compiled::Model {
                        op: MOp::Holding {
                            holder: h,
                            lease: Some(Seen {
                                holder: h,
                                token: None,
                                mode: None,
                                units: None,
                                grace: None,
                            }),
                        },
                        required: true,
                    };
                }
                Compiled::Model {
                    op: MOp::Read {
                        leases: listed.into_boxed_slice(),
                    },
                    required: true,
                }
            }
            Outcome::Ok { value } => unexpected(value),
            _ => Compiled::Ignored,
        },
        (Call::ListLeases { holder, .. }, outcome) => match outcome {
            Outcome::Ok {
                value: value @ Value::Leases { leases },
            } => {
                let id = holders.intern(holder);
                if leases.len() > 1 || leases.iter().any(|l| l.holder != *holder) {
                    return unexpected(value);
                }
                let lease = leases.first().map(|l| seen(holders, l, policy));
                Compiled::Model {
                    op: MOp::Holding { holder: id, lease },
                    required: true,
                }
            }
            Outcome::Ok { value } => unexpected(value),
            _ => Compiled::Ignored,
        },
    }
}

/// Where a lease on a session is known alive from: the `session_alive_ns` of its acquire, or
/// the invocation of a renewal of its session. `None`: not a call on a session.
pub(crate) fn alive_since(op: &Op) -> Option<Nanos> {
    match &op.call {
        Call::Acquire {
            session_id,
            session_alive_ns,
            ..
        } if !session_id.is_empty() => Some(*session_alive_ns),
        Call::RenewSession { .. } => Some(op.invoke_ns),
        _ => None,
    }
}

/// A renew, release or transfer: it took effect (`answered`), proved the lease not live (a
/// not-live failure), constrains nothing (other failures, a quota refusal), or may have taken
/// effect (unknown).
fn lease_call(
    effect: MOp,
    holder: HolderId,
    token: u64,
    outcome: &Outcome,
    answered: impl Fn(&Value) -> bool,
    unexpected: impl Fn(&Value) -> Compiled,
) -> Compiled {
    match outcome {
        Outcome::Ok { value } if answered(value) => Compiled::Model {
            op: effect,
            required: true,
        },
        Outcome::Ok { value } => unexpected(value),
        Outcome::Fail { reason } if proves_not_live(reason) => Compiled::Model {
            op: MOp::NotLive { holder, token },
            required: true,
        },
        Outcome::Fail { .. } | Outcome::QuotaExceeded { .. } => Compiled::Ignored,
        Outcome::Unknown { .. } => Compiled::Model {
            op: effect,
            required: false,
        },
    }
}
