//! Sessions (SPEC §4.24), on what the clients were told and on what the cluster recorded
//! (every resource's history, read after the run). The harness gives each session a holder of
//! its own, and sessions have no grace (neither the ad-hoc policy nor the sessions workload's
//! resources have one).
//!
//! * `session_ended_early`: a call naming a session is told `session_not_found` although the
//!   session cannot have expired yet: no close of it had been asked, and its creation or a
//!   renewal answered before the call shows it alive until at least that call's invocation +
//!   ttl·(1−ε);
//! * `session_revived`: a session is renewed, or takes a lease, in a call invoked after another
//!   call was told it had ended (`session_not_found`, or its close answered);
//! * `session_split`: a session's end ends all it carries in one entry: its reclaim reclaims
//!   every lease on it at one revision, and the leases its close answered are released at one
//!   revision (each has its `released` event, else `session_end_unrecorded`);
//! * `outlived_session`: once a session ended (the revision of that entry), no lease on it
//!   ends later, and nothing is granted or queued on it after; a session closed ok was not
//!   also reclaimed, and every lease on it ended;
//! * `session_unnamed`: every event about a lease or wait of a session's holder (`acquired`,
//!   `admitted`, `queued`, `released`, `reclaimed`, `transferred`) names that session.
//!
//! The lease model sees a lease on a session as its holder's lease: acquired on the session,
//! renewed by each renewal of the session, gone at its close (`model::compile`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use tenure_proto::contract::Reason;

use super::model::{describe_op, ttl_floor_ns};
use super::retention::Retention;
use super::waiting::anomaly;
use super::Anomaly;
use crate::history::{Call, Event, EventKind, History, Nanos, Op, Outcome, Value};

/// What the sessions of a run came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SessionStats {
    /// Sessions created (answered ok).
    pub created: usize,
    /// Renewals answered ok.
    pub renewals: usize,
    /// Closes answered ok.
    pub closed: usize,
    /// Leases granted on sessions (answered ok).
    pub leases: usize,
    /// Sessions the cluster's record shows reclaimed (past their expiry), and of them (or of
    /// the closed ones) those whose end ended several leases in one entry.
    pub expired: usize,
    pub ended_together: usize,
}

/// One session as the clients' calls show it.
#[derive(Default)]
struct Known<'a> {
    ttl_ms: u64,
    /// Its creation and the renewals answered ok.
    alive: Vec<&'a Op>,
    /// Calls told `session_not_found`.
    gone: Vec<&'a Op>,
    closes: Vec<&'a Op>,
    /// Acquires on it answered granted.
    granted: Vec<&'a Op>,
}

pub(crate) fn check(history: &History, eps: f64, t0: Nanos) -> (Vec<Anomaly>, SessionStats) {
    let mut stats = SessionStats::default();
    let mut out = Vec::new();
    let mut sessions: BTreeMap<&str, Known<'_>> = BTreeMap::new();
    for op in &history.ops {
        if let (
            Call::CreateSession { ttl_ms, .. },
            Outcome::Ok {
                value: Value::Session { session_id },
            },
        ) = (&op.call, &op.outcome)
        {
            let known = sessions.entry(session_id).or_default();
            known.ttl_ms = *ttl_ms;
            known.alive.push(op);
            stats.created += 1;
        }
    }
    for op in &history.ops {
        let Some(known) = op.call.session_id().and_then(|id| sessions.get_mut(id)) else {
            continue;
        };
        match (&op.call, &op.outcome) {
            (_, Outcome::Fail { reason }) if Reason::SessionNotFound == reason.as_str() => {
                known.gone.push(op);
            }
            (Call::RenewSession { .. }, Outcome::Ok { .. }) => {
                known.alive.push(op);
                stats.renewals += 1;
            }
            (
                Call::Acquire { .. },
                Outcome::Ok {
                    value: Value::Granted { .. },
                },
            ) => {
                known.granted.push(op);
                stats.leases += 1;
            }
            (Call::CloseSession { .. }, outcome) => {
                if matches!(outcome, Outcome::Ok { .. }) {
                    stats.closed += 1;
                }
                known.closes.push(op);
            }
            _ => {}
        }
    }
    for (id, known) in &sessions {
        out.extend(answers(id, known, eps, t0));
    }
    out.extend(record(history, &sessions, &mut stats));
    out.extend(unnamed(history));
    (out, stats)
}

/// Events about a session holder's leases and waits that do not name its session.
fn unnamed(history: &History) -> Vec<Anomaly> {
    let holders: HashMap<&str, &str> = history
        .ops
        .iter()
        .filter_map(|op| match (&op.call, &op.outcome) {
            (
                Call::CreateSession { holder, .. },
                Outcome::Ok {
                    value: Value::Session { session_id },
                },
            ) => Some((holder.as_str(), session_id.as_str())),
            _ => None,
        })
        .collect();
    let about_session = [
        EventKind::Acquired,
        EventKind::Admitted,
        EventKind::Queued,
        EventKind::Released,
        EventKind::Reclaimed,
        EventKind::Transferred,
    ];
    history
        .events
        .values()
        .flatten()
        .filter(|e| about_session.contains(&e.kind))
        .filter_map(|e| {
            let id = holders.get(e.holder.as_str())?;
            (e.session != *id).then(|| {
                anomaly(
                    "session_unnamed",
                    &e.resource,
                    format!(
                        "{} is about a lease or wait of {}'s holder but names {:?}",
                        e.describe(),
                        id,
                        e.session
                    ),
                    Vec::new(),
                )
            })
        })
        .collect()
}

/// What the clients were told: no session ends before it can have expired, and none comes
/// back once it ended.
fn answers(id: &str, known: &Known<'_>, eps: f64, t0: Nanos) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let close_asked = known
        .closes
        .iter()
        .map(|op| op.invoke_ns)
        .min()
        .unwrap_or(Nanos::MAX);
    let resource = |op: &Op| op.call.resource().to_owned();
    for gone in known.gone.iter().filter(|op| op.complete_ns < close_asked) {
        // The latest expiry bound that an answer before this call proves.
        let alive = known
            .alive
            .iter()
            .filter(|op| op.complete_ns < gone.invoke_ns)
            .max_by_key(|op| op.invoke_ns);
        let Some(alive) = alive else { continue };
        let until = alive
            .invoke_ns
            .saturating_add(ttl_floor_ns(known.ttl_ms, eps));
        if gone.complete_ns < until {
            out.push(anomaly(
                "session_ended_early",
                &resource(gone),
                format!(
                    "{id} (ttl {} ms) was alive at {} and so until at least {}, but {} was told session_not_found by {}",
                    known.ttl_ms,
                    describe_op(alive, t0),
                    super::model::at(until, t0),
                    describe_op(gone, t0),
                    super::model::at(gone.complete_ns, t0),
                ),
                vec![alive.id, gone.id],
            ));
        }
    }
    // The first answer that showed the session over.
    let ended = known
        .gone
        .iter()
        .chain(
            known
                .closes
                .iter()
                .filter(|op| matches!(op.outcome, Outcome::Ok { .. })),
        )
        .min_by_key(|op| op.complete_ns);
    if let Some(ended) = ended {
        let revived = known
            .alive
            .iter()
            .chain(known.granted.iter())
            .filter(|op| op.invoke_ns > ended.complete_ns);
        for op in revived {
            out.push(anomaly(
                "session_revived",
                &resource(op),
                format!(
                    "{id} had ended ({}), yet later {}",
                    describe_op(ended, t0),
                    describe_op(op, t0)
                ),
                vec![ended.id, op.id],
            ));
        }
    }
    out
}

/// What the cluster recorded: each session's end is one entry, and nothing on a session
/// outlives it. Judged on the resources whose history was read whole enough: sessions created
/// above what retention may have dropped in any of them.
fn record(
    history: &History,
    sessions: &BTreeMap<&str, Known<'_>>,
    stats: &mut SessionStats,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let events: Vec<&Event> = history
        .events
        .values()
        .flatten()
        .filter(|e| !e.session.is_empty())
        .collect();
    let rooms: BTreeSet<&str> = events.iter().map(|e| e.resource.as_str()).collect();
    let unread = history
        .ops
        .iter()
        .filter(|op| op.call.session_id().is_some())
        .any(|op| history.unread.contains_key(op.call.resource()));
    if unread {
        return out;
    }
    let retention = Retention::of(history);
    let floor = history
        .events
        .iter()
        .filter(|(name, _)| rooms.contains(name.as_str()))
        .map(|(_, events)| retention.floor(events))
        .max()
        .unwrap_or(0);
    let mut by_session: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events {
        by_session.entry(e.session.as_str()).or_default().push(e);
    }
    for (id, events) in by_session {
        let created = id
            .strip_prefix("ses_")
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if created <= floor {
            continue;
        }
        out.extend(one_session(id, &events, sessions.get(id), stats));
    }
    out
}

/// The record of one session: how it ended, and that nothing on it outlived that.
fn one_session(
    id: &str,
    events: &[&Event],
    known: Option<&Known<'_>>,
    stats: &mut SessionStats,
) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let room = events
        .first()
        .map(|e| e.resource.as_str())
        .unwrap_or_default();
    // Every lease on the session: (resource, token) → granted at, ended at.
    let mut leases: HashMap<(&str, u64), (u64, Option<u64>)> = HashMap::new();
    let mut reclaimed = BTreeSet::new();
    let mut attached = Vec::new();
    for e in events {
        let key = (e.resource.as_str(), e.token);
        match e.kind {
            EventKind::Acquired | EventKind::Admitted => {
                leases.entry(key).or_insert((e.revision, None));
                attached.push(*e);
            }
            EventKind::Queued => attached.push(*e),
            EventKind::Released | EventKind::Reclaimed | EventKind::Transferred => {
                if e.kind == EventKind::Reclaimed {
                    reclaimed.insert(e.revision);
                }
                if let Some(lease) = leases.get_mut(&key) {
                    lease.1 = Some(e.revision);
                }
            }
            _ => {}
        }
    }
    if reclaimed.len() > 1 {
        out.push(anomaly(
            "session_split",
            room,
            format!("the leases on {id} were reclaimed at several revisions {reclaimed:?}"),
            Vec::new(),
        ));
    }
    // The entry that ended the session: its reclaim, or its close (the revision that released
    // the leases the close answered it ended).
    let mut end = reclaimed.first().copied();
    if end.is_some() {
        stats.expired += 1;
    }
    let closed = known
        .into_iter()
        .flat_map(|k| k.closes.iter())
        .find_map(|op| match &op.outcome {
            Outcome::Ok {
                value: Value::SessionClosed { leases },
            } => Some((op, leases)),
            _ => None,
        });
    if let Some((close, ended)) = closed {
        let mut at = BTreeSet::new();
        for lease in ended {
            match leases.get(&(lease.resource.as_str(), lease.token)) {
                Some((_, Some(revision))) => {
                    at.insert(*revision);
                }
                _ => out.push(anomaly(
                    "session_end_unrecorded",
                    &lease.resource,
                    format!(
                        "closing {id} answered that it ended the lease with token {}, which the history shows granted on {id} and never ended",
                        lease.token
                    ),
                    vec![close.id],
                )),
            }
        }
        if at.len() > 1 {
            out.push(anomaly(
                "session_split",
                room,
                format!("closing {id} released its leases at several revisions {at:?}"),
                vec![close.id],
            ));
        }
        if !reclaimed.is_empty() {
            out.push(anomaly(
                "outlived_session",
                room,
                format!(
                    "{id} was closed (answered ok) and also reclaimed at revisions {reclaimed:?}"
                ),
                vec![close.id],
            ));
        }
        end = end.or(at.first().copied());
    }
    let Some(end) = end else {
        // Closed with nothing to show the entry: still, nothing on it may be left.
        if let Some((close, _)) = closed {
            for ((resource, token), _) in leases.iter().filter(|(_, (_, e))| e.is_none()) {
                out.push(anomaly(
                    "outlived_session",
                    resource,
                    format!(
                        "the lease with token {token} on {id} was still live after {id} was closed"
                    ),
                    vec![close.id],
                ));
            }
        }
        return out;
    };
    let ended_here = leases.values().filter(|(_, e)| *e == Some(end)).count();
    if ended_here > 1 {
        stats.ended_together += 1;
    }
    for ((resource, token), (granted, ended)) in &leases {
        match ended {
            _ if *granted > end => {}
            Some(ended) if *ended <= end => {}
            _ => out.push(anomaly(
                "outlived_session",
                resource,
                format!(
                    "the lease with token {token} on {id}, granted at revision {granted}, {} after {id} ended at revision {end}",
                    match ended {
                        Some(ended) => format!("ended at revision {ended},"),
                        None => "was still live".to_owned(),
                    }
                ),
                Vec::new(),
            )),
        }
    }
    for e in attached.iter().filter(|e| e.revision > end) {
        out.push(anomaly(
            "outlived_session",
            &e.resource,
            format!("{} came after {id} ended at revision {end}", e.describe()),
            Vec::new(),
        ));
    }
    out
}
