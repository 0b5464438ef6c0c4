//! Several resources at once (SPEC §4.25), on what the clients were told and on what the
//! cluster recorded (every resource's history, read after the run, once every wait ended):
//!
//! * `partial_grant`: an `AcquireMany` answered granted got a lease on every resource it
//!   named, all with one token; and the grants the cluster recorded for one holder at one
//!   revision on these resources are exactly the resources one of that holder's calls named
//!   (never some of them);
//! * `multi_wait_unended`: every wait queued on these resources ended (admitted, timed out or
//!   cancelled) before the run's histories were read: no deadlock, no lost wait;
//! * `multi_wait_split`: the waits one call queued (one holder, one queuing entry) ended in one
//!   entry, in every room.
//!
//! Each resource's part of a call is also an acquire of that resource, so the lease model, the
//! invariants and the waiting checker judge it as they judge any acquire.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::model::describe_op;
use super::retention::Retention;
use super::waiting::anomaly;
use super::Anomaly;
use crate::history::{Call, EventKind, History, Nanos, Op, Outcome, Value};

/// What the `AcquireMany` calls of a run came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ManyStats {
    pub calls: usize,
    /// …answered granted (at once or after waiting).
    pub granted: usize,
    /// Entries that granted one holder several rooms at once (acquired or admitted).
    pub admitted_together: usize,
    /// Waits queued on these resources, and how many of them ended.
    pub queued: usize,
    pub ended: usize,
}

pub(crate) fn check(history: &History, t0: Nanos) -> (Vec<Anomaly>, ManyStats) {
    let mut stats = ManyStats::default();
    let mut out = Vec::new();
    let mut calls: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in &history.ops {
        if let Call::Acquire { many, .. } = &op.call {
            if *many != 0 {
                calls.entry(*many).or_default().push(op);
            }
        }
    }
    stats.calls = calls.len();
    // What each holder's calls named.
    let mut named: HashMap<&str, Vec<BTreeSet<&str>>> = HashMap::new();
    for parts in calls.values() {
        let Some(holder) = parts[0].call.holder() else {
            continue;
        };
        named
            .entry(holder)
            .or_default()
            .push(parts.iter().map(|op| op.call.resource()).collect());
        let tokens: BTreeSet<u64> = parts
            .iter()
            .filter_map(|op| match &op.outcome {
                Outcome::Ok {
                    value: Value::Granted { token, .. },
                } => Some(*token),
                _ => None,
            })
            .collect();
        let granted = parts
            .iter()
            .filter(|op| {
                matches!(
                    op.outcome,
                    Outcome::Ok {
                        value: Value::Granted { .. }
                    }
                )
            })
            .count();
        if granted > 0 {
            stats.granted += 1;
        }
        if granted > 0 && (granted < parts.len() || tokens.len() > 1) {
            out.push(anomaly(
                "partial_grant",
                parts[0].call.resource(),
                format!(
                    "an AcquireMany was told granted on {granted} of its {} resources, with tokens {tokens:?}: {}",
                    parts.len(),
                    describe_op(parts[0], t0)
                ),
                parts.iter().map(|op| op.id).collect(),
            ));
        }
    }
    let rooms: BTreeSet<&str> = calls
        .values()
        .flatten()
        .map(|op| op.call.resource())
        .collect();
    let retention = Retention::of(history);
    let events: Vec<(&str, &[crate::history::Event])> = history
        .events
        .iter()
        .filter(|(name, _)| rooms.contains(name.as_str()))
        .map(|(name, events)| (name.as_str(), events.as_slice()))
        .collect();
    let floor = events
        .iter()
        .map(|(_, events)| retention.floor(events))
        .max()
        .unwrap_or(0);

    // The grants of one entry to one holder, across the rooms.
    let mut grants: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    for (name, events) in &events {
        for e in events.iter().filter(|e| e.revision > floor) {
            if matches!(e.kind, EventKind::Acquired | EventKind::Admitted) {
                grants
                    .entry((e.holder.as_str(), e.revision))
                    .or_default()
                    .insert(name);
            }
        }
    }
    for ((holder, revision), granted) in &grants {
        if granted.len() > 1 {
            stats.admitted_together += 1;
        }
        let asked = named.get(holder).is_some_and(|sets| sets.contains(granted));
        if !asked {
            out.push(anomaly(
                "partial_grant",
                granted.first().copied().unwrap_or_default(),
                format!(
                    "{holder} was granted {granted:?} at revision {revision}, which none of its AcquireMany calls named whole"
                ),
                Vec::new(),
            ));
        }
    }

    // Every wait ends, and the waits of one call end together.
    let mut ends: BTreeMap<(&str, u64), Vec<RoomEnd<'_>>> = BTreeMap::new();
    for (name, events) in &events {
        if retention.floor(events) > 0 {
            continue;
        }
        for (i, queued) in events.iter().enumerate() {
            if queued.kind != EventKind::Queued {
                continue;
            }
            stats.queued += 1;
            let end = events[i + 1..].iter().find(|e| {
                e.holder == queued.holder
                    && matches!(
                        e.kind,
                        EventKind::Admitted | EventKind::WaitTimedOut | EventKind::WaitCancelled
                    )
            });
            if end.is_some() {
                stats.ended += 1;
            }
            ends.entry((queued.holder.as_str(), queued.revision))
                .or_default()
                .push((name, end.map(|e| e.revision)));
        }
    }
    for ((holder, queued), rooms) in &ends {
        for (name, _) in rooms.iter().filter(|(_, end)| end.is_none()) {
            out.push(anomaly(
                "multi_wait_unended",
                name,
                format!(
                    "the wait {holder} queued at revision {queued} never ended (admitted, timed out or cancelled)"
                ),
                Vec::new(),
            ));
        }
        let revisions: BTreeSet<u64> = rooms.iter().filter_map(|(_, end)| *end).collect();
        if revisions.len() > 1 {
            out.push(anomaly(
                "multi_wait_split",
                rooms[0].0,
                format!(
                    "the waits {holder} queued at revision {queued} in {:?} ended at different revisions {revisions:?}",
                    rooms.iter().map(|(name, _)| *name).collect::<Vec<_>>()
                ),
                Vec::new(),
            ));
        }
    }
    (out, stats)
}

/// A room a wait was queued in, and the revision its wait ended at (None: never).
type RoomEnd<'a> = (&'a str, Option<u64>);
