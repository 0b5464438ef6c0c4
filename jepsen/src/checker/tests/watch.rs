//! Watch sessions against the cluster's record: each doctored session has one anomaly, and a
//! watcher resuming across nodes (with a message that carried events past its promise) has
//! none.

use super::*;
use crate::history::EventKind::{Acquired, Queued, Registered, Released, Renewed};
use crate::history::{SessionEnd, WatchMessage, WatchScope};

const OTHER: &str = "zz";

/// Two resources' histories: R (revisions 1–9) and OTHER (revisions 3–8).
fn recorded() -> Builder {
    let mut h = Builder::new();
    h.event(R, 1, Registered, "");
    h.event(R, 2, Acquired, "a");
    h.event(OTHER, 3, Acquired, "x");
    h.event(R, 4, Renewed, "a");
    h.event(R, 4, Queued, "b"); // seq 1: a second event of one entry
    h.event(OTHER, 5, Released, "x");
    h.event(R, 6, Released, "a");
    h.event(R, 6, EventKind::Admitted, "b");
    h.event(OTHER, 8, Acquired, "y");
    h.event(R, 9, Released, "b");
    h
}

/// The events of every resource in watch order (revision, resource, seq).
fn all(h: &Builder) -> Vec<Event> {
    let mut events: Vec<Event> = h.events.values().flatten().cloned().collect();
    events.sort_by(|a, b| a.key().cmp(&b.key()));
    events
}

fn message(revision: u64, events: &[Event]) -> WatchMessage {
    WatchMessage {
        at_ns: revision * MS,
        revision,
        events: events.to_vec(),
    }
}

fn session(start_revision: u64, messages: Vec<WatchMessage>, end: SessionEnd) -> WatchSession {
    WatchSession {
        watcher: 1,
        scope: WatchScope::Prefix(String::new()),
        node: 1 + start_revision % 3,
        start_revision,
        opened_ns: start_revision * MS,
        closed_ns: (start_revision + 1) * MS,
        messages,
        end,
    }
}

fn watched(mut h: Builder, sessions: Vec<WatchSession>) -> CheckReport {
    h.watches = sessions;
    h.check()
}

#[test]
fn a_watcher_resuming_on_other_nodes_sees_every_event_once() {
    let h = recorded();
    let e = all(&h);
    // Session 1 sends revisions 1–4, the last message carrying revision 5's event past its
    // promise of 4; the node dies. Session 2 resumes from 4 and sends 5 again, then the rest.
    let sessions = vec![
        session(
            0,
            vec![message(2, &e[..2]), message(4, &e[2..6])],
            SessionEnd::Idle,
        ),
        session(
            4,
            vec![message(6, &e[5..8]), message(6, &[])],
            SessionEnd::Moved,
        ),
        session(6, vec![message(9, &e[8..])], SessionEnd::Stopped),
    ];
    let report = watched(h, sessions);
    assert_ok(&report);
    let watch = &report.watch;
    assert_eq!((watch.watchers, watch.sessions), (1, 3));
    assert_eq!(watch.events_checked, e.len());
    assert_eq!(watch.events_delivered, e.len() + 1);
}

#[test]
fn a_skipped_event_is_a_gap() {
    let h = recorded();
    let e = all(&h);
    let mut sent = e.clone();
    sent.remove(5); // zz@5
    let report = watched(
        h,
        vec![session(0, vec![message(9, &sent)], SessionEnd::Stopped)],
    );
    let a = the(&report, "watch_gap");
    assert!(a.message.contains("skipped 1 event(s)"), "{}", a.message);
    assert!(a.message.contains("zz@5.0 released x"), "{}", a.message);
    assert_eq!(kinds(&report), vec!["watch_gap"]);
}

#[test]
fn a_promise_past_an_event_never_sent_is_a_gap() {
    let h = recorded();
    let e = all(&h);
    // Everything up to revision 8 promised, revision 8's event never sent.
    let report = watched(
        h,
        vec![session(0, vec![message(8, &e[..8])], SessionEnd::Idle)],
    );
    let a = the(&report, "watch_gap");
    assert!(
        a.message.contains("every event up to revision 8") && a.message.contains("zz@8.0"),
        "{}",
        a.message
    );
}

#[test]
fn an_event_sent_twice_is_a_duplicate() {
    let h = recorded();
    let e = all(&h);
    let report = watched(
        h,
        vec![session(
            0,
            vec![message(4, &e[..6]), message(9, &e[5..])],
            SessionEnd::Stopped,
        )],
    );
    let a = the(&report, "watch_duplicate");
    assert!(a.message.contains("again"), "{}", a.message);
    assert_eq!(kinds(&report), vec!["watch_duplicate"]);
}

#[test]
fn an_event_at_or_before_the_start_is_a_duplicate() {
    let h = recorded();
    let e = all(&h);
    let report = watched(
        h,
        vec![session(4, vec![message(9, &e[3..])], SessionEnd::Stopped)],
    );
    let a = the(&report, "watch_duplicate");
    assert!(
        a.message.contains("at or before its start"),
        "{}",
        a.message
    );
}

#[test]
fn events_out_of_order_are_reported() {
    let h = recorded();
    let mut e = all(&h);
    e.swap(3, 4); // res@4.1 before res@4.0
    let report = watched(
        h,
        vec![session(0, vec![message(9, &e)], SessionEnd::Stopped)],
    );
    let a = the(&report, "watch_out_of_order");
    assert!(
        a.message
            .contains("sent res@4.0 renewed a out of order, after res@4.1 queued b"),
        "{}",
        a.message
    );
    // When it came, the later event had skipped it.
    the(&report, "watch_gap");
}

#[test]
fn an_event_the_history_does_not_hold_is_unknown() {
    let h = recorded();
    let mut e = all(&h);
    let mut phantom = e[1].clone();
    phantom.revision = 7;
    phantom.holder = "ghost".into();
    e.insert(8, phantom);
    let report = watched(
        h,
        vec![session(0, vec![message(9, &e)], SessionEnd::Stopped)],
    );
    let a = the(&report, "watch_unknown_event");
    assert!(a.message.contains("ghost"), "{}", a.message);
    assert_eq!(kinds(&report), vec!["watch_unknown_event"]);
}

#[test]
fn an_event_outside_the_scope_is_unknown() {
    let h = recorded();
    let e = all(&h);
    let mut only_r = session(0, vec![message(9, &e)], SessionEnd::Stopped);
    only_r.scope = WatchScope::Resource(R.into());
    let report = watched(h, vec![only_r]);
    let a = the(&report, "watch_unknown_event");
    assert!(
        a.message
            .contains("zz@3.0 acquired x token 3, which is outside its scope"),
        "{}",
        a.message
    );
    assert_eq!(kinds(&report), vec!["watch_unknown_event"; 3]);
}

#[test]
fn an_event_that_differs_from_the_history_is_unknown() {
    let h = recorded();
    let mut e = all(&h);
    e[1].token = 99;
    let report = watched(
        h,
        vec![session(0, vec![message(9, &e)], SessionEnd::Stopped)],
    );
    let a = the(&report, "watch_unknown_event");
    assert!(a.message.contains("the history holds"), "{}", a.message);
}

#[test]
fn compacted_when_nothing_was_dropped_is_dishonest() {
    let h = recorded();
    let e = all(&h);
    let sessions = vec![
        session(
            0,
            vec![message(4, &e[..6])],
            SessionEnd::Compacted { oldest_revision: 7 },
        ),
        session(6, vec![message(9, &e[8..])], SessionEnd::Stopped),
    ];
    let report = watched(h, sessions);
    let a = the(&report, "watch_dishonest_compaction");
    assert!(
        a.message.contains("retention dropped nothing") && a.message.contains("res@6.0 released a"),
        "{}",
        a.message
    );
    assert_eq!(report.watch.compacted, 1);
}

#[test]
fn compacted_below_the_cursor_is_dishonest() {
    let h = recorded();
    let e = all(&h);
    let report = watched(
        h,
        vec![session(
            0,
            vec![message(6, &e[..8])],
            SessionEnd::Compacted { oldest_revision: 3 },
        )],
    );
    let a = the(&report, "watch_dishonest_compaction");
    assert!(a.message.contains("not above revision 6"), "{}", a.message);
}

#[test]
fn compacted_where_retention_dropped_events_is_honest() {
    // R's history is full: its oldest events may have been dropped, up to revision 20_000.
    let mut h = Builder::new();
    for revision in 20_000..20_000 + crate::checker::retention::PER_RESOURCE as u64 {
        h.event(R, revision, Renewed, "a");
    }
    let e = all(&h);
    let sessions = vec![
        session(
            0,
            vec![],
            SessionEnd::Compacted {
                oldest_revision: 20_000,
            },
        ),
        session(
            19_999,
            vec![message(20_100, &e[..101])],
            SessionEnd::Stopped,
        ),
    ];
    let report = watched(h, sessions);
    assert_ok(&report);
    assert_eq!(report.watch.events_checked, 100);
    assert_eq!(report.watch.unverifiable, 1);
}

#[test]
fn events_of_a_history_not_read_are_not_judged() {
    let mut h = recorded();
    let mut sent = all(&h);
    sent.retain(|e| e.resource != OTHER || e.revision != 5); // even with a gap there
    h.events.remove(OTHER);
    h.watches = vec![session(0, vec![message(9, &sent)], SessionEnd::Stopped)];
    let mut history = h.history();
    history
        .unread
        .insert(OTHER.into(), "deadline exceeded".into());
    let report = check(&history, &CheckParams::for_history(&history));
    assert_ok(&report);
    assert_eq!(report.watch.unverifiable, 2);
}
