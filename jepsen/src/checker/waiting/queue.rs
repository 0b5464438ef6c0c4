//! The queue as the cluster recorded it: FIFO admissions, waits that end once, no barging,
//! and admissions in the entries that freed capacity.

use std::collections::HashMap;

use super::{anomaly, told, told_about, Grant};
use crate::checker::Anomaly;
use crate::history::{kind_name, Event, EventKind, Nanos, Op};

/// Replays a whole history's queue: FIFO admissions, waits that end once, no barging.
pub(super) fn queue_order(
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

/// Whether anything freed capacity in the entry of `events[i]`, recorded before it.
pub(super) fn freed_before(events: &[Event], i: usize) -> bool {
    let revision = events[i].revision;
    events[..i]
        .iter()
        .rev()
        .take_while(|e| e.revision == revision)
        .any(|e| {
            matches!(
                e.kind,
                EventKind::Released
                    | EventKind::Reclaimed
                    | EventKind::WaitTimedOut
                    | EventKind::WaitCancelled
            )
        })
}

/// Each admission above the retention floor happened in an entry that freed capacity, with
/// that entry's index as its token.
pub(super) fn admissions(
    resource: &str,
    events: &[Event],
    floor: u64,
    (granted, together): (&HashMap<Grant<'_>, &Op>, &super::Together<'_>),
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
        let freed = match together.get(&(event.holder.as_str(), event.revision)) {
            Some(freed_any_room) => *freed_any_room,
            None => freed_before(events, i),
        };
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
