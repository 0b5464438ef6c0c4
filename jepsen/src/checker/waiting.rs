//! The waiting room (SPEC §4.1, §4.7), on what the cluster recorded — every resource's history,
//! read after the run — and on what the clients were told:
//!
//! * `fifo_violated`: admissions follow the queue: the admitted holder is the oldest waiter
//!   (`queued`, and not yet admitted, timed out or cancelled); every admission, time-out and
//!   cancel ends a wait that was queued; a holder waits at most once per resource at a time;
//! * `barging`: no fresh grant (`acquired`) while anyone waits;
//! * `admission_not_at_free`: an admission happens in the entry that freed capacity — a release,
//!   a reclaim or the end of another wait, recorded before it under the same revision — and its
//!   token is that entry's index (the harness uses no lock delay and no booking, whose ends
//!   admit without such an event);
//! * `grant_unrecorded`: every acquire answered `granted` has the `acquired` or `admitted`
//!   event of its (holder, token), or the `transferred` event that gave it the lease;
//! * `wait_end_unrecorded`: waits answered `wait_timeout` (`wait_cancelled`) have as many
//!   `wait_timed_out` (`wait_cancelled`) events of their holder;
//! * `cancel_revision_wrong`: a `CancelWait` answered `cancelled` names the entry that decided
//!   it (`revision`), which recorded the holder's `wait_cancelled`.
//!
//! The linearizability model sees a granted `WAIT` acquire as a grant somewhere in its call,
//! which admission is; its lease is bounded below from the call's invocation (sound, if loose).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tenure_proto::contract::Reason;

use super::model::{at, describe_op};
use super::retention::Retention;
use super::Anomaly;
use crate::history::{kind_name, Call, Event, EventKind, History, Nanos, Op, Outcome, Value};

/// What the waits of a run came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WaitStats {
    /// `WAIT` acquires.
    pub waits: usize,
    /// …granted at once (their `acquired` event), or after queueing (their `admitted` event).
    pub granted_at_once: usize,
    pub admitted: usize,
    /// …that ended `wait_timeout`, `wait_cancelled`, or with an unknown outcome.
    pub timed_out: usize,
    pub cancelled: usize,
    pub unknown: usize,
    /// …refused for a quota (`waiters`, or `leases` when it would have been granted at once).
    pub quota_exceeded: usize,
    /// `CancelWait` calls that removed a wait.
    pub cancels: usize,
    /// `queued` and `admitted` events in the histories read.
    pub queued_events: usize,
    pub admitted_events: usize,
    /// Resources whose whole history was read and checked.
    pub resources_checked: usize,
}

/// (resource, holder, token) of a lease a client was told it holds.
type Grant<'a> = (&'a str, &'a str, u64);

/// What the resource's history shows of one holder: its grants (token → how it got it), and
/// the revisions of its waits' ends.
#[derive(Default)]
struct Record<'a> {
    grants: HashMap<u64, EventKind>,
    timed_out: Vec<&'a Event>,
    cancelled: Vec<&'a Event>,
}

/// The waiting-room anomalies of `history`, and its wait numbers.
pub(crate) fn check(history: &History, t0: Nanos) -> (Vec<Anomaly>, WaitStats) {
    let retention = Retention::of(history);
    let mut stats = WaitStats::default();
    let mut out = Vec::new();
    let mut granted: HashMap<Grant<'_>, &Op> = HashMap::new();
    for op in &history.ops {
        if let (
            Call::Acquire {
                resource, holder, ..
            },
            Outcome::Ok {
                value: Value::Granted { token, .. },
            },
        ) = (&op.call, &op.outcome)
        {
            granted.entry((resource, holder, *token)).or_insert(op);
        }
    }
    for (resource, events) in &history.events {
        let floor = retention.floor(events);
        stats.queued_events += events
            .iter()
            .filter(|e| e.kind == EventKind::Queued)
            .count();
        stats.admitted_events += events
            .iter()
            .filter(|e| e.kind == EventKind::Admitted)
            .count();
        if floor == 0 {
            stats.resources_checked += 1;
            out.extend(queue_order(resource, events, &granted, t0));
        }
        out.extend(admissions(resource, events, floor, &granted, t0));
    }
    out.extend(answers(history, &retention, &mut stats, t0));
    (out, stats)
}

fn anomaly(kind: &str, resource: &str, message: String, ops: Vec<u64>) -> Anomaly {
    Anomaly {
        kind: kind.into(),
        resource: resource.to_owned(),
        message,
        ops,
    }
}

/// The acquire that told `event`'s holder of the grant `event` records, if one did.
fn told<'a>(resource: &str, event: &Event, granted: &HashMap<Grant<'_>, &'a Op>) -> Option<&'a Op> {
    granted
        .get(&(resource, event.holder.as_str(), event.token))
        .copied()
}

/// `: #12 acquire(…) → …`, or nothing without an op.
fn told_about(op: Option<&Op>, t0: Nanos) -> String {
    op.map_or(String::new(), |op| format!(": {}", describe_op(op, t0)))
}

/// Replays a whole history's queue: FIFO admissions, waits that end once, no barging.
fn queue_order(
    resource: &str,
    events: &[Event],
    granted: &HashMap<Grant<'_>, &Op>,
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let mut queue: Vec<&Event> = Vec::new();
    let waiting = |queue: &[&Event], holder: &str| queue.iter().position(|q| q.holder == holder);
    for event in events {
        let op = told(resource, event, granted);
        let ops: Vec<u64> = op.map(|op| op.id).into_iter().collect();
        match event.kind {
            EventKind::Queued => {
                if let Some(k) = waiting(&queue, &event.holder) {
                    out.push(anomaly(
                        "fifo_violated",
                        resource,
                        format!(
                            "{} was queued again at revision {} while its wait queued at revision {} went on",
                            event.holder, event.revision, queue[k].revision
                        ),
                        vec![],
                    ));
                }
                queue.push(event);
            }
            EventKind::Admitted => match waiting(&queue, &event.holder) {
                Some(0) => {
                    queue.remove(0);
                }
                Some(k) => {
                    let ahead: Vec<String> = queue[..k]
                        .iter()
                        .map(|q| format!("{} (queued at revision {})", q.holder, q.revision))
                        .collect();
                    out.push(anomaly(
                        "fifo_violated",
                        resource,
                        format!(
                            "{} (queued at revision {}) was admitted at revision {} ahead of {}{}",
                            event.holder,
                            queue[k].revision,
                            event.revision,
                            ahead.join(", "),
                            told_about(op, t0)
                        ),
                        ops,
                    ));
                    queue.remove(k);
                }
                None => out.push(anomaly(
                    "fifo_violated",
                    resource,
                    format!(
                        "{} was admitted at revision {} without waiting{}",
                        event.holder,
                        event.revision,
                        told_about(op, t0)
                    ),
                    ops,
                )),
            },
            EventKind::WaitTimedOut | EventKind::WaitCancelled => {
                match waiting(&queue, &event.holder) {
                    Some(k) => {
                        queue.remove(k);
                    }
                    None => out.push(anomaly(
                        "fifo_violated",
                        resource,
                        format!(
                            "the wait of {} ended ({}) at revision {}, but it was not waiting",
                            event.holder,
                            kind_name(event.kind),
                            event.revision
                        ),
                        vec![],
                    )),
                }
            }
            EventKind::Acquired if !queue.is_empty() => out.push(anomaly(
                "barging",
                resource,
                format!(
                    "{} was granted token {} at revision {} while {} waited (queued at revision {}){}",
                    event.holder,
                    event.token,
                    event.revision,
                    queue
                        .iter()
                        .map(|q| q.holder.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    queue[0].revision,
                    told_about(op, t0)
                ),
                ops,
            )),
            _ => {}
        }
    }
    out
}

/// Each admission above the retention floor happened in an entry that freed capacity, with
/// that entry's index as its token.
fn admissions(
    resource: &str,
    events: &[Event],
    floor: u64,
    granted: &HashMap<Grant<'_>, &Op>,
    t0: Nanos,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for (i, event) in events.iter().enumerate() {
        if event.kind != EventKind::Admitted || event.revision <= floor {
            continue;
        }
        let entry = events[..i]
            .iter()
            .rev()
            .take_while(|e| e.revision == event.revision);
        let freed = entry.clone().any(|e| {
            matches!(
                e.kind,
                EventKind::Released
                    | EventKind::Reclaimed
                    | EventKind::WaitTimedOut
                    | EventKind::WaitCancelled
            )
        });
        let why = if event.token != event.revision {
            format!(
                "its token {} is not the index of the entry that admitted it",
                event.token
            )
        } else if !freed {
            let before: Vec<String> = entry.map(Event::describe).collect();
            format!(
                "nothing freed {resource} in that entry (before it: {})",
                if before.is_empty() {
                    "no event".to_owned()
                } else {
                    before.join("; ")
                }
            )
        } else {
            continue;
        };
        let op = told(resource, event, granted);
        out.push(anomaly(
            "admission_not_at_free",
            resource,
            format!(
                "{} was admitted at revision {}, but {why}{}",
                event.holder,
                event.revision,
                told_about(op, t0)
            ),
            op.map(|op| op.id).into_iter().collect(),
        ));
    }
    out
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
fn answers(
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
