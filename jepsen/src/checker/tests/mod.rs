//! The checker must be shown to fail: small hand-written histories, each with one anomaly,
//! valid controls, and a synthetic history from a ground-truth simulation for speed.
//!
//! * `exclusive`: ad-hoc exclusive leases;
//! * `shared`: shared modes and units, transfers, the renewal grace;
//! * `synthetic`: a ground-truth simulation of exclusive leases;
//! * `pool`: a ground-truth simulation of a shared, transferable resource with a grace;
//! * `reference`: the pruned search against a plain one, on small doctored histories;
//! * `waiting`: the waiting room, on the cluster's recorded events and the clients' answers;
//! * `watch`: watch sessions against the recorded events;
//! * `quota`: quota refusals against what the principal could hold, and the model's no-op.
//! * `sessions`: leases on sessions in the model, the answers about sessions, their ends.
//! * `register`: the `fenced` workload's register (PostgreSQL's record) against the answers.

mod exclusive;
mod many;
mod pool;
mod quota;
mod reference;
mod register;
mod sessions;
mod shared;
mod synthetic;
mod waiting;
mod watch;

use super::*;
use crate::checker::sim::{
    fail, granted, in_invocation_order, ok, read_free, read_held, refused, unknown, SimRng, MS,
};
use crate::history::{
    Call, Event, EventKind, Held, History, Mode, Op, Outcome, ResourcePolicy, Value, WatchSession,
};

const R: &str = "res";

/// A history under construction; times in milliseconds.
struct Builder {
    ops: Vec<Op>,
    resources: std::collections::BTreeMap<String, ResourcePolicy>,
    /// The cluster's record of each resource, as read after the run.
    events: std::collections::BTreeMap<String, Vec<Event>>,
    watches: Vec<WatchSession>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            ops: Vec::new(),
            resources: Default::default(),
            events: Default::default(),
            watches: Vec::new(),
        }
    }

    /// Records an event of `resource` at `revision` (numbered after the revision's others).
    fn event(&mut self, resource: &str, revision: u64, kind: EventKind, holder: &str) -> Event {
        let events = self.events.entry(resource.to_owned()).or_default();
        let seq = events
            .iter()
            .filter(|e| e.revision == revision)
            .map(|e| e.seq + 1)
            .max()
            .unwrap_or(0);
        let token = match kind {
            EventKind::Acquired | EventKind::Admitted => revision,
            _ => 0,
        };
        let event = Event {
            revision,
            seq,
            resource: resource.to_owned(),
            kind,
            holder: holder.to_owned(),
            token,
            to_holder: String::new(),
            to_token: 0,
            session: String::new(),
        };
        events.push(event.clone());
        event
    }

    /// `R` under `policy` instead of the ad-hoc one.
    fn with_policy(policy: ResourcePolicy) -> Self {
        let mut b = Builder::new();
        b.resources.insert(R.to_owned(), policy);
        b
    }

    fn op(&mut self, call: Call, invoke_ms: u64, complete_ms: u64, outcome: Outcome) -> u64 {
        let id = self.ops.len() as u64;
        let process = call
            .holder()
            .map_or(0, |holder| holder.bytes().map(u64::from).sum());
        self.ops.push(Op {
            id,
            process,
            call,
            invoke_ns: invoke_ms * MS,
            complete_ns: complete_ms * MS,
            outcome,
        });
        id
    }

    fn history(&self) -> History {
        let mut ops = self.ops.clone();
        ops.sort_by_key(|op| (op.invoke_ns, op.id));
        History {
            clock_epsilon: 0.02,
            started_ns: 0,
            ops,
            resources: self.resources.clone(),
            events: self.events.clone(),
            watches: self.watches.clone(),
            ..History::default()
        }
    }

    fn check(&self) -> CheckReport {
        let history = self.history();
        check(
            &history,
            &CheckParams {
                clock_epsilon: history.clock_epsilon,
                max_states_per_resource: 2_000_000,
            },
        )
    }
}

/// The search budget that stands for "checks quickly" in tests: a deterministic bound on the
/// effort, where a wall-clock bound would be flaky (timings are the ignored benchmarks' job).
const QUICK_STATES: usize = 50_000;

fn acquire(holder: &str, ttl_ms: u64) -> Call {
    acquire_in(holder, Mode::Exclusive, 0, ttl_ms)
}
/// An exclusive acquire with `on_conflict = WAIT`.
fn acquire_waiting(holder: &str, ttl_ms: u64, wait_ms: u64) -> Call {
    let mut call = acquire(holder, ttl_ms);
    if let Call::Acquire { wait_ms: wait, .. } = &mut call {
        *wait = wait_ms;
    }
    call
}
fn acquire_in(holder: &str, mode: Mode, units: u64, ttl_ms: u64) -> Call {
    Call::Acquire {
        resource: R.into(),
        holder: holder.into(),
        ttl_ms,
        mode,
        units,
        wait_ms: 0,
        many: 0,
        session_id: String::new(),
        session_alive_ns: 0,
    }
}
fn renew(holder: &str, token: u64, ttl_ms: u64) -> Call {
    Call::Renew {
        resource: R.into(),
        holder: holder.into(),
        lease_id: format!("lse_{token}_0"),
        token,
        ttl_ms,
        sets_metadata: false,
    }
}
fn release(holder: &str, token: u64) -> Call {
    Call::Release {
        resource: R.into(),
        holder: holder.into(),
        lease_id: format!("lse_{token}_0"),
        token,
    }
}
fn validate(token: u64) -> Call {
    Call::Validate {
        resource: R.into(),
        token,
    }
}
fn read(node: u64) -> Call {
    Call::Read {
        resource: R.into(),
        node,
    }
}
fn write(holder: &str, token: u64) -> Call {
    Call::Write {
        resource: R.into(),
        holder: holder.into(),
        token,
        shared: false,
        register: false,
    }
}

fn kinds(report: &CheckReport) -> Vec<&str> {
    report.anomalies.iter().map(|a| a.kind.as_str()).collect()
}

fn assert_ok(report: &CheckReport) {
    assert!(report.ok(), "expected a clean report, got {:#?}", report);
    assert!(report.linearizable);
}

fn the<'a>(report: &'a CheckReport, kind: &str) -> &'a Anomaly {
    match report.of_kind(kind).into_iter().next() {
        Some(a) => {
            eprintln!("{kind}: {}", a.message);
            a
        }
        None => panic!("expected a {kind} anomaly, got {:#?}", report.anomalies),
    }
}
