//! The protected data's own view (workload `fenced`): what the register in PostgreSQL recorded
//! of the writes (`history.register`, read back after the run: per resource, each write with
//! the version it made, in the order the writes took effect), against the clients' answers and
//! the leases Tenure granted.
//!
//! * `register_out_of_token_order`: a write took effect after a write with a higher token: a
//!   holder whose tenure had ended wrote after a later tenure did (the lost update fencing is
//!   for). With the guard, a writer whose token is lower than one already written is refused
//!   and its transaction rolled back.
//! * `register_version_gap`: a resource's versions are not 1, 2, … (a write lost or doubled by
//!   the store, or the log misread).
//! * `register_write_unrecorded`: the register holds a write no client made as recorded (its op
//!   is not a register write of that resource, token and holder, or its writer was told it was
//!   refused, or that it failed before its commit).
//! * `register_write_lost`: a client was told its write took effect, and the register does not
//!   hold it.
//! * `register_token_not_granted`: a write carried a token Tenure never granted that holder on
//!   that resource.
//!
//! The clients' answers are also judged as any fenced store's are (`stale_write_accepted`,
//! `fresh_write_rejected`, in `invariants::fenced_store`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::model::describe_op;
use super::waiting::acquires_granted;
use super::Anomaly;
use crate::history::{Call, History, Nanos, Op, Outcome, RegisterWrite, Value};

/// What the register's writes came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RegisterStats {
    /// Writes the register holds.
    pub writes: usize,
    /// The clients' register writes, by answer: taken, refused by the guard (a later tenure
    /// had written), unknown.
    pub accepted: usize,
    pub refused: usize,
    /// PostgreSQL failed the write before its commit (rolled back).
    pub failed: usize,
    pub unknown: usize,
}

fn register_write(op: &Op) -> Option<(&str, &str, u64)> {
    match &op.call {
        Call::Write {
            resource,
            holder,
            token,
            register: true,
            ..
        } => Some((resource, holder, *token)),
        _ => None,
    }
}

fn anomaly(kind: &str, write: &RegisterWrite, message: String, ops: Vec<u64>) -> Anomaly {
    Anomaly {
        kind: kind.into(),
        resource: write.resource.clone(),
        message,
        ops,
    }
}

pub(crate) fn check(history: &History, t0: Nanos) -> (Vec<Anomaly>, RegisterStats) {
    let mut out = Vec::new();
    let mut stats = RegisterStats {
        writes: history.register.len(),
        ..RegisterStats::default()
    };
    let writes: HashMap<u64, &Op> = history
        .ops
        .iter()
        .filter(|op| register_write(op).is_some())
        .map(|op| (op.id, op))
        .collect();
    for op in writes.values() {
        match &op.outcome {
            Outcome::Ok {
                value: Value::StoreAccepted,
            } => stats.accepted += 1,
            Outcome::Ok {
                value: Value::StoreRejected { .. },
            } => stats.refused += 1,
            Outcome::Fail { .. } | Outcome::QuotaExceeded { .. } => stats.failed += 1,
            _ => stats.unknown += 1,
        }
    }
    let granted: BTreeSet<(&str, &str, u64)> =
        acquires_granted(history).map(|(grant, _)| grant).collect();
    let describe = |id: u64| match writes.get(&id) {
        Some(op) => describe_op(op, t0),
        None => format!("op {id} (no register write in the history)"),
    };

    let mut by_resource: BTreeMap<&str, Vec<&RegisterWrite>> = BTreeMap::new();
    for write in &history.register {
        by_resource.entry(&write.resource).or_default().push(write);
    }
    for writes_here in by_resource.values_mut() {
        writes_here.sort_by_key(|w| w.version);
        // The write with the highest token so far, in the order they took effect.
        let mut highest: Option<&RegisterWrite> = None;
        let mut previous = 0;
        for write in writes_here.iter() {
            if write.version != previous + 1 {
                out.push(anomaly(
                    "register_version_gap",
                    write,
                    format!(
                        "the register's version {} follows version {previous}: {}",
                        write.version,
                        describe(write.op)
                    ),
                    vec![write.op],
                ));
            }
            previous = write.version;
            match highest {
                Some(before) if before.token > write.token => out.push(anomaly(
                    "register_out_of_token_order",
                    write,
                    format!(
                        "version {} (token {}, {}) took effect after version {} (token {}, {}), a later tenure's: {} after {}",
                        write.version,
                        write.token,
                        write.holder,
                        before.version,
                        before.token,
                        before.holder,
                        describe(write.op),
                        describe(before.op)
                    ),
                    vec![before.op, write.op],
                )),
                _ => highest = Some(write),
            }
        }
    }

    let mut held: BTreeSet<u64> = BTreeSet::new();
    for write in &history.register {
        held.insert(write.op);
        // A write refused, or failed before its commit, is not in the register.
        let made = writes.get(&write.op).filter(|op| {
            register_write(op) == Some((&write.resource, &write.holder, write.token))
                && matches!(
                    op.outcome,
                    Outcome::Ok {
                        value: Value::StoreAccepted
                    } | Outcome::Unknown { .. }
                )
        });
        if made.is_none() {
            out.push(anomaly(
                "register_write_unrecorded",
                write,
                format!(
                    "the register holds version {} (token {}, {}), which no client's write made as recorded: {}",
                    write.version,
                    write.token,
                    write.holder,
                    describe(write.op)
                ),
                vec![write.op],
            ));
        }
        if !granted.contains(&(write.resource.as_str(), write.holder.as_str(), write.token)) {
            out.push(anomaly(
                "register_token_not_granted",
                write,
                format!(
                    "version {} carries token {}, which Tenure never granted {} on this resource: {}",
                    write.version,
                    write.token,
                    write.holder,
                    describe(write.op)
                ),
                vec![write.op],
            ));
        }
    }
    for op in writes.values() {
        let accepted = matches!(
            op.outcome,
            Outcome::Ok {
                value: Value::StoreAccepted
            }
        );
        if accepted && !held.contains(&op.id) {
            let Some((resource, _, _)) = register_write(op) else {
                continue;
            };
            out.push(Anomaly {
                kind: "register_write_lost".into(),
                resource: resource.to_owned(),
                message: format!(
                    "the write was answered as taken, and the register does not hold it: {}",
                    describe_op(op, t0)
                ),
                ops: vec![op.id],
            });
        }
    }
    (out, stats)
}
