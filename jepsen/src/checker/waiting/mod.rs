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

mod answers;
mod queue;

use std::collections::HashMap;

use serde::Serialize;

use super::model::describe_op;
use super::retention::Retention;
use super::Anomaly;
use crate::history::{Call, Event, EventKind, History, Nanos, Op, Outcome, Value};
use answers::answers;
use queue::{admissions, queue_order};

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

/// Every acquire told granted, with the (resource, holder, token) it was told.
pub(super) fn acquires_granted(history: &History) -> impl Iterator<Item = (Grant<'_>, &Op)> {
    history
        .ops
        .iter()
        .filter_map(|op| match (&op.call, &op.outcome) {
            (
                Call::Acquire {
                    resource, holder, ..
                },
                Outcome::Ok {
                    value: Value::Granted { token, .. },
                },
            ) => Some(((resource.as_str(), holder.as_str(), *token), op)),
            _ => None,
        })
}

/// The waiting-room anomalies of `history`, and its wait numbers.
pub(crate) fn check(history: &History, t0: Nanos) -> (Vec<Anomaly>, WaitStats) {
    let retention = Retention::of(history);
    let mut stats = WaitStats::default();
    let mut out = Vec::new();
    let mut granted: HashMap<Grant<'_>, &Op> = HashMap::new();
    for (grant, op) in acquires_granted(history) {
        granted.entry(grant).or_insert(op);
    }
    let together = admitted_together(history);
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
        out.extend(admissions(
            resource,
            events,
            floor,
            (&granted, &together),
            t0,
        ));
    }
    out.extend(answers(history, &retention, &mut stats, t0));
    (out, stats)
}

/// (holder, revision) of admissions recorded in several rooms in one entry (a multi-wait,
/// SPEC §4.25), and whether anything freed any of those rooms in that entry: such a wait is
/// admitted when its last room frees, and its other rooms were free before.
pub(super) type Together<'a> = HashMap<(&'a str, u64), bool>;

fn admitted_together(history: &History) -> Together<'_> {
    let many_rooms: std::collections::BTreeSet<&str> = history
        .ops
        .iter()
        .filter(|op| matches!(op.call, Call::Acquire { many, .. } if many != 0))
        .map(|op| op.call.resource())
        .collect();
    // Where a room of these is unread, or retention may have dropped its events, an admission
    // there may have had company in another room: it is not judged alone.
    let retention = Retention::of(history);
    let blind = many_rooms
        .iter()
        .any(|room| history.unread.contains_key(*room));
    let floor = many_rooms
        .iter()
        .filter_map(|room| history.events.get(*room))
        .map(|events| retention.floor(events))
        .max()
        .unwrap_or(0);
    let mut rooms: HashMap<(&str, u64), (usize, bool)> = HashMap::new();
    for (name, events) in &history.events {
        let unsure = many_rooms.contains(name.as_str());
        for (i, event) in events.iter().enumerate() {
            if event.kind != EventKind::Admitted {
                continue;
            }
            let freed = queue::freed_before(events, i);
            let entry = rooms
                .entry((event.holder.as_str(), event.revision))
                .or_default();
            entry.0 += 1;
            entry.1 |= freed;
            if unsure && (blind || event.revision <= floor) {
                // Counted as company, and as freed: nothing here can say otherwise.
                entry.0 += 1;
                entry.1 = true;
            }
        }
    }
    rooms
        .into_iter()
        .filter(|(_, (count, _))| *count > 1)
        .map(|(key, (_, freed))| (key, freed))
        .collect()
}

pub(super) fn anomaly(kind: &str, resource: &str, message: String, ops: Vec<u64>) -> Anomaly {
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
