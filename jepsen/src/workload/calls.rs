//! The recorded calls: every client call is recorded as invoke → ok / fail / unknown, and the
//! simulated fenced store the leases protect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tenure_client::{pb, prost_duration, Client, Error, Reason};
use tokio::sync::mpsc;

use super::{Handoff, WorkloadConfig};
use crate::history::{now_ns, Call, Held, Mode, Op, Outcome, Value};

/// Reasons that prove a call did not take effect.
const DEFINITE_FAILURES: &[Reason] = &[
    Reason::InvalidArgument,
    Reason::InvalidMode,
    Reason::TtlOutOfRange,
    Reason::LifetimeExceeded,
    Reason::InsufficientPermissions,
    Reason::LeaseNotFound,
    Reason::StaleFencingToken,
    Reason::LeaseExpired,
    Reason::AlreadyHeld,
    Reason::NotTransferable,
    Reason::ResourceExhausted,
    Reason::WaitingRoomFull,
];

/// Collects the history's ops.
#[derive(Default)]
pub struct Recorder {
    next_id: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

pub struct Pending {
    id: u64,
    process: u64,
    call: Call,
    invoke_ns: u64,
}

impl Recorder {
    pub fn invoke(&self, process: u64, call: Call) -> Pending {
        Pending {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            process,
            call,
            invoke_ns: now_ns(),
        }
    }

    pub fn complete(&self, pending: Pending, outcome: Outcome) -> Outcome {
        let op = Op {
            id: pending.id,
            process: pending.process,
            call: pending.call,
            invoke_ns: pending.invoke_ns,
            complete_ns: now_ns(),
            outcome: outcome.clone(),
        };
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
        outcome
    }

    pub fn take(&self) -> Vec<Op> {
        let mut ops = std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()));
        ops.sort_by_key(|op| op.invoke_ns);
        ops
    }
}

/// The downstream system a lease protects: it keeps, per resource, the highest token an
/// exclusive holder wrote with, and refuses any write (shared or exclusive) with a lower one
/// (SPEC §1: co-holders' tokens are not ordered against each other).
#[derive(Default)]
pub struct FencedStore {
    highest: Mutex<HashMap<String, u64>>,
}

impl FencedStore {
    pub fn write(&self, resource: &str, token: u64, shared: bool) -> Value {
        let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        let seen = highest.entry(resource.to_string()).or_insert(0);
        if token >= *seen {
            if !shared {
                *seen = token;
            }
            Value::StoreAccepted
        } else {
            Value::StoreRejected { highest: *seen }
        }
    }
}

/// A lease a client holds (granted, or handed over by a transfer).
#[derive(Clone, Debug)]
pub struct Tenancy {
    pub resource: String,
    pub lease_id: String,
    pub token: u64,
    pub mode: Mode,
    pub transferable: bool,
}

/// An acquire with `on_conflict = WAIT`.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    /// The request's `wait_timeout`.
    pub timeout_ms: u64,
    /// Give up on the call this early (before the wait can have ended): its outcome is then
    /// unknown, and the node holding it removes the wait, or the wait times out.
    pub give_up_after: Option<Duration>,
}

/// What every client shares. The clients call as the run's client principal (`--secure`:
/// held to the quotas the run set); the watchers as an admin, since watching every resource
/// needs an admin (or a quota that allows it).
pub struct Env {
    pub client: Client,
    /// One client per node, for reads through a chosen node.
    pub per_node: Vec<Client>,
    /// One admin client per node, for the watchers.
    pub watch_per_node: Vec<Client>,
    pub recorder: std::sync::Arc<Recorder>,
    pub store: FencedStore,
    pub config: WorkloadConfig,
    /// Each client's inbox of leases handed over to it (index = process − 1).
    pub inboxes: Vec<mpsc::UnboundedSender<Handoff>>,
}

/// The quota and limit of a refusal for a quota: `resource_exhausted` with the message
/// "principal P is at its QUOTA quota (LIMIT)" (the node's `Rejection::QuotaExceeded`; the
/// client keeps the reason and the message, not the error details that carry them too).
fn quota_refusal(error: &Error) -> Option<(String, u64)> {
    let Error::Status {
        reason, message, ..
    } = error
    else {
        return None;
    };
    if Reason::ResourceExhausted != reason.as_str() {
        return None;
    }
    let (_, rest) = message.rsplit_once(" is at its ")?;
    let (quota, limit) = rest.split_once(" quota (")?;
    let limit = limit.strip_suffix(')')?.parse().ok()?;
    let named = !quota.is_empty() && quota.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    named.then(|| (quota.to_owned(), limit))
}

fn classify(error: &Error) -> Outcome {
    if let Some((quota, limit)) = quota_refusal(error) {
        Outcome::QuotaExceeded { quota, limit }
    } else if error
        .reason()
        .is_some_and(|reason| DEFINITE_FAILURES.contains(&reason))
    {
        Outcome::Fail {
            reason: error.reason_str().to_string(),
        }
    } else {
        Outcome::Unknown {
            error: error.to_string(),
        }
    }
}

pub fn holder_name(process: u64) -> String {
    format!("c{process}")
}

fn pb_mode(mode: Mode) -> pb::LeaseMode {
    match mode {
        Mode::Exclusive => pb::LeaseMode::Exclusive,
        Mode::Read => pb::LeaseMode::Read,
        Mode::Write => pb::LeaseMode::Write,
    }
}

fn mode_of(lease: &pb::Lease) -> Mode {
    match pb::LeaseMode::try_from(lease.mode) {
        Ok(pb::LeaseMode::Read) => Mode::Read,
        Ok(pb::LeaseMode::Write) => Mode::Write,
        _ => Mode::Exclusive,
    }
}

/// A lease as the history records what an answer showed.
pub fn held(lease: &pb::Lease) -> Held {
    Held {
        holder: lease.holder.clone(),
        token: lease.fencing_token,
        mode: mode_of(lease),
        units: lease.units,
        grace: lease.status == pb::LeaseStatus::Grace as i32,
    }
}

impl Env {
    /// `Acquire`, waiting in the queue with `wait`; the lease if granted.
    pub async fn acquire(
        &self,
        process: u64,
        resource: &str,
        ttl_ms: u64,
        (mode, units): (Mode, u64),
        wait: Option<Wait>,
    ) -> Option<(u64, String)> {
        let holder = holder_name(process);
        let call = Call::Acquire {
            resource: resource.into(),
            holder: holder.clone(),
            ttl_ms,
            mode,
            units,
            wait_ms: wait.map_or(0, |w| w.timeout_ms),
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::AcquireRequest {
            resource: resource.into(),
            holder,
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            mode: pb_mode(mode) as i32,
            units,
            on_conflict: match wait {
                Some(_) => pb::OnConflict::Wait as i32,
                None => pb::OnConflict::Fail as i32,
            },
            wait_timeout: wait.map(|w| prost_duration(Duration::from_millis(w.timeout_ms))),
            ..Default::default()
        };
        let answer = match wait.and_then(|w| w.give_up_after) {
            Some(after) => tokio::time::timeout(after, self.client.acquire(request))
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Local(format!(
                        "gave up waiting after {}ms",
                        after.as_millis()
                    )))
                }),
            None => self.client.acquire(request).await,
        };
        let outcome = match answer {
            Ok(r) if r.granted => match r.lease {
                Some(lease) => Outcome::Ok {
                    value: Value::Granted {
                        token: lease.fencing_token,
                        lease_id: lease.lease_id,
                    },
                },
                None => Outcome::Unknown {
                    error: "granted without a lease".into(),
                },
            },
            Ok(r) => {
                let current = r.holders.first();
                Outcome::Ok {
                    value: Value::Refused {
                        reason: r.reason,
                        holder: current.map(|l| l.holder.clone()),
                        token: current.map(|l| l.fencing_token),
                        holders: r.holders.iter().map(held).collect(),
                    },
                }
            }
            Err(e) => classify(&e),
        };
        match self.recorder.complete(pending, outcome) {
            Outcome::Ok {
                value: Value::Granted { token, lease_id },
            } => Some((token, lease_id)),
            _ => None,
        }
    }

    /// `CancelWait` of this client's wait on `resource`.
    pub async fn cancel_wait(&self, process: u64, resource: &str) -> Outcome {
        let holder = holder_name(process);
        let call = Call::CancelWait {
            resource: resource.into(),
            holder: holder.clone(),
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::CancelWaitRequest {
            resource: resource.into(),
            holder,
            request_id: String::new(),
        };
        let outcome = match self.client.cancel_wait(request).await {
            Ok(r) => Outcome::Ok {
                value: Value::WaitCancelled {
                    cancelled: r.cancelled,
                    revision: r.revision,
                },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub async fn renew(&self, process: u64, lease: &Tenancy, ttl_ms: u64) -> Outcome {
        let holder = holder_name(process);
        let call = Call::Renew {
            resource: lease.resource.clone(),
            holder: holder.clone(),
            lease_id: lease.lease_id.clone(),
            token: lease.token,
            ttl_ms,
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::RenewRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder,
            fencing_token: lease.token,
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            request_id: String::new(),
        };
        let outcome = match self.client.renew(request).await {
            Ok(_) => Outcome::Ok {
                value: Value::Renewed { token: lease.token },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub async fn release(&self, process: u64, lease: &Tenancy) -> Outcome {
        let holder = holder_name(process);
        let call = Call::Release {
            resource: lease.resource.clone(),
            holder: holder.clone(),
            lease_id: lease.lease_id.clone(),
            token: lease.token,
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::ReleaseRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder,
            fencing_token: lease.token,
            request_id: String::new(),
        };
        let outcome = match self.client.release(request).await {
            Ok(_) => Outcome::Ok {
                value: Value::Released { token: lease.token },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    /// `Transfer` of `lease` to client `to`.
    pub async fn transfer(&self, process: u64, lease: &Tenancy, to: u64) -> Outcome {
        let holder = holder_name(process);
        let call = Call::Transfer {
            resource: lease.resource.clone(),
            holder: holder.clone(),
            lease_id: lease.lease_id.clone(),
            token: lease.token,
            to_holder: holder_name(to),
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::TransferRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder,
            fencing_token: lease.token,
            to_holder: holder_name(to),
            ..Default::default()
        };
        let outcome = match self.client.transfer(request).await {
            Ok(r) => match r.lease {
                Some(new) => Outcome::Ok {
                    value: Value::Transferred {
                        token: new.fencing_token,
                        mode: mode_of(&new),
                        units: new.units,
                        lease_id: new.lease_id,
                    },
                },
                None => Outcome::Unknown {
                    error: "transferred without a lease".into(),
                },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub async fn validate(&self, process: u64, resource: &str, token: u64) -> Outcome {
        let pending = self.recorder.invoke(
            process,
            Call::Validate {
                resource: resource.into(),
                token,
            },
        );
        let request = pb::ValidateRequest {
            resource: resource.into(),
            fencing_token: token,
            ..Default::default()
        };
        let outcome = match self.client.validate(request).await {
            Ok(r) => Outcome::Ok {
                value: Value::Validated {
                    valid: r.valid,
                    reason: r.reason,
                },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    /// A linearizable `GetResource` through node `node` (1-based).
    pub async fn read(&self, process: u64, resource: &str, node: u64) -> Outcome {
        let pending = self.recorder.invoke(
            process,
            Call::Read {
                resource: resource.into(),
                node,
            },
        );
        let client = &self.per_node[(node - 1) as usize];
        let request = pb::GetResourceRequest {
            name: resource.into(),
            consistency: pb::Consistency::Linearizable as i32,
        };
        let outcome = match client.get_resource(request).await {
            Ok(r) => {
                let (leases, count) = r
                    .resource
                    .map(|res| (res.leases, res.lease_count))
                    .unwrap_or_default();
                if count as usize > leases.len() {
                    // A view cut short proves nothing about the leases it leaves out.
                    Outcome::Unknown {
                        error: format!("the read shows {} of {count} leases", leases.len()),
                    }
                } else {
                    Outcome::Ok {
                        value: Value::read_at(leases.iter().map(held).collect(), r.read_revision),
                    }
                }
            }
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    /// A linearizable `ListLeases` of this client's leases, recorded as what it shows of
    /// `resource`; the lease there, if any.
    pub async fn list_leases(&self, process: u64, resource: &str) -> Option<pb::Lease> {
        let holder = holder_name(process);
        let pending = self.recorder.invoke(
            process,
            Call::ListLeases {
                resource: resource.into(),
                holder: holder.clone(),
            },
        );
        let request = pb::ListLeasesRequest {
            holder,
            consistency: pb::Consistency::Linearizable as i32,
            ..Default::default()
        };
        let (outcome, found) = match self.client.list_leases(request).await {
            // Every lease of one holder fits the first page (a client holds a few at most).
            Ok(r) => {
                let mine: Vec<pb::Lease> = r
                    .leases
                    .into_iter()
                    .filter(|l| l.resource == resource)
                    .collect();
                let value = Value::Leases {
                    leases: mine.iter().map(held).collect(),
                };
                (Outcome::Ok { value }, mine.into_iter().next())
            }
            Err(e) => (classify(&e), None),
        };
        self.recorder.complete(pending, outcome);
        found
    }

    pub fn write(&self, process: u64, lease: &Tenancy) -> Value {
        let shared = !lease.mode.is_exclusive();
        let call = Call::Write {
            resource: lease.resource.clone(),
            holder: holder_name(process),
            token: lease.token,
            shared,
        };
        let pending = self.recorder.invoke(process, call);
        let value = self.store.write(&lease.resource, lease.token, shared);
        self.recorder.complete(
            pending,
            Outcome::Ok {
                value: value.clone(),
            },
        );
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(reason: &str, message: &str) -> Error {
        Error::Status {
            code: tonic::Code::ResourceExhausted,
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_refusal_for_a_quota_is_its_own_outcome_with_the_quota_and_its_limit() {
        let refused = status(
            "resource_exhausted",
            "principal jepsen-client is at its leases quota (6)",
        );
        assert_eq!(
            classify(&refused),
            Outcome::QuotaExceeded {
                quota: "leases".into(),
                limit: 6
            }
        );
        let waiters = status(
            "resource_exhausted",
            "principal jepsen-client is at its waiters quota (2)",
        );
        assert_eq!(quota_refusal(&waiters), Some(("waiters".into(), 2)));
    }

    #[test]
    fn other_refusals_keep_their_reason() {
        let bookings = status("resource_exhausted", "the resource already has 3 bookings");
        assert_eq!(
            classify(&bookings),
            Outcome::Fail {
                reason: "resource_exhausted".into()
            }
        );
        let busy = status(
            "too_many_requests",
            "principal p is at its leases quota (6)",
        );
        assert!(matches!(classify(&busy), Outcome::Unknown { .. }));
        assert_eq!(
            classify(&Error::Local("gave up".into())),
            Outcome::Unknown {
                error: "gave up".into()
            }
        );
    }
}
