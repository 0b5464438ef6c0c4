//! The recorded calls: every client call is recorded as invoke → ok / fail / unknown, and the
//! simulated fenced store the leases protect.

mod leases;
mod outcome;
mod reads;
mod sessions;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tenure_client::{pb, Client};
use tokio::sync::mpsc;

use super::{Handoff, WorkloadConfig};
use crate::history::{now_ns, Call, Held, Mode, Op, Outcome, Value};
use outcome::classify;
pub use sessions::SessionRef;

/// Collects the history's ops.
#[derive(Default)]
pub struct Recorder {
    next_id: AtomicU64,
    /// The last number given to an `AcquireMany` call (its records' `many`).
    last_many: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

pub struct Pending {
    id: u64,
    process: u64,
    call: Call,
    invoke_ns: u64,
}

impl Pending {
    /// The op's id in the history.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn invoke_ns(&self) -> u64 {
        self.invoke_ns
    }
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

    /// A number for an `AcquireMany` call, never 0.
    pub fn next_many(&self) -> u64 {
        self.last_many.fetch_add(1, Ordering::Relaxed) + 1
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
    /// The client's name, or its session's holder for a lease on a session.
    pub holder: String,
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
    /// The `fenced` workload's register in PostgreSQL (None: that workload does not run).
    pub register: Option<super::Register>,
    pub config: WorkloadConfig,
    /// Each client's inbox of leases handed over to it (index = process − 1).
    pub inboxes: Vec<mpsc::UnboundedSender<Handoff>>,
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
    pub fn write(&self, process: u64, lease: &Tenancy) -> Value {
        let shared = !lease.mode.is_exclusive();
        let call = Call::Write {
            resource: lease.resource.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            shared,
            register: false,
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
