//! SPEC §4.12: what a watch reads from the state — after a cursor, in (revision, resource,
//! seq) order, and `compacted` when retention dropped an event the watcher has not seen.

use super::*;
use crate::history::EventKind;
use crate::watch::{Cursor, Scope};
use crate::Name;

fn positions(events: &[(Name, Event)]) -> Vec<(u64, String, u32)> {
    events
        .iter()
        .map(|(name, e)| (e.revision, name.to_string(), e.seq))
        .collect()
}

#[test]
fn s4_12_a_watch_resumes_exactly_after_a_revision() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 1_000))); // 1
    log.renew(ALICE, renew_of(&a, Some(2_000))); // 2
    log.release(ALICE, release_of(&a)); // 3
    let scope = Scope::Resource("r".into());
    let all = log
        .state
        .watch_events(&scope, &Cursor::default(), &[], 100)
        .expect("events");
    assert_eq!(all.len(), 3);
    let after_2 = log
        .state
        .watch_events(&scope, &Cursor::after_revision(2), &[], 100)
        .expect("events");
    assert_eq!(positions(&after_2), vec![(3, "r".to_string(), 0)]);
    let none = log
        .state
        .watch_events(&scope, &Cursor::after_revision(3), &[], 100)
        .expect("events");
    assert!(none.is_empty());
}

#[test]
fn s4_12_a_prefix_watch_orders_one_entrys_events_by_resource_then_seq() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("p/b", "x", 1_000))); // 1
    granted(&log.acquire(ALICE, acq_ttl("p/a", "x", 1_000))); // 2
    granted(&log.acquire(ALICE, acq_ttl("q", "x", 1_000))); // 3, outside the prefix
    log.elapse(1_000);
    log.tick(); // 4: reclaims all three
    let events = log
        .state
        .watch_events(&Scope::Prefix("p/".into()), &Cursor::default(), &[], 100)
        .expect("events");
    assert_eq!(
        positions(&events),
        vec![
            (1, "p/b".to_string(), 0),
            (2, "p/a".to_string(), 0),
            (4, "p/a".to_string(), 0),
            (4, "p/b".to_string(), 0)
        ]
    );
    // Mid-revision cursor: after p/a's event of revision 4.
    let rest = log
        .state
        .watch_events(
            &Scope::Prefix("p/".into()),
            &Cursor::at("p/a", &events[2].1),
            &[],
            100,
        )
        .expect("events");
    assert_eq!(positions(&rest), vec![(4, "p/b".to_string(), 0)]);
    // Only some kinds.
    let reclaims = log
        .state
        .watch_events(
            &Scope::Prefix("p/".into()),
            &Cursor::default(),
            &[EventKind::Reclaimed],
            100,
        )
        .expect("events");
    assert_eq!(reclaims.len(), 2);
}

#[test]
fn s4_12_a_watch_from_before_retained_history_is_compacted_with_the_oldest_complete_revision() {
    let mut log = Log::new();
    log.state.history_total = 3;
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000))); // 1
    log.renew(ALICE, renew_of(&a, None)); // 2
    log.renew(ALICE, renew_of(&a, None)); // 3
    log.renew(ALICE, renew_of(&a, None)); // 4: drops revision 1
    let scope = Scope::Resource("r".into());
    assert_eq!(
        log.state
            .watch_events(&scope, &Cursor::after_revision(0), &[], 100),
        Err(Rejection::Compacted { oldest: 2 })
    );
    // From revision 1 on nothing is missing.
    let rest = log
        .state
        .watch_events(&scope, &Cursor::after_revision(1), &[], 100)
        .expect("events");
    assert_eq!(rest.len(), 3);
    // "From the oldest retained" starts there.
    assert_eq!(log.state.watch_origin(&scope), Cursor::after_revision(1));
    // A prefix watch of a forgotten resource is compacted too, never silently empty.
    granted(&log.acquire(ALICE, acq_ttl("s", "a", 60_000)));
    assert!(matches!(
        log.state.watch_events(
            &Scope::Prefix("z".into()),
            &Cursor::after_revision(0),
            &[],
            100
        ),
        Err(Rejection::Compacted { .. })
    ));
}

#[test]
fn s4_12_each_entry_publishes_the_events_it_recorded() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    assert_eq!(
        positions(&log.state.effects().events),
        vec![(1, "r".to_string(), 0)]
    );
    log.release(ALICE, release_of(&a));
    assert_eq!(log.state.effects().events.len(), 1);
    log.tick();
    assert!(log.state.effects().events.is_empty());
}

#[test]
fn s4_12_a_cursor_inside_a_revision_notices_a_drop_later_in_that_revision() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000))); // 1
    log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(60_000),
            ..acq_ttl("r", "b", 60_000)
        },
    ); // 2: queued
    log.release(ALICE, release_of(&a)); // 3: released (seq 0), admitted (seq 1)
    let events = log.events("r");
    let mid = Cursor::at("r", &events[2]); // after (3, seq 0)
    assert_eq!(events[2].position(), (3, 0));
    let b = log.state.resource_view("r").leases[0].clone();
    log.state.history_total = 3;
    log.renew(BOB, renew_of(&b, None)); // 4: keeps (3, 0), (3, 1), (4, 0)
    let scope = Scope::Resource("r".into());
    let rest = log
        .state
        .watch_events(&scope, &mid, &[], 100)
        .expect("nothing after the cursor dropped");
    assert_eq!(
        positions(&rest),
        vec![(3, "r".to_string(), 1), (4, "r".to_string(), 0)]
    );
    log.state.history_total = 2;
    log.renew(BOB, renew_of(&b, None)); // 5: drops (3, 0) and (3, 1)
    assert_eq!(
        log.state.watch_events(&scope, &mid, &[], 100),
        Err(Rejection::Compacted { oldest: 4 })
    );
}

/// What the watch index answers is what reading every resource's history answers: a prefix
/// watch from any cursor gets the same events, in the same order, in pages of any size, and
/// is never told less than the whole story (it may be told `compacted` where a drop outside
/// its prefix came after its cursor: the global bound drops in delivery order, so the index
/// keeps one watermark for all resources).
#[test]
fn s4_12_the_watch_index_answers_as_a_scan_of_every_history_would() {
    let mut log = Log::new();
    log.state.history_total = 40;
    let names = ["p/a", "p/b", "q", "p/c", "pz"];
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for step in 0..200 {
        let name = names[next() % names.len()];
        let reply = log.acquire(ALICE, acq_ttl(name, &format!("h{}", next() % 3), 1_000));
        let release = next() % 2 == 0;
        if let (Reply::Acquire(o), true) = (&reply, release) {
            if let Some(view) = o.lease.as_ref().filter(|_| o.granted) {
                log.release(ALICE, release_of(view));
            }
        }
        log.elapse(300);
        if step % 5 == 0 {
            log.tick();
        }
    }
    // The reference: every history of the scope, sorted, as the watch read it before the index.
    let scan = |prefix: &str, cursor: &Cursor| -> Result<Vec<(u64, String, u32)>, ()> {
        let mut all = Vec::new();
        for name in names.iter().filter(|n| n.starts_with(prefix)) {
            let Some(rs) = log.state.resource_ref(name) else {
                continue;
            };
            if rs
                .trimmed_through()
                .is_some_and(|p| cursor.before_position(name, p))
            {
                return Err(());
            }
            for e in log.events(name).iter().filter(|e| cursor.before(name, e)) {
                all.push((e.revision, name.to_string(), e.seq));
            }
        }
        if log
            .state
            .dropped_through
            .is_some_and(|(r, _)| r > cursor.revision)
        {
            return Err(());
        }
        all.sort();
        Ok(all)
    };
    let newest = log.index;
    let mut compared = 0;
    for prefix in ["", "p/", "p/a", "q", "x"] {
        let scope = Scope::Prefix(prefix.into());
        for revision in 0..=newest {
            let cursor = Cursor::after_revision(revision);
            let indexed = log.state.watch_events(&scope, &cursor, &[], usize::MAX);
            match (indexed, scan(prefix, &cursor)) {
                (Ok(events), Ok(expected)) => {
                    assert_eq!(positions(&events), expected, "{prefix:?} after {revision}");
                    compared += 1;
                    // In pages of 3, each resuming inside a revision where the last one ended.
                    let mut paged = Vec::new();
                    let mut at = cursor.clone();
                    loop {
                        let (page, more) = log
                            .state
                            .watch_page(&scope, &at, &[], 3, usize::MAX)
                            .expect("a page");
                        if let Some((name, last)) = page.last() {
                            at = Cursor::at(name, last);
                        }
                        paged.extend(positions(&page));
                        if !more {
                            break;
                        }
                    }
                    assert_eq!(paged, expected, "{prefix:?} after {revision}, paged");
                }
                (Ok(events), Err(())) => {
                    panic!("{prefix:?} after {revision}: the index gave {events:?} where events were dropped")
                }
                (Err(Rejection::Compacted { .. }), _) => {}
                (Err(other), _) => panic!("{other:?}"),
            }
        }
    }
    assert!(compared > 20, "only {compared} cursors were compared");
}
