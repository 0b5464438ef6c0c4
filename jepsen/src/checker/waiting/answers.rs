//! What the clients were told against what the cluster recorded: grants recorded, waits'
//! ends recorded, cancels at the entry that decided them.

use std::collections::{BTreeMap, HashMap};

use tenure_proto::contract::Reason;

use super::{anomaly, WaitStats};
use crate::checker::model::{at, describe_op};
use crate::checker::retention::Retention;
use crate::checker::Anomaly;
use crate::history::{kind_name, Call, Event, EventKind, History, Nanos, Op, Outcome, Value};

/// What the resource's history shows of one holder: its grants (token → how it got it), and
/// the revisions of its waits' ends.
#[derive(Default)]
struct Record<'a> {
    grants: HashMap<u64, EventKind>,
    timed_out: Vec<&'a Event>,
    cancelled: Vec<&'a Event>,
}

/// What each resource's history shows of each holder.
fn records(history: &History) -> HashMap<(&str, &str), Record<'_>> {
    let mut records: HashMap<(&str, &str), Record<'_>> = HashMap::new();
    for (resource, events) in &history.events {
        for e in events {
            let holder = match e.kind {
                EventKind::Transferred => &e.to_holder,
                _ => &e.holder,
            };
            let record = records.entry((resource.as_str(), holder)).or_default();
            match e.kind {
                EventKind::Acquired | EventKind::Admitted => {
                    record.grants.insert(e.token, e.kind);
                }
                EventKind::Transferred => {
                    record.grants.insert(e.to_token, e.kind);
                }
                EventKind::WaitTimedOut => record.timed_out.push(e),
                EventKind::WaitCancelled => record.cancelled.push(e),
                _ => {}
            }
        }
    }
    records
}

/// The clients' answers against the histories: grants recorded, waits' ends recorded.
pub(super) fn answers(
    history: &History,
    retention: &Retention,
    stats: &mut WaitStats,
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let records = records(history);
    let empty = Record::default();
    // Answers that a wait ended, per (resource, holder, ended with).
    let mut ends: BTreeMap<(&str, &str, &str), Vec<&Op>> = BTreeMap::new();
    for op in &history.ops {
        let (resource, holder) = (op.call.resource(), op.call.holder().unwrap_or_default());
        let waited = matches!(op.call, Call::Acquire { wait_ms, .. } if wait_ms > 0);
        if waited {
            stats.waits += 1;
            match &op.outcome {
                Outcome::Ok {
                    value: Value::Refused { reason, .. },
                } if Reason::WaitTimeout == reason.as_str() => stats.timed_out += 1,
                Outcome::Ok {
                    value: Value::Refused { .. },
                } => stats.cancelled += 1,
                Outcome::Unknown { .. } => stats.unknown += 1,
                Outcome::QuotaExceeded { .. } => stats.quota_exceeded += 1,
                _ => {}
            }
        }
        let Some(events) = history.events.get(resource) else {
            continue;
        };
        let record = records.get(&(resource, holder)).unwrap_or(&empty);
        match (&op.call, &op.outcome) {
            (
                Call::Acquire { .. },
                Outcome::Ok {
                    value: Value::Granted { token, .. },
                },
            ) => match record.grants.get(token) {
                Some(EventKind::Admitted) if waited => stats.admitted += 1,
                Some(_) if waited => stats.granted_at_once += 1,
                Some(_) => {}
                None if *token > retention.floor(events) => out.push(anomaly(
                    "grant_unrecorded",
                    resource,
                    format!(
                        "{holder} was granted token {token}, but {resource}'s history has no acquired, admitted or transferred event that gave it: {}",
                        describe_op(op, t0)
                    ),
                    vec![op.id],
                )),
                None => {}
            },
            (
                Call::Acquire { .. },
                Outcome::Ok {
                    value: Value::Refused { reason, .. },
                },
            ) if waited => ends.entry((resource, holder, reason)).or_default().push(op),
            (
                Call::CancelWait { .. },
                Outcome::Ok {
                    value:
                        Value::WaitCancelled {
                            cancelled: true,
                            revision,
                        },
                },
            ) => {
                stats.cancels += 1;
                let recorded = record.cancelled.iter().any(|e| e.revision == *revision);
                if !recorded && *revision > retention.floor(events) {
                    let nearest = record
                        .cancelled
                        .iter()
                        .min_by_key(|e| e.revision.abs_diff(*revision));
                    let nearest = match nearest {
                        Some(e) => format!(
                            "; the nearest wait_cancelled of {holder} is at revision {}",
                            e.revision
                        ),
                        None => String::new(),
                    };
                    out.push(anomaly(
                        "cancel_revision_wrong",
                        resource,
                        format!(
                            "a CancelWait answered that the entry at revision {revision} removed {holder}'s wait, but that entry recorded no wait_cancelled of {holder}{nearest}: {}",
                            describe_op(op, t0)
                        ),
                        vec![op.id],
                    ));
                }
            }
            _ => {}
        }
    }
    for ((resource, holder, reason), ops) in ends {
        let floor = history
            .events
            .get(resource)
            .map_or(0, |e| retention.floor(e));
        let record = records.get(&(resource, holder)).unwrap_or(&empty);
        let timed_out = Reason::WaitTimeout == reason;
        let recorded = if timed_out {
            &record.timed_out
        } else {
            &record.cancelled
        };
        if floor > 0 || ops.len() <= recorded.len() {
            continue;
        }
        let event = if timed_out {
            EventKind::WaitTimedOut
        } else {
            EventKind::WaitCancelled
        };
        out.push(anomaly(
            "wait_end_unrecorded",
            resource,
            format!(
                "{holder} was told {} times that its wait ended {reason} (the last at {}), but {resource}'s history has {} {} events of {holder}",
                ops.len(),
                at(ops.iter().map(|op| op.complete_ns).max().unwrap_or(0), t0),
                recorded.len(),
                kind_name(event)
            ),
            ops.iter().map(|op| op.id).collect(),
        ));
    }
    out
}
