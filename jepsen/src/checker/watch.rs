//! Watches (SPEC §4.12), against every resource's history read after the run. Each session of
//! a watcher — one stream from its `start_revision` on one node — must be sent exactly the
//! events of its scope after that revision, in (revision, resource, seq) order, as the history
//! holds them; and a message's `revision` promises that every event up to it has been sent.
//!
//! * `watch_gap`: an event of the scope was skipped (a later one came first, or a message
//!   promised that everything up to a revision past it had been sent);
//! * `watch_duplicate`: an event sent twice in one session, or one at or before its start;
//! * `watch_out_of_order`: an event sent after a later one;
//! * `watch_unknown_event`: an event the history does not hold, or holds otherwise (the event
//!   of an entry that was never committed, or a wrong one), or one outside the scope;
//! * `watch_dishonest_compaction`: `compacted` with an `oldest_revision` not above what the
//!   session had reached, or when retention cannot have dropped any event of the scope after it.
//!
//! A watcher resumes from the last revision it was promised (after `compacted`, from just
//! before the oldest revision retained), on another node: so each committed event of the range
//! a watcher covered reaches it once per session covering it (a message may carry events past
//! its promise, which the next session sends again). Events of resources whose history could
//! not be read, and revisions retention may have dropped from a history, are not judged.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::model::at;
use super::retention::Retention;
use super::Anomaly;
use crate::history::{Event, EventKey, History, Nanos, SessionEnd, WatchScope, WatchSession};

/// Anomalies of one kind reported per watcher; the rest are counted in one more.
const MAX_PER_KIND: usize = 5;
/// Events named in one message.
const SHOWN: usize = 3;

/// What the watchers of a run came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WatchStats {
    pub watchers: usize,
    pub sessions: usize,
    /// Sessions that ended `compacted`.
    pub compacted: usize,
    /// Events sent to the watchers, sessions' repeats included.
    pub events_delivered: usize,
    /// Distinct events (per watcher) found in order in the history.
    pub events_checked: usize,
    /// Events of histories not read or partly dropped by retention.
    pub unverifiable: usize,
}

/// The committed events of a scope, in watch order.
struct Expected<'a> {
    events: Vec<&'a Event>,
    index: HashMap<EventKey<'a>, usize>,
    /// Revisions up to here may lack events (retention): not judged.
    floor: u64,
    /// Some resource of the scope was not read.
    unread: bool,
}

impl<'a> Expected<'a> {
    fn of(history: &'a History, retention: &Retention, scope: &WatchScope) -> Self {
        let mut events: Vec<&Event> = Vec::new();
        let mut floor = 0;
        for (resource, list) in history.events.iter().filter(|(r, _)| scope.covers(r)) {
            if !history.unread.contains_key(resource) {
                events.extend(list);
                floor = floor.max(retention.floor(list));
            }
        }
        events.sort_by(|a, b| a.key().cmp(&b.key()));
        let index = events
            .iter()
            .enumerate()
            .map(|(i, e)| (e.key(), i))
            .collect();
        Expected {
            events,
            index,
            floor,
            unread: history.unread.keys().any(|r| scope.covers(r)),
        }
    }

    fn judged(&self, history: &History, event: &Event) -> bool {
        event.revision > self.floor && history.events.contains_key(&event.resource)
    }

    /// Where the events after `revision` begin.
    fn after(&self, revision: u64) -> usize {
        self.events.partition_point(|e| e.revision <= revision)
    }

    fn list(&self, range: std::ops::Range<usize>) -> String {
        let n = range.len();
        let mut shown: Vec<String> = self.events[range]
            .iter()
            .take(SHOWN)
            .map(|e| e.describe())
            .collect();
        if n > SHOWN {
            shown.push(format!("… {} more", n - SHOWN));
        }
        shown.join(", ")
    }
}

/// Anomalies of one watcher, at most [`MAX_PER_KIND`] of a kind.
struct Findings<'a> {
    watcher: u64,
    scope: &'a WatchScope,
    anomalies: Vec<Anomaly>,
    suppressed: BTreeMap<&'static str, usize>,
}

impl Findings<'_> {
    fn push(&mut self, kind: &'static str, resource: &str, session: &str, what: String) {
        if self.anomalies.iter().filter(|a| a.kind == kind).count() >= MAX_PER_KIND {
            *self.suppressed.entry(kind).or_default() += 1;
            return;
        }
        self.anomalies.push(Anomaly {
            kind: kind.into(),
            resource: resource.to_owned(),
            message: format!(
                "watcher {} ({}), {session}: {what}",
                self.watcher,
                self.scope.describe()
            ),
            ops: vec![],
        });
    }

    fn finish(mut self) -> Vec<Anomaly> {
        for (kind, n) in std::mem::take(&mut self.suppressed) {
            self.anomalies.push(Anomaly {
                kind: kind.into(),
                resource: self.scope.describe(),
                message: format!(
                    "watcher {} ({}): {n} more {kind} not listed",
                    self.watcher,
                    self.scope.describe()
                ),
                ops: vec![],
            });
        }
        self.anomalies
    }
}

/// The watch anomalies of `history`, and its watch numbers.
pub(crate) fn check(history: &History, t0: Nanos) -> (Vec<Anomaly>, WatchStats) {
    let mut stats = WatchStats::default();
    let mut by_watcher: BTreeMap<u64, Vec<&WatchSession>> = BTreeMap::new();
    for session in &history.watches {
        by_watcher.entry(session.watcher).or_default().push(session);
    }
    stats.watchers = by_watcher.len();
    let retention = Retention::of(history);
    let judged = !history.events.is_empty() && !retention.global();
    let mut expected: HashMap<&WatchScope, Expected<'_>> = HashMap::new();
    let mut out = Vec::new();
    for (watcher, sessions) in by_watcher {
        let scope = &sessions[0].scope;
        let exp = expected
            .entry(scope)
            .or_insert_with(|| Expected::of(history, &retention, scope));
        let mut judge = Judge {
            history,
            exp,
            t0,
            findings: Findings {
                watcher,
                scope,
                anomalies: Vec::new(),
                suppressed: BTreeMap::new(),
            },
            checked: HashSet::new(),
            unverifiable: 0,
        };
        for (n, session) in sessions.iter().enumerate() {
            stats.sessions += 1;
            stats.events_delivered += session.events().count();
            if let SessionEnd::Compacted { .. } = session.end {
                stats.compacted += 1;
            }
            if judged {
                judge.session(n + 1, session);
            } else {
                judge.unverifiable += session.events().count();
            }
        }
        stats.events_checked += judge.checked.len();
        stats.unverifiable += judge.unverifiable;
        out.extend(judge.findings.finish());
    }
    (out, stats)
}

/// One watcher's sessions against its scope's history.
struct Judge<'h, 'e> {
    history: &'h History,
    exp: &'e Expected<'h>,
    t0: Nanos,
    findings: Findings<'h>,
    /// Events found in order, over all its sessions.
    checked: HashSet<EventKey<'h>>,
    unverifiable: usize,
}

impl<'h> Judge<'h, '_> {
    fn session(&mut self, n: usize, session: &'h WatchSession) {
        let name = format!(
            "session {n} on n{} from revision {} (opened at {})",
            session.node,
            session.start_revision,
            at(session.opened_ns, self.t0)
        );
        self.delivered(session, &name);
        if let SessionEnd::Compacted { oldest_revision } = session.end {
            self.compaction(session, oldest_revision, &name);
        }
    }

    /// The session's events and promises.
    fn delivered(&mut self, session: &'h WatchSession, name: &str) {
        let (exp, t0) = (self.exp, self.t0);
        let start = session.start_revision;
        let mut pos = exp.after(start.max(exp.floor));
        let mut sent: HashSet<EventKey<'_>> = HashSet::new();
        let mut last: Option<&Event> = None;
        for message in &session.messages {
            let when = at(message.at_ns, t0);
            for event in &message.events {
                let key = event.key();
                let resource = event.resource.as_str();
                if event.revision <= start {
                    let what = format!("sent {} at or before its start revision", event.describe());
                    self.findings.push("watch_duplicate", resource, name, what);
                    continue;
                }
                if !session.scope.covers(resource) {
                    let what = format!("sent {}, which is outside its scope", event.describe());
                    self.findings
                        .push("watch_unknown_event", resource, name, what);
                    continue;
                }
                if !exp.judged(self.history, event) {
                    self.unverifiable += 1;
                    continue;
                }
                if let Some(previous) = last.filter(|l| key <= l.key()) {
                    let (kind, how) = if sent.contains(&key) {
                        ("watch_duplicate", "again")
                    } else {
                        ("watch_out_of_order", "out of order")
                    };
                    let what = format!(
                        "sent {} {how}, after {} (at {when})",
                        event.describe(),
                        previous.describe()
                    );
                    self.findings.push(kind, resource, name, what);
                    continue;
                }
                last = Some(event);
                sent.insert(key);
                let Some(&j) = exp.index.get(&key) else {
                    let what = format!(
                        "sent {} (at {when}), which {resource}'s history does not hold",
                        event.describe()
                    );
                    self.findings
                        .push("watch_unknown_event", resource, name, what);
                    continue;
                };
                if exp.events[j] != event {
                    let what = format!(
                        "sent {}, but the history holds {}",
                        event.describe(),
                        exp.events[j].describe()
                    );
                    self.findings
                        .push("watch_unknown_event", resource, name, what);
                }
                if j > pos {
                    let what = format!(
                        "skipped {} event(s) before {} (at {when}): {}",
                        j - pos,
                        event.describe(),
                        exp.list(pos..j)
                    );
                    self.findings.push("watch_gap", resource, name, what);
                }
                pos = pos.max(j + 1);
                self.checked.insert(key);
            }
            let promised = exp.after(message.revision);
            if promised > pos {
                let what = format!(
                    "promised (at {when}) that every event up to revision {} had been sent, yet never sent {}",
                    message.revision,
                    exp.list(pos..promised)
                );
                self.findings
                    .push("watch_gap", &exp.events[pos].resource, name, what);
                pos = promised;
            }
        }
    }

    /// A session that ended `compacted`: the oldest revision is above what it had reached,
    /// and retention can have dropped an event of the scope between the two.
    fn compaction(&mut self, session: &WatchSession, oldest_revision: u64, name: &str) {
        let exp = self.exp;
        let reached = session
            .events()
            .map(|e| e.revision)
            .max()
            .unwrap_or(0)
            .max(session.covered());
        let skipped = exp.after(reached)..exp.after(oldest_revision.saturating_sub(1));
        let resource = exp
            .events
            .get(skipped.start)
            .map_or_else(|| session.scope.describe(), |e| e.resource.clone());
        let why = if oldest_revision <= reached {
            format!("its oldest_revision {oldest_revision} is not above revision {reached}, which the session had reached")
        } else if exp.floor <= reached && !exp.unread {
            format!(
                "retention dropped nothing of the scope after revision {reached} (the history holds all of it), yet oldest_revision {oldest_revision} skips {}",
                if skipped.is_empty() {
                    "no event".to_owned()
                } else {
                    exp.list(skipped)
                }
            )
        } else {
            return;
        };
        let what = format!("ended compacted, but {why}");
        self.findings
            .push("watch_dishonest_compaction", &resource, name, what);
    }
}
