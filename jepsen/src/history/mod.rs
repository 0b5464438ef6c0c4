//! The history of a run: every client call as invoke → ok / fail / quota_exceeded / unknown,
//! every fenced-store write, every nemesis event, each stamped with the harness's monotonic
//! clock, the policy of every registered resource and the quotas the run set (so a saved
//! history can be checked again without the cluster), and what the cluster recorded itself:
//! every resource's history read after the run, and every watch session (`events`). Written as
//! JSON lines, one [`Record`] a line; read back by the checker and the report.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

mod events;
mod lease;
mod ops;
pub use events::{
    kind_name, Event, EventKey, EventKind, SessionEnd, WatchMessage, WatchScope, WatchSession,
};
pub use lease::{Held, Mode, ResourcePolicy};
pub use ops::{Call, Ended, Value};

/// Nanoseconds on the harness's CLOCK_MONOTONIC (one clock for every client and the nemesis).
pub type Nanos = u64;

pub fn now_ns() -> Nanos {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64,
        Err(_) => 0,
    }
}

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Ok {
        value: Value,
    },
    /// Definitely did not take effect (an error reason of SPEC §3 that proves it).
    Fail {
        reason: String,
    },
    /// Refused because the caller's principal is at its `quota` (`resource_exhausted`, the
    /// quota's name and limit in the error): definitely did not take effect, and legal only
    /// while the principal really holds `limit` of what that quota counts.
    QuotaExceeded {
        quota: String,
        limit: u64,
    },
    /// May or may not have taken effect (timeout, unavailable, transport error).
    Unknown {
        error: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Unique, in invocation order.
    pub id: u64,
    /// The client (one holder identity per client).
    pub process: u64,
    pub call: Call,
    pub invoke_ns: Nanos,
    /// When the answer arrived; for `Unknown`, when the client gave up.
    pub complete_ns: Nanos,
    pub outcome: Outcome,
}

/// The per-principal quotas a run set for the principal its clients call as (`--secure`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaSettings {
    pub principal: String,
    /// Limit by quota name (`leases`, `waiters`, …).
    pub limits: BTreeMap<String, u64>,
}

impl QuotaSettings {
    /// `leases 6, waiters 2`.
    pub fn describe(&self) -> String {
        self.limits
            .iter()
            .map(|(quota, limit)| format!("{quota} {limit}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NemesisEvent {
    /// `partition`, `kill`, `pause`, `clock`, `loss`, `heal`, …
    pub kind: String,
    /// Human-readable: which nodes, which split, which skew.
    pub detail: String,
    pub start_ns: Nanos,
    /// When the fault was healed (None: an instantaneous event or never healed).
    pub end_ns: Option<Nanos>,
    /// A power cut's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerCut>,
}

/// What one power cut did (`crate::power`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerCut {
    /// The host slots that lost power.
    pub nodes: Vec<u64>,
    /// How many nodes the cluster has.
    pub of: u64,
    /// `drop`, `tear` or `reorder`.
    pub mode: String,
    pub dropped_bytes: u64,
    pub kept_bytes: u64,
    /// Creations, removals and renames undone.
    pub undone: u64,
    /// Whether a target was inside a sync (of written, unsynced data) when power went.
    #[serde(default)]
    pub during_sync: bool,
}

impl PowerCut {
    /// Whether a majority of the nodes lost power at once.
    pub fn majority(&self) -> bool {
        self.nodes.len() as u64 * 2 > self.of
    }
}

/// One write as the `fenced` workload's register in PostgreSQL recorded it (read back after
/// the run): the register's `version` it made (1, 2, … per resource, in the order the writes
/// took effect), the token and holder it carried, and the id of the op that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterWrite {
    pub resource: String,
    pub version: u64,
    pub token: u64,
    pub holder: String,
    pub op: u64,
}

/// One line of a history file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// Run parameters: seed, nodes, nemeses, clock-rate bound.
    Meta {
        seed: u64,
        nodes: u64,
        nemeses: Vec<String>,
        clock_epsilon: f64,
        started_ns: Nanos,
    },
    Op(Op),
    Nemesis(NemesisEvent),
    /// A leader change observed by the harness (for the report and the activity check).
    Leader {
        at_ns: Nanos,
        node: u64,
        term: u64,
    },
    /// A resource the run registered, with its policy (others are ad hoc).
    Resource {
        name: String,
        policy: ResourcePolicy,
    },
    /// The quotas the run set for its clients' principal before they started.
    Quotas(QuotaSettings),
    /// A resource's history (ascending, every page, linearizable) read after the run.
    Events {
        resource: String,
        events: Vec<Event>,
    },
    /// A resource whose history could not be read after the run.
    Unread {
        resource: String,
        error: String,
    },
    /// One watch session.
    Watch(WatchSession),
    /// A write the `fenced` workload's register recorded.
    Register(RegisterWrite),
}

/// A whole run, in memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub seed: u64,
    pub nodes: u64,
    pub nemeses: Vec<String>,
    /// Largest clock-rate error injected (0.01 = 1 %): the checker's ε.
    pub clock_epsilon: f64,
    pub started_ns: Nanos,
    pub ops: Vec<Op>,
    pub nemesis: Vec<NemesisEvent>,
    pub leaders: Vec<(Nanos, u64, u64)>,
    /// Registered resources and their policies.
    pub resources: BTreeMap<String, ResourcePolicy>,
    /// The quotas the clients ran under (None: the clients were admins, or an older history).
    pub quotas: Option<QuotaSettings>,
    /// Every resource's history as the cluster recorded it, read after the run.
    pub events: BTreeMap<String, Vec<Event>>,
    /// Resources whose history could not be read after the run, with the error.
    pub unread: BTreeMap<String, String>,
    /// Every watch session, by watcher and in the order they were opened.
    pub watches: Vec<WatchSession>,
    /// What the `fenced` workload's register holds after the run: every write it took, by
    /// resource and version (empty without that workload).
    pub register: Vec<RegisterWrite>,
}

impl History {
    /// The power cuts of the run, in order.
    pub fn power_cuts(&self) -> impl Iterator<Item = &PowerCut> {
        self.nemesis.iter().filter_map(|e| e.power.as_ref())
    }

    pub fn records(&self) -> Vec<Record> {
        let mut records = vec![Record::Meta {
            seed: self.seed,
            nodes: self.nodes,
            nemeses: self.nemeses.clone(),
            clock_epsilon: self.clock_epsilon,
            started_ns: self.started_ns,
        }];
        records.extend(
            self.resources
                .iter()
                .map(|(name, policy)| Record::Resource {
                    name: name.clone(),
                    policy: policy.clone(),
                }),
        );
        records.extend(self.quotas.iter().cloned().map(Record::Quotas));
        records.extend(self.ops.iter().cloned().map(Record::Op));
        records.extend(self.nemesis.iter().cloned().map(Record::Nemesis));
        records.extend(
            self.leaders
                .iter()
                .map(|(at_ns, node, term)| Record::Leader {
                    at_ns: *at_ns,
                    node: *node,
                    term: *term,
                }),
        );
        records.extend(self.events.iter().map(|(resource, events)| Record::Events {
            resource: resource.clone(),
            events: events.clone(),
        }));
        records.extend(self.unread.iter().map(|(resource, error)| Record::Unread {
            resource: resource.clone(),
            error: error.clone(),
        }));
        records.extend(self.watches.iter().cloned().map(Record::Watch));
        records.extend(self.register.iter().cloned().map(Record::Register));
        records
    }

    pub fn push(&mut self, record: Record) {
        match record {
            Record::Meta {
                seed,
                nodes,
                nemeses,
                clock_epsilon,
                started_ns,
            } => {
                self.seed = seed;
                self.nodes = nodes;
                self.nemeses = nemeses;
                self.clock_epsilon = clock_epsilon;
                self.started_ns = started_ns;
            }
            Record::Op(op) => self.ops.push(op),
            Record::Nemesis(event) => self.nemesis.push(event),
            Record::Leader { at_ns, node, term } => self.leaders.push((at_ns, node, term)),
            Record::Resource { name, policy } => {
                self.resources.insert(name, policy);
            }
            Record::Quotas(settings) => self.quotas = Some(settings),
            Record::Events { resource, events } => {
                self.events.insert(resource, events);
            }
            Record::Unread { resource, error } => {
                self.unread.insert(resource, error);
            }
            Record::Watch(session) => self.watches.push(session),
            Record::Register(write) => self.register.push(write),
        }
    }

    pub fn write_jsonl(&self, path: &Path) -> anyhow::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for record in self.records() {
            serde_json::to_writer(&mut out, &record)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        Ok(())
    }

    pub fn read_jsonl(path: &Path) -> anyhow::Result<Self> {
        let mut history = History::default();
        for line in std::io::BufReader::new(std::fs::File::open(path)?).lines() {
            let line = line?;
            if !line.trim().is_empty() {
                history.push(serde_json::from_str(&line)?);
            }
        }
        history.ops.sort_by_key(|op| op.invoke_ns);
        Ok(history)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compat_tests {
    use super::*;

    #[test]
    fn a_line_written_before_shared_modes_still_reads() {
        let acquire: Record = serde_json::from_str(
            r#"{"type":"op","id":0,"process":1,"call":{"f":"acquire","resource":"r","holder":"h","ttl_ms":3000},"invoke_ns":10,"complete_ns":20,"outcome":{"outcome":"ok","value":{"v":"refused","reason":"resource_unavailable","holder":"g","token":4}}}"#,
        )
        .expect("old acquire");
        let Record::Op(op) = acquire else {
            panic!("not an op")
        };
        assert!(matches!(
            op.call,
            Call::Acquire {
                mode: Mode::Exclusive,
                units: 0,
                ..
            }
        ));
        let read: Value =
            serde_json::from_str(r#"{"v":"read","holder":"g","token":4}"#).expect("old read");
        let Value::Read {
            holder,
            token,
            leases,
            ..
        } = &read
        else {
            panic!("not a read")
        };
        assert_eq!(Value::read_leases(holder, token, leases).len(), 1);
    }
}
