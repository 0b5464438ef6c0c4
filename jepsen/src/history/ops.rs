//! What the clients asked and what they were told: calls and answers.

use serde::{Deserialize, Serialize};

use super::lease::{is_false, is_zero, list, Held, Mode};

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum Call {
    Acquire {
        resource: String,
        holder: String,
        ttl_ms: u64,
        #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
        mode: Mode,
        /// As requested (0 = the default, 1).
        #[serde(default, skip_serializing_if = "is_zero")]
        units: u64,
        /// `on_conflict = WAIT` with this `wait_timeout`; 0 = `FAIL`.
        #[serde(default, skip_serializing_if = "is_zero")]
        wait_ms: u64,
        /// This resource's part of an `AcquireMany` (SPEC §4.25): the call's number, shared
        /// by the record of each resource it named; 0 = a plain `Acquire`.
        #[serde(default, skip_serializing_if = "is_zero")]
        many: u64,
        /// A lease on this session (SPEC §4.24; `ttl_ms` is then the session's): it lives
        /// while the session does. Empty = a lease of its own.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        session_id: String,
        /// With `session_id`: the invocation of the session's creation, or of a renewal of it,
        /// that was answered before this call. The session, and so the lease, lives at least
        /// until then + `ttl_ms`·(1−ε) unless it is closed (sessions have no grace).
        #[serde(default, skip_serializing_if = "is_zero")]
        session_alive_ns: u64,
    },
    Renew {
        resource: String,
        holder: String,
        lease_id: String,
        token: u64,
        ttl_ms: u64,
        /// It also replaced the lease's metadata (rules version 2, spec §4.3).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        sets_metadata: bool,
    },
    Release {
        resource: String,
        holder: String,
        lease_id: String,
        token: u64,
    },
    /// `Transfer` of (holder, token) to `to_holder`.
    Transfer {
        resource: String,
        holder: String,
        lease_id: String,
        token: u64,
        to_holder: String,
    },
    /// `Validate` by fencing token.
    Validate { resource: String, token: u64 },
    /// Linearizable `GetResource` sent to node `node`.
    Read { resource: String, node: u64 },
    /// Linearizable `ListLeases(holder)`, as far as it concerns `resource` (a read of all the
    /// holder's leases is, on each resource, a read of that resource).
    ListLeases { resource: String, holder: String },
    /// `CancelWait` of the holder's wait on the resource.
    CancelWait { resource: String, holder: String },
    /// `CreateSession` for `holder` (SPEC §4.24). The harness gives every session a holder
    /// of its own, so a session's leases are exactly its holder's.
    CreateSession { holder: String, ttl_ms: u64 },
    /// `RenewSession` of the holder's session, whose ttl is `ttl_ms`.
    RenewSession {
        holder: String,
        session_id: String,
        ttl_ms: u64,
    },
    /// `CloseSession`: every lease of the holder ends, every wait of it is cancelled.
    CloseSession { holder: String, session_id: String },
    /// A write to the simulated downstream fenced store (local to the harness). `shared`: the
    /// writer holds a shared lease (its token does not raise the store's bar). `register`: a
    /// write to the `fenced` workload's register in PostgreSQL instead, through the guard
    /// (tenure-guard; exclusive, so the same rule) unless the run plants `unguarded-writes`.
    Write {
        resource: String,
        holder: String,
        token: u64,
        #[serde(default, skip_serializing_if = "is_false")]
        shared: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        register: bool,
    },
}

impl Call {
    /// The call's kind, as reports name it.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Acquire { .. } => "acquire",
            Call::Renew { .. } => "renew",
            Call::Release { .. } => "release",
            Call::Transfer { .. } => "transfer",
            Call::Validate { .. } => "validate",
            Call::Read { .. } => "read",
            Call::ListLeases { .. } => "list",
            Call::CancelWait { .. } => "cancel_wait",
            Call::Write { .. } => "write",
            Call::CreateSession { .. } => "create_session",
            Call::RenewSession { .. } => "renew_session",
            Call::CloseSession { .. } => "close_session",
        }
    }

    /// The session the call concerns, if it names one.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Call::Acquire { session_id, .. } if !session_id.is_empty() => Some(session_id),
            Call::RenewSession { session_id, .. } | Call::CloseSession { session_id, .. } => {
                Some(session_id)
            }
            _ => None,
        }
    }

    /// A call on a session as a whole (create, renew, close): it names no resource.
    pub fn is_session(&self) -> bool {
        matches!(
            self,
            Call::CreateSession { .. } | Call::RenewSession { .. } | Call::CloseSession { .. }
        )
    }

    /// The resource the call concerns; "" for a call on a session as a whole.
    pub fn resource(&self) -> &str {
        match self {
            Call::Acquire { resource, .. }
            | Call::Renew { resource, .. }
            | Call::Release { resource, .. }
            | Call::Transfer { resource, .. }
            | Call::Validate { resource, .. }
            | Call::Read { resource, .. }
            | Call::ListLeases { resource, .. }
            | Call::CancelWait { resource, .. }
            | Call::Write { resource, .. } => resource,
            Call::CreateSession { .. } | Call::RenewSession { .. } | Call::CloseSession { .. } => {
                ""
            }
        }
    }

    /// The client identity that made the call, if it names one.
    pub fn holder(&self) -> Option<&str> {
        match self {
            Call::Acquire { holder, .. }
            | Call::Renew { holder, .. }
            | Call::Release { holder, .. }
            | Call::Transfer { holder, .. }
            | Call::ListLeases { holder, .. }
            | Call::CancelWait { holder, .. }
            | Call::Write { holder, .. }
            | Call::CreateSession { holder, .. }
            | Call::RenewSession { holder, .. }
            | Call::CloseSession { holder, .. } => Some(holder),
            Call::Validate { .. } | Call::Read { .. } => None,
        }
    }

    /// `acquire(c1, read 2u, ttl 1000ms)`, `acquire(c1, ttl 1000ms, wait 3000ms)`.
    pub fn describe(&self) -> String {
        match self {
            Call::Acquire {
                holder,
                ttl_ms,
                mode,
                units,
                wait_ms,
                many,
                session_id,
                ..
            } => {
                let mode = match mode {
                    Mode::Exclusive => String::new(),
                    m => format!("{} {units}u, ", m.name()),
                };
                let wait = match wait_ms {
                    0 => String::new(),
                    ms => format!(", wait {ms}ms"),
                };
                let many = match many {
                    0 => String::new(),
                    n => format!(", many #{n}"),
                };
                let on = match session_id.as_str() {
                    "" => String::new(),
                    id => format!(", on {id}"),
                };
                format!("acquire({holder}, {mode}ttl {ttl_ms}ms{wait}{many}{on})")
            }
            Call::CreateSession { holder, ttl_ms } => {
                format!("create_session({holder}, ttl {ttl_ms}ms)")
            }
            Call::RenewSession {
                holder, session_id, ..
            } => {
                format!("renew_session({holder}, {session_id})")
            }
            Call::CloseSession { holder, session_id } => {
                format!("close_session({holder}, {session_id})")
            }
            Call::Renew {
                holder,
                token,
                ttl_ms,
                sets_metadata,
                ..
            } => format!(
                "renew({holder}, token {token}, ttl {ttl_ms}ms{})",
                if *sets_metadata { ", metadata" } else { "" }
            ),
            Call::Release { holder, token, .. } => format!("release({holder}, token {token})"),
            Call::Transfer {
                holder,
                token,
                to_holder,
                ..
            } => format!("transfer({holder}, token {token} → {to_holder})"),
            Call::Validate { token, .. } => format!("validate(token {token})"),
            Call::Read { node, .. } => format!("read(node {node})"),
            Call::ListLeases { holder, .. } => format!("list_leases({holder})"),
            Call::CancelWait { holder, .. } => format!("cancel_wait({holder})"),
            Call::Write {
                holder,
                token,
                shared,
                register,
                ..
            } => {
                let shared = if *shared { ", shared" } else { "" };
                let to = if *register { "register_write" } else { "write" };
                format!("{to}({holder}, token {token}{shared})")
            }
        }
    }
}

/// A lease a session's end ended, as `CloseSession` answered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub resource: String,
    pub token: u64,
}

/// What the cluster (or the store) answered, when it answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "v", rename_all = "snake_case")]
pub enum Value {
    /// Acquire granted (a fresh grant or the same lease returned idempotently).
    Granted {
        token: u64,
        lease_id: String,
    },
    /// Acquire answered but not granted; `holder`/`token` of the first current lease when
    /// reported, `holders` every current lease (histories before shared modes lack it).
    Refused {
        reason: String,
        holder: Option<String>,
        token: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        holders: Vec<Held>,
    },
    Renewed {
        token: u64,
    },
    Released {
        token: u64,
    },
    /// Transfer done: the new holder's lease, its token and its mode and units.
    Transferred {
        token: u64,
        lease_id: String,
        #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
        mode: Mode,
        #[serde(default, skip_serializing_if = "is_zero")]
        units: u64,
    },
    Validated {
        valid: bool,
        reason: String,
    },
    /// What a linearizable read saw: `holder`/`token` of the first live lease, `leases` every
    /// live lease (histories before shared modes lack it), and the applied log index it was
    /// read at (`revision`; 0 in histories before quotas).
    Read {
        holder: Option<String>,
        token: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        leases: Vec<Held>,
        #[serde(default, skip_serializing_if = "is_zero")]
        revision: u64,
    },
    /// `ListLeases`: the holder's live leases on the call's resource.
    Leases {
        leases: Vec<Held>,
    },
    /// `CancelWait`: whether it removed a wait, and the index of the entry that decided it.
    WaitCancelled {
        cancelled: bool,
        revision: u64,
    },
    /// `CreateSession`: the new session's id.
    Session {
        session_id: String,
    },
    /// `RenewSession` renewed the session.
    SessionRenewed,
    /// `CloseSession` ended the session, and with it these leases.
    SessionClosed {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        leases: Vec<Ended>,
    },
    /// The fenced store took the write.
    StoreAccepted,
    /// The fenced store refused the write: it had seen `highest`.
    StoreRejected {
        highest: u64,
    },
}

impl Value {
    /// A read's answer from the leases it saw.
    pub fn read(leases: Vec<Held>) -> Value {
        Value::read_at(leases, 0)
    }

    /// A read's answer from the leases it saw at the applied log index `revision`.
    pub fn read_at(leases: Vec<Held>, revision: u64) -> Value {
        Value::Read {
            holder: leases.first().map(|l| l.holder.clone()),
            token: leases.first().map(|l| l.token),
            leases,
            revision,
        }
    }

    /// Every lease a read saw, also from a history written before shared modes.
    pub fn read_leases(holder: &Option<String>, token: &Option<u64>, leases: &[Held]) -> Vec<Held> {
        if !leases.is_empty() {
            return leases.to_vec();
        }
        match (holder, token) {
            (Some(h), Some(t)) => vec![Held {
                holder: h.clone(),
                token: *t,
                mode: Mode::Exclusive,
                units: 0,
                grace: false,
            }],
            _ => Vec::new(),
        }
    }

    /// `granted token 7`, `refused resource_unavailable (held by c2 token 5)`, …
    pub fn describe(&self) -> String {
        match self {
            Value::Granted { token, .. } => format!("granted token {token}"),
            Value::Refused {
                reason,
                holder,
                token,
                holders,
            } => {
                let mut s = format!("refused {reason}");
                if !holders.is_empty() {
                    s.push_str(&format!(" (held by {})", list(holders)));
                } else if let Some(h) = holder {
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
            Value::Transferred { token, .. } => format!("transferred, new token {token}"),
            Value::Validated { valid, reason } => format!("valid={valid} ({reason})"),
            Value::Read {
                holder,
                token,
                leases,
                ..
            } => {
                let all = Value::read_leases(holder, token, leases);
                match (all.is_empty(), holder) {
                    (false, _) => format!("held by {}", list(&all)),
                    (true, Some(h)) => format!("held by {h}"),
                    (true, None) => "free".to_owned(),
                }
            }
            Value::Leases { leases } if leases.is_empty() => "no lease".to_owned(),
            Value::Leases { leases } => format!("holds {}", list(leases)),
            Value::WaitCancelled {
                cancelled,
                revision,
            } => match cancelled {
                true => format!("cancelled the wait at revision {revision}"),
                false => format!("no wait to cancel (revision {revision})"),
            },
            Value::Session { session_id } => format!("created {session_id}"),
            Value::SessionRenewed => "renewed".to_owned(),
            Value::SessionClosed { leases } => format!(
                "closed, ending {}",
                match leases.len() {
                    0 => "no lease".to_owned(),
                    _ => leases
                        .iter()
                        .map(|l| format!("{} token {}", l.resource, l.token))
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            ),
            Value::StoreAccepted => "accepted".to_owned(),
            Value::StoreRejected { highest } => format!("rejected (store saw {highest})"),
        }
    }
}
