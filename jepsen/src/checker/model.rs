//! An independent model of one ad-hoc exclusive resource (SPEC §4.1–4.5, §4.10, §5), written
//! for the checker: every history op of a resource is compiled into a [`MOp`], and [`step`]
//! says whether it can take effect on a model [`State`] and what the state becomes.
//!
//! The model does not know fencing tokens in advance (they are Raft log indexes): it only knows
//! that every grant's token is above every earlier one, so it keeps a `floor` (the lowest token
//! the next grant may carry). A grant whose token nobody saw (an acquire with an unknown
//! outcome) holds an [`Token::AtLeast`] token, bound to a value when a later op reveals it.
//!
//! Expiry is not a transition here: the search decides when a lease may have expired (its
//! lower bound `bound` has passed) and hands [`State::expired`] to `step`.
//!
//! The rules (a "live" lease is the state's lease; "match" binds an unseen token):
//! * acquire → `Granted{t}`: free and `t ≥ floor` → new lease, bound `invoke + ttl·(1−ε)`,
//!   floor `t+1`; or the same holder's live lease with token `t` (idempotent: bound unchanged).
//! * acquire → `Refused{resource_unavailable, holder?, token?}`: another holder's live lease,
//!   matching what the answer names. Other refusal reasons constrain nothing.
//! * acquire, outcome unknown: if free, a new lease with an unseen token ≥ floor (or no effect).
//! * renew → ok: the holder's live lease with that token; bound becomes `invoke + ttl·(1−ε)`.
//! * release → ok: the holder's live lease with that token; the resource becomes free.
//! * renew/release, outcome unknown: the same effect, or none.
//! * renew/release → `stale_fencing_token`/`lease_expired`/`lease_not_found`: (holder, token) is
//!   not the live lease. Other failures constrain nothing.
//! * validate → `valid`: the live lease carries the token; `!valid`: it does not (or is gone).
//! * read → the live lease's holder and token exactly, or free.
//! * writes to the fenced store are not part of this model (see the invariants).

use std::collections::HashMap;

use crate::history::{Call, Nanos, Op, Outcome, Value};

/// A holder name interned per resource.
pub(crate) type HolderId = u32;

/// A lease's fencing token as far as the model knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Token {
    Known(u64),
    /// Granted by an op whose answer was lost: some value ≥ this one.
    AtLeast(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Lease {
    pub holder: HolderId,
    pub token: Token,
    /// The lease cannot expire before this instant (harness clock).
    pub bound: Nanos,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State {
    /// The live exclusive lease, if any.
    pub lease: Option<Lease>,
    /// Every future grant's token is ≥ this (tokens are never 0).
    pub floor: u64,
}

impl State {
    pub(crate) fn initial() -> Self {
        State {
            lease: None,
            floor: 1,
        }
    }

    /// May the lease have expired by `deadline`?
    pub(crate) fn may_expire_by(&self, deadline: Nanos) -> bool {
        matches!(self.lease, Some(lease) if lease.bound <= deadline)
    }

    pub(crate) fn expired(&self) -> State {
        State {
            lease: None,
            floor: self.floor,
        }
    }

    /// Does the live lease carry token `t`? Binds an unknown token to `t` when possible.
    fn bind_token(&mut self, t: u64) -> bool {
        let Some(lease) = self.lease.as_mut() else {
            return false;
        };
        match lease.token {
            Token::Known(k) => k == t,
            Token::AtLeast(min) => {
                if t < min {
                    return false;
                }
                lease.token = Token::Known(t);
                self.floor = self.floor.max(t.saturating_add(1));
                true
            }
        }
    }

    /// Can the live lease be something other than (holder, t)? Unknown tokens are given the
    /// benefit of the doubt (they may differ from `t`) without being constrained further.
    fn may_not_be(&self, holder: HolderId, t: u64) -> bool {
        match self.lease {
            None => true,
            Some(lease) if lease.holder != holder => true,
            Some(lease) => match lease.token {
                Token::Known(k) => k != t,
                Token::AtLeast(_) => true,
            },
        }
    }
}

/// One op of the lease model, compiled from a history op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MOp {
    /// Acquire answered `Granted{token}`: a fresh grant, or the holder's live lease returned.
    AcquireGranted {
        holder: HolderId,
        token: u64,
        bound: Nanos,
    },
    /// Acquire answered `Refused{resource_unavailable}`: another holder has a live lease.
    AcquireRefused {
        holder: HolderId,
        other: Option<HolderId>,
        other_token: Option<u64>,
    },
    /// Acquire with an unknown outcome; the only effect that matters is a fresh grant.
    AcquireUnknown {
        holder: HolderId,
        bound: Nanos,
    },
    /// A successful renew, or (`required = false`) one with an unknown outcome.
    Renew {
        holder: HolderId,
        token: u64,
        bound: Nanos,
    },
    /// A successful release, or one with an unknown outcome.
    Release {
        holder: HolderId,
        token: u64,
    },
    /// Renew or release refused with `stale_fencing_token` / `lease_expired` / `lease_not_found`:
    /// (holder, token) is not the live lease.
    NotLive {
        holder: HolderId,
        token: u64,
    },
    Validate {
        token: u64,
        valid: bool,
    },
    /// A linearizable read: `holder = None` means free (or expired).
    Read {
        holder: Option<HolderId>,
        token: Option<u64>,
    },
}

impl MOp {
    /// Ops of one class differ at most in their expiry bound: two pending unknown ops of one
    /// class are interchangeable once both bounds have passed (or if they carry none).
    pub(crate) fn class(&self) -> (u8, HolderId, u64) {
        match *self {
            MOp::AcquireGranted { holder, token, .. } => (0, holder, token),
            MOp::AcquireRefused { holder, .. } => (1, holder, 0),
            MOp::AcquireUnknown { holder, .. } => (2, holder, 0),
            MOp::Renew { holder, token, .. } => (3, holder, token),
            MOp::Release { holder, token } => (4, holder, token),
            MOp::NotLive { holder, token } => (5, holder, token),
            MOp::Validate { token, valid } => (6, valid as HolderId, token),
            MOp::Read { .. } => (7, 0, 0),
        }
    }

    /// The expiry lower bound the op sets, if it sets one.
    pub(crate) fn bound(&self) -> Option<Nanos> {
        match *self {
            MOp::AcquireGranted { bound, .. }
            | MOp::AcquireUnknown { bound, .. }
            | MOp::Renew { bound, .. } => Some(bound),
            _ => None,
        }
    }
}

/// Can `op` (an unknown renew or release) never take effect again, from `state` or any state
/// that follows it? Its token is below every future grant's and is not the live lease's.
pub(crate) fn dead(op: &MOp, state: &State) -> bool {
    let (MOp::Renew { holder, token, .. } | MOp::Release { holder, token }) = *op else {
        return false;
    };
    if state.floor <= token {
        return false;
    }
    match state.lease {
        Some(lease) if lease.holder == holder => match lease.token {
            Token::Known(k) => k != token,
            Token::AtLeast(m) => m > token,
        },
        _ => true,
    }
}

/// Apply `op` to `state`; `None` when the op cannot take effect there.
pub(crate) fn step(state: &State, op: &MOp) -> Option<State> {
    let mut next = *state;
    match *op {
        MOp::AcquireGranted {
            holder,
            token,
            bound,
        } => match state.lease {
            Some(lease) if lease.holder == holder => next.bind_token(token).then_some(next),
            Some(_) => None,
            None => {
                if token < state.floor {
                    return None;
                }
                next.lease = Some(Lease {
                    holder,
                    token: Token::Known(token),
                    bound,
                });
                next.floor = token.saturating_add(1);
                Some(next)
            }
        },
        MOp::AcquireRefused {
            holder,
            other,
            other_token,
        } => {
            let lease = state.lease?;
            if lease.holder == holder || other.is_some_and(|o| o != lease.holder) {
                return None;
            }
            match other_token {
                Some(t) => next.bind_token(t).then_some(next),
                None => Some(next),
            }
        }
        MOp::AcquireUnknown { holder, bound } => {
            if state.lease.is_some() {
                // An idempotent or refused acquire changes nothing: same as leaving it out.
                return None;
            }
            next.lease = Some(Lease {
                holder,
                token: Token::AtLeast(state.floor),
                bound,
            });
            next.floor = state.floor.saturating_add(1);
            Some(next)
        }
        MOp::Renew {
            holder,
            token,
            bound,
        } => {
            let lease = state.lease?;
            if lease.holder != holder || !next.bind_token(token) {
                return None;
            }
            if let Some(l) = next.lease.as_mut() {
                l.bound = bound;
            }
            Some(next)
        }
        MOp::Release { holder, token } => {
            let lease = state.lease?;
            if lease.holder != holder || !next.bind_token(token) {
                return None;
            }
            next.lease = None;
            Some(next)
        }
        MOp::NotLive { holder, token } => state.may_not_be(holder, token).then_some(next),
        MOp::Validate { token, valid: true } => next.bind_token(token).then_some(next),
        MOp::Validate {
            token,
            valid: false,
        } => match state.lease {
            None => Some(next),
            Some(lease) => match lease.token {
                Token::Known(k) => (k != token).then_some(next),
                Token::AtLeast(_) => Some(next),
            },
        },
        MOp::Read { holder: None, .. } => state.lease.is_none().then_some(next),
        MOp::Read {
            holder: Some(h),
            token,
        } => {
            let lease = state.lease?;
            if lease.holder != h {
                return None;
            }
            match token {
                Some(t) => next.bind_token(t).then_some(next),
                None => Some(next),
            }
        }
    }
}

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

/// Reasons that prove the named lease is not the live one.
const NOT_LIVE_REASONS: [&str; 3] = ["stale_fencing_token", "lease_expired", "lease_not_found"];

/// `ttl·(1−ε)` in nanoseconds.
pub(crate) fn ttl_floor_ns(ttl_ms: u64, eps: f64) -> u64 {
    let ns = ttl_ms as f64 * 1e6 * (1.0 - eps.clamp(0.0, 1.0));
    if ns <= 0.0 {
        0
    } else {
        ns as u64
    }
}

pub(crate) fn compile(op: &Op, eps: f64, holders: &mut Holders) -> Compiled {
    let unexpected =
        |value: &Value| Compiled::Unexpected(format!("{} answered {:?}", op.call.name(), value));
    match (&op.call, &op.outcome) {
        (Call::Write { .. }, _) => Compiled::Write,
        (Call::Acquire { holder, ttl_ms, .. }, outcome) => {
            let holder = holders.intern(holder);
            let bound = op.invoke_ns.saturating_add(ttl_floor_ns(*ttl_ms, eps));
            match outcome {
                Outcome::Ok {
                    value: Value::Granted { token, .. },
                } => Compiled::Model {
                    op: MOp::AcquireGranted {
                        holder,
                        token: *token,
                        bound,
                    },
                    required: true,
                },
                Outcome::Ok {
                    value:
                        Value::Refused {
                            reason,
                            holder: other,
                            token,
                        },
                } => {
                    if reason == "resource_unavailable" {
                        let other = other.as_deref().map(|o| holders.intern(o));
                        Compiled::Model {
                            op: MOp::AcquireRefused {
                                holder,
                                other,
                                other_token: *token,
                            },
                            required: true,
                        }
                    } else {
                        Compiled::Ignored
                    }
                }
                Outcome::Ok { value } => unexpected(value),
                Outcome::Fail { .. } => Compiled::Ignored,
                Outcome::Unknown { .. } => Compiled::Model {
                    op: MOp::AcquireUnknown { holder, bound },
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
            let bound = op.invoke_ns.saturating_add(ttl_floor_ns(*ttl_ms, eps));
            let renew = MOp::Renew {
                holder,
                token: *token,
                bound,
            };
            let answered =
                |value: &Value| matches!(value, Value::Renewed { token: t } if t == token);
            compile_lease_call(renew, holder, *token, outcome, answered, unexpected)
        }
        (Call::Release { holder, token, .. }, outcome) => {
            let holder = holders.intern(holder);
            let release = MOp::Release {
                holder,
                token: *token,
            };
            let answered =
                |value: &Value| matches!(value, Value::Released { token: t } if t == token);
            compile_lease_call(release, holder, *token, outcome, answered, unexpected)
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
                value: Value::Read { holder, token },
            } => {
                let holder = holder.as_deref().map(|h| holders.intern(h));
                Compiled::Model {
                    op: MOp::Read {
                        holder,
                        token: *token,
                    },
                    required: true,
                }
            }
            Outcome::Ok { value } => unexpected(value),
            _ => Compiled::Ignored,
        },
    }
}

/// A renew or release: it took effect (`answered`), proved the lease not live (a not-live
/// failure), constrains nothing (other failures), or may have taken effect (unknown).
fn compile_lease_call(
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
        Outcome::Fail { reason } if NOT_LIVE_REASONS.contains(&reason.as_str()) => {
            Compiled::Model {
                op: MOp::NotLive { holder, token },
                required: true,
            }
        }
        Outcome::Fail { .. } => Compiled::Ignored,
        Outcome::Unknown { .. } => Compiled::Model {
            op: effect,
            required: false,
        },
    }
}

/// Seconds since `t0`, for messages.
pub(crate) fn at(t: Nanos, t0: Nanos) -> String {
    if t == Nanos::MAX {
        return "∞".to_owned();
    }
    let d = t as i128 - t0 as i128;
    format!("{:.3}s", d as f64 / 1e9)
}

/// `#12 acquire(a, ttl 1000ms) → granted token 7 [0.100s, 0.110s]`
pub(crate) fn describe_op(op: &Op, t0: Nanos) -> String {
    let call = match &op.call {
        Call::Acquire { holder, ttl_ms, .. } => format!("acquire({holder}, ttl {ttl_ms}ms)"),
        Call::Renew {
            holder,
            token,
            ttl_ms,
            ..
        } => format!("renew({holder}, token {token}, ttl {ttl_ms}ms)"),
        Call::Release { holder, token, .. } => format!("release({holder}, token {token})"),
        Call::Validate { token, .. } => format!("validate(token {token})"),
        Call::Read { node, .. } => format!("read(node {node})"),
        Call::Write { holder, token, .. } => format!("write({holder}, token {token})"),
    };
    let outcome = match &op.outcome {
        Outcome::Ok { value } => match value {
            Value::Granted { token, .. } => format!("granted token {token}"),
            Value::Refused {
                reason,
                holder,
                token,
            } => {
                let mut s = format!("refused {reason}");
                if let Some(h) = holder {
                    s.push_str(&format!(" (held by {h}"));
                    if let Some(t) = token {
                        s.push_str(&format!(", token {t}"));
                    }
                    s.push(')');
                }
                s
            }
            Value::Renewed { token } => format!("renewed token {token}"),
            Value::Released { token } => format!("released token {token}"),
            Value::Validated { valid, reason } => format!("valid={valid} ({reason})"),
            Value::Read {
                holder: Some(h),
                token: Some(t),
            } => format!("held by {h}, token {t}"),
            Value::Read {
                holder: Some(h),
                token: None,
            } => format!("held by {h}"),
            Value::Read { holder: None, .. } => "free".to_owned(),
            Value::StoreAccepted => "accepted".to_owned(),
            Value::StoreRejected { highest } => format!("rejected (store saw {highest})"),
        },
        Outcome::Fail { reason } => format!("failed {reason}"),
        Outcome::Unknown { error } => format!("unknown ({error})"),
    };
    let end = match op.outcome {
        Outcome::Unknown { .. } => "…".to_owned(),
        _ => at(op.complete_ns, t0),
    };
    format!(
        "#{} {} → {} [{}, {}]",
        op.id,
        call,
        outcome,
        at(op.invoke_ns, t0),
        end
    )
}

pub(crate) fn describe_state(state: &State, holders: &Holders, t0: Nanos) -> String {
    match state.lease {
        None => format!("free (next token ≥ {})", state.floor),
        Some(lease) => {
            let token = match lease.token {
                Token::Known(t) => format!("token {t}"),
                Token::AtLeast(t) => format!("unseen token ≥ {t}"),
            };
            // The search sets a bound that has already passed to 0.
            let expiry = if lease.bound == 0 {
                "its ttl has run out: it may expire at any moment".to_owned()
            } else {
                format!("cannot expire before {}", at(lease.bound, t0))
            };
            format!(
                "held by {} with {} ({})",
                holders.name(lease.holder),
                token,
                expiry
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(holder: HolderId, token: u64, bound: Nanos) -> State {
        State {
            lease: Some(Lease {
                holder,
                token: Token::Known(token),
                bound,
            }),
            floor: token + 1,
        }
    }

    #[test]
    fn a_grant_needs_a_free_resource_and_a_higher_token() {
        let free = State {
            lease: None,
            floor: 5,
        };
        assert!(step(
            &free,
            &MOp::AcquireGranted {
                holder: 0,
                token: 4,
                bound: 10
            }
        )
        .is_none());
        let s = step(
            &free,
            &MOp::AcquireGranted {
                holder: 0,
                token: 5,
                bound: 10,
            },
        )
        .expect("grant");
        assert_eq!(s, held(0, 5, 10));
        // Idempotent: same holder, same token, bound not extended.
        assert_eq!(
            step(
                &s,
                &MOp::AcquireGranted {
                    holder: 0,
                    token: 5,
                    bound: 99
                }
            ),
            Some(s)
        );
        assert!(step(
            &s,
            &MOp::AcquireGranted {
                holder: 0,
                token: 6,
                bound: 99
            }
        )
        .is_none());
        assert!(step(
            &s,
            &MOp::AcquireGranted {
                holder: 1,
                token: 6,
                bound: 99
            }
        )
        .is_none());
    }

    #[test]
    fn an_unseen_token_is_bound_by_the_first_op_that_reveals_it() {
        let free = State {
            lease: None,
            floor: 3,
        };
        let s = step(
            &free,
            &MOp::AcquireUnknown {
                holder: 1,
                bound: 10,
            },
        )
        .expect("unknown grant");
        assert_eq!(s.floor, 4);
        assert!(step(
            &s,
            &MOp::Read {
                holder: Some(1),
                token: Some(2)
            }
        )
        .is_none());
        let bound = step(
            &s,
            &MOp::Read {
                holder: Some(1),
                token: Some(9),
            },
        )
        .expect("read");
        assert_eq!(bound, held(1, 9, 10));
        assert!(step(
            &bound,
            &MOp::Validate {
                token: 9,
                valid: false
            }
        )
        .is_none());
        assert!(step(
            &bound,
            &MOp::NotLive {
                holder: 1,
                token: 9
            }
        )
        .is_none());
        assert!(step(
            &bound,
            &MOp::NotLive {
                holder: 1,
                token: 8
            }
        )
        .is_some());
    }

    #[test]
    fn renew_replaces_the_bound_and_release_frees() {
        let s = held(0, 5, 10);
        let r = step(
            &s,
            &MOp::Renew {
                holder: 0,
                token: 5,
                bound: 7,
            },
        )
        .expect("renew");
        assert_eq!(r.lease.map(|l| l.bound), Some(7));
        assert!(step(
            &s,
            &MOp::Renew {
                holder: 1,
                token: 5,
                bound: 7
            }
        )
        .is_none());
        let f = step(
            &s,
            &MOp::Release {
                holder: 0,
                token: 5,
            },
        )
        .expect("release");
        assert_eq!(
            f,
            State {
                lease: None,
                floor: 6
            }
        );
        assert!(step(
            &f,
            &MOp::Release {
                holder: 0,
                token: 5
            }
        )
        .is_none());
        assert!(step(
            &f,
            &MOp::AcquireRefused {
                holder: 1,
                other: None,
                other_token: None
            }
        )
        .is_none());
    }
}
