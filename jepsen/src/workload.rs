//! The clients: concurrent holders contending for a small pool of resources, each writing to a
//! simulated downstream fenced store with its token. Some stall past their ttl before writing,
//! as a paused process would. Every call is recorded as invoke → ok / fail / unknown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tenure_client::{pb, prost_duration, Client, Error};
use tokio::time::Instant;

use crate::history::{now_ns, Call, Op, Outcome, Value};

/// Reasons that prove a call did not take effect.
const DEFINITE_FAILURES: &[&str] = &[
    "invalid_argument",
    "invalid_mode",
    "ttl_out_of_range",
    "lifetime_exceeded",
    "insufficient_permissions",
    "lease_not_found",
    "stale_fencing_token",
    "lease_expired",
    "already_held",
    "resource_exhausted",
];

#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub clients: u64,
    pub resources: u64,
    pub ttl_min_ms: u64,
    pub ttl_max_ms: u64,
    /// Chance that a holder stalls for 1.5 × ttl before its next write.
    pub stall_probability: f64,
    /// Deadline of each call, retries included: past it the outcome is unknown.
    pub call_timeout: Duration,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            clients: 12,
            resources: 8,
            ttl_min_ms: 1_000,
            ttl_max_ms: 3_000,
            stall_probability: 0.1,
            call_timeout: Duration::from_secs(2),
        }
    }
}

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

/// The downstream system a lease protects: it keeps the highest token it has seen per
/// resource and refuses any write with a lower one.
#[derive(Default)]
pub struct FencedStore {
    highest: Mutex<HashMap<String, u64>>,
}

impl FencedStore {
    pub fn write(&self, resource: &str, token: u64) -> Value {
        let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        let seen = highest.entry(resource.to_string()).or_insert(0);
        if token >= *seen {
            *seen = token;
            Value::StoreAccepted
        } else {
            Value::StoreRejected { highest: *seen }
        }
    }
}

/// What every client shares.
pub struct Env {
    pub client: Client,
    /// One client per node, for reads through a chosen node.
    pub per_node: Vec<Client>,
    pub recorder: Arc<Recorder>,
    pub store: FencedStore,
    pub config: WorkloadConfig,
}

fn classify(error: &Error) -> Outcome {
    if DEFINITE_FAILURES.contains(&error.reason()) {
        Outcome::Fail {
            reason: error.reason().to_string(),
        }
    } else {
        Outcome::Unknown {
            error: error.to_string(),
        }
    }
}

impl Env {
    pub async fn acquire(
        &self,
        process: u64,
        resource: &str,
        ttl_ms: u64,
    ) -> Option<(u64, String)> {
        let holder = format!("c{process}");
        let call = Call::Acquire {
            resource: resource.into(),
            holder: holder.clone(),
            ttl_ms,
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::AcquireRequest {
            resource: resource.into(),
            holder,
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            ..Default::default()
        };
        let outcome = match self.client.acquire(request).await {
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

    pub async fn renew(
        &self,
        process: u64,
        resource: &str,
        lease_id: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Outcome {
        let holder = format!("c{process}");
        let call = Call::Renew {
            resource: resource.into(),
            holder: holder.clone(),
            lease_id: lease_id.into(),
            token,
            ttl_ms,
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::RenewRequest {
            resource: resource.into(),
            lease_id: lease_id.into(),
            holder,
            fencing_token: token,
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            request_id: String::new(),
        };
        let outcome = match self.client.renew(request).await {
            Ok(_) => Outcome::Ok {
                value: Value::Renewed { token },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub async fn release(
        &self,
        process: u64,
        resource: &str,
        lease_id: &str,
        token: u64,
    ) -> Outcome {
        let holder = format!("c{process}");
        let call = Call::Release {
            resource: resource.into(),
            holder: holder.clone(),
            lease_id: lease_id.into(),
            token,
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::ReleaseRequest {
            resource: resource.into(),
            lease_id: lease_id.into(),
            holder,
            fencing_token: token,
            request_id: String::new(),
        };
        let outcome = match self.client.release(request).await {
            Ok(_) => Outcome::Ok {
                value: Value::Released { token },
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
                let lease = r.resource.and_then(|res| res.leases.into_iter().next());
                Outcome::Ok {
                    value: Value::Read {
                        holder: lease.as_ref().map(|l| l.holder.clone()),
                        token: lease.map(|l| l.fencing_token),
                    },
                }
            }
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub fn write(&self, process: u64, resource: &str, token: u64) -> Value {
        let call = Call::Write {
            resource: resource.into(),
            holder: format!("c{process}"),
            token,
        };
        let pending = self.recorder.invoke(process, call);
        let value = self.store.write(resource, token);
        self.recorder.complete(
            pending,
            Outcome::Ok {
                value: value.clone(),
            },
        );
        value
    }
}

pub fn resource_name(index: u64) -> String {
    format!("r{index}")
}

/// One client until `deadline`: acquire a random resource; if granted, hold it for a few
/// rounds of write → renew (sometimes stalling past the ttl first), then release it or let
/// it expire; otherwise back off. Reads and validations are mixed in.
pub async fn client_loop(env: Arc<Env>, process: u64, seed: u64, deadline: Instant) {
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(process));
    let config = env.config.clone();
    let nodes = env.per_node.len() as u64;
    while Instant::now() < deadline {
        let resource = resource_name(rng.random_range(0..config.resources));
        if rng.random_bool(0.15) {
            env.read(process, &resource, rng.random_range(1..=nodes))
                .await;
            continue;
        }
        let ttl_ms = rng.random_range(config.ttl_min_ms..=config.ttl_max_ms);
        let Some((token, lease_id)) = env.acquire(process, &resource, ttl_ms).await else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
            continue;
        };
        let rounds = rng.random_range(0..=3);
        if rounds == 0 {
            env.write(process, &resource, token);
        }
        let mut held = true;
        for _ in 0..rounds {
            let pause = if rng.random_bool(config.stall_probability) {
                ttl_ms * 3 / 2
            } else {
                ttl_ms / 4
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
            env.write(process, &resource, token);
            if rng.random_bool(0.3) {
                env.validate(process, &resource, token).await;
            }
            if !matches!(
                env.renew(process, &resource, &lease_id, token, ttl_ms)
                    .await,
                Outcome::Ok { .. }
            ) {
                held = false;
                break;
            }
        }
        if held && rng.random_bool(0.8) {
            env.release(process, &resource, &lease_id, token).await;
        }
    }
}
