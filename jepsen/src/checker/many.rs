//! Several resources at once (SPEC §4.25), on what the clients were told and on what the
//! cluster recorded (every resource's history, read after the run, once every wait ended):
//!
//! * `partial_grant`: an `AcquireMany` answered granted got a lease on every resource it
//!   named, all with one token (or, before the raise to rules 3, each the one the holder
//!   already had: told granted before, or granted to an earlier call of unknown outcome as
//!   the cluster recorded); the rooms one entry
//!   granted one holder at once are exactly the rooms one of that holder's calls named; and a
//!   wait, tied to its queuing entry by replaying each room's queue, was queued in exactly one
//!   call's rooms and admitted in all of them or none;
//! * `multi_wait_unended`: every wait queued on these resources ended (admitted, timed out or
//!   cancelled) before the run's histories were read (the run drains the waiting rooms first):
//!   a lost wait, or one whose timeout never fired, is caught; a wait that a deadlock kept out
//!   would still end by its timeout (deadlock freedom is the FIFO checks' and the tests');
//! * `multi_wait_split`: the waits one call queued (one holder, one queuing entry) ended in one
//!   entry, in every room.
//!
//! The cluster's record is judged only when every room was read, above what retention may have
//! dropped in any of them.
//!
//! Each resource's part of a call is also an acquire of that resource, so the lease model, the
//! invariants and the waiting checker judge it as they judge any acquire.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::model::describe_op;
use super::retention::Retention;
use super::waiting::{acquires_granted, anomaly};
use super::Anomaly;
use crate::history::{Call, Event, EventKind, History, Nanos, Op, Outcome, Value};
use crate::nemesis::RAISED;

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

/// The rules version from which an `AcquireMany` answers only one grant's leases again.
const ONE_GRANT_RULES: u32 = 3;

/// Whether the cluster's record has entry `token` granting `holder` exactly the rooms `named`
/// (one call's), or cannot tell (a room's history was not read, or retention may have
/// dropped that entry's events).
fn recorded_grant(history: &History, named: &BTreeSet<&str>, holder: &str, token: u64) -> bool {
    let retention = Retention::of(history);
    for room in named {
        match history.events.get(*room) {
            Some(events) if token > retention.floor(events) => {}
            _ => return true,
        }
    }
    let granted: BTreeSet<&str> = history
        .events
        .iter()
        .filter(|(_, events)| {
            events.iter().any(|e| {
                e.revision == token
                    && e.holder == holder
                    && matches!(e.kind, EventKind::Acquired | EventKind::Admitted)
            })
        })
        .map(|(room, _)| room.as_str())
        .collect();
    granted == *named
}

/// The rooms the call `op` is part of named (its own, for a single acquire).
fn named_by<'a>(calls: &BTreeMap<u64, Vec<&'a Op>>, op: &'a Op) -> BTreeSet<&'a str> {
    match &op.call {
        Call::Acquire { many, .. } if *many != 0 => calls
            .get(many)
            .map(|parts| parts.iter().map(|p| p.call.resource()).collect())
            .unwrap_or_default(),
        call => BTreeSet::from([call.resource()]),
    }
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
    // Which ops were told of each (resource, holder, token) grant.
    let mut granted_by: HashMap<(&str, &str, u64), Vec<u64>> = HashMap::new();
    for (grant, op) in acquires_granted(history) {
        granted_by.entry(grant).or_default().push(op.id);
    }
    // From the raise to rules 3 on, the same claims again answer only one grant's leases.
    let one_grant_from = history.nemesis.iter().find_map(|e| {
        let to: u32 = e.detail.strip_prefix(RAISED)?.trim().parse().ok()?;
        (to >= ONE_GRANT_RULES).then_some(e.end_ns.unwrap_or(e.start_ns))
    });
    // The acquires whose outcome is unknown, by (resource, holder): any may have been granted
    // after its client gave up, with a token nobody was told.
    let mut unknown: HashMap<(&str, &str), Vec<&Op>> = HashMap::new();
    for op in &history.ops {
        if let (Call::Acquire { holder, .. }, Outcome::Unknown { .. }) = (&op.call, &op.outcome) {
            unknown
                .entry((op.call.resource(), holder.as_str()))
                .or_default()
                .push(op);
        }
    }
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
        // Several tokens are right only before rules 3, and only when every lease was already
        // the holder's (the same claims again answered the leases the holder had, each with
        // its own token): told to another of its calls, or granted to an earlier one of
        // unknown outcome that named the resource, as the cluster recorded (or may have, where
        // its record cannot tell).
        let held_before = |op: &&Op| match &op.outcome {
            Outcome::Ok {
                value: Value::Granted { token, .. },
            } => {
                let resource = op.call.resource();
                granted_by
                    .get(&(resource, holder, *token))
                    .is_some_and(|ids| ids.iter().any(|id| *id != op.id))
                    || unknown.get(&(resource, holder)).is_some_and(|ops| {
                        ops.iter().any(|u| {
                            u.invoke_ns < op.complete_ns
                                && recorded_grant(history, &named_by(&calls, u), holder, *token)
                        })
                    })
            }
            _ => false,
        };
        let one_grant_rule = one_grant_from.is_some_and(|raised| parts[0].invoke_ns > raised);
        let mixed = tokens.len() > 1 && (one_grant_rule || !parts.iter().all(held_before));
        if granted > 0 && (granted < parts.len() || mixed) {
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
    // The cluster's record is judged only whole: every room read, and only entries above
    // what retention may have dropped in any of them.
    if rooms.iter().any(|room| history.unread.contains_key(*room)) {
        return (out, stats);
    }
    let retention = Retention::of(history);
    let events: Vec<(&str, &[Event])> = history
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
    let whole_call = |holder: &str, set: &BTreeSet<&str>| {
        named.get(holder).is_some_and(|sets| sets.contains(set))
    };

    // Grants at once: the rooms one entry granted one holder are one call's.
    let mut at_once: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    // Waits, each tied to its queuing entry by replaying every room's queue.
    let mut waits: BTreeMap<(&str, u64), Wait<'_>> = BTreeMap::new();
    for (name, events) in &events {
        let mut open: HashMap<&str, u64> = HashMap::new();
        for e in events.iter().filter(|e| e.revision > floor) {
            let holder = e.holder.as_str();
            match e.kind {
                EventKind::Acquired => {
                    at_once
                        .entry((holder, e.revision))
                        .or_default()
                        .insert(name);
                }
                EventKind::Queued => {
                    open.insert(holder, e.revision);
                    waits
                        .entry((holder, e.revision))
                        .or_default()
                        .queued
                        .insert(name);
                }
                EventKind::Admitted | EventKind::WaitTimedOut | EventKind::WaitCancelled => {
                    let Some(queued) = open.remove(holder) else {
                        continue;
                    };
                    let wait = waits.entry((holder, queued)).or_default();
                    wait.ended.insert(name, e.revision);
                    if e.kind == EventKind::Admitted {
                        wait.admitted.insert(name);
                    }
                }
                _ => {}
            }
        }
    }
    for ((holder, revision), granted) in &at_once {
        if granted.len() > 1 {
            stats.admitted_together += 1;
        }
        if !whole_call(holder, granted) {
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
    for ((holder, queued), wait) in &waits {
        let room = wait.queued.first().copied().unwrap_or_default();
        stats.queued += wait.queued.len();
        stats.ended += wait.ended.len();
        if !whole_call(holder, &wait.queued) {
            out.push(anomaly(
                "partial_grant",
                room,
                format!(
                    "{holder} queued at revision {queued} in {:?}, which none of its AcquireMany calls named whole",
                    wait.queued
                ),
                Vec::new(),
            ));
        }
        if !wait.admitted.is_empty() && wait.admitted != wait.queued {
            out.push(anomaly(
                "partial_grant",
                room,
                format!(
                    "the wait {holder} queued at revision {queued} in {:?} was admitted in {:?} only",
                    wait.queued, wait.admitted
                ),
                Vec::new(),
            ));
        }
        if wait.admitted.len() > 1 {
            stats.admitted_together += 1;
        }
        for name in wait.queued.iter().filter(|n| !wait.ended.contains_key(*n)) {
            out.push(anomaly(
                "multi_wait_unended",
                name,
                format!(
                    "the wait {holder} queued at revision {queued} never ended (admitted, timed out or cancelled)"
                ),
                Vec::new(),
            ));
        }
        let revisions: BTreeSet<u64> = wait.ended.values().copied().collect();
        if revisions.len() > 1 {
            out.push(anomaly(
                "multi_wait_split",
                room,
                format!(
                    "the waits {holder} queued at revision {queued} in {:?} ended at different revisions {revisions:?}",
                    wait.queued
                ),
                Vec::new(),
            ));
        }
    }
    (out, stats)
}

/// One wait of one call, tied together by its queuing entry: the rooms it was queued in, the
/// revision it ended at in each, and the rooms it was admitted in.
#[derive(Default)]
struct Wait<'a> {
    queued: BTreeSet<&'a str>,
    ended: BTreeMap<&'a str, u64>,
    admitted: BTreeSet<&'a str>,
}
