//! SPEC §4.11: history records every event with its fields, pages both ways, filters by kind,
//! and keeps a bounded, documented number of events per resource.

use super::*;
use crate::history::{self, EventKind, Successor, SYSTEM_ACTOR};
use crate::query::MAX_PAGE_SIZE;
use crate::types::LeaseStatus;

/// A page of events and the cursor after it.
type Page = (Vec<Event>, Option<(u64, u32)>);

fn page(
    log: &Log,
    resource: &str,
    page_size: u32,
    after: Option<(u64, u32)>,
    ascending: bool,
    kinds: &[EventKind],
) -> Result<Page, Rejection> {
    match log.query(&Query::History {
        resource: resource.into(),
        page_size,
        after,
        ascending,
        kinds: kinds.to_vec(),
    }) {
        Answer::History { events, next } => Ok((events, next)),
        Answer::Rejected(rejection) => Err(rejection),
        other => panic!("expected history, got {other:?}"),
    }
}

/// Every page of a listing, following `next` to the end.
fn all_pages(log: &Log, resource: &str, page_size: u32, ascending: bool) -> Vec<Vec<Event>> {
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let (events, next) = page(log, resource, page_size, after, ascending, &[]).expect("a page");
        pages.push(events);
        match next {
            Some(position) => after = Some(position),
            None => return pages,
        }
    }
}

/// Acquire, then `renewals` renews: 1 + renewals events on "r".
fn busy(renewals: usize) -> Log {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 60_000)));
    for _ in 0..renewals {
        log.elapse(1);
        lease(&log.renew(ALICE, renew_of(&a, None)));
    }
    log
}

#[test]
fn s4_11_history_records_every_event_we_emit_with_its_fields() {
    let mut log = Log::new();
    log.register(
        "r",
        Policy {
            transferable: true,
            renewal_grace_ms: 1_000,
            ..Policy::registered()
        },
    ); // 1
    let a = granted(&log.acquire(
        ALICE,
        AcquireOp {
            metadata: [("job".to_string(), "7".to_string())].into(),
            ..acq_ttl("r", "a", 5_000)
        },
    )); // 2
    log.elapse(1_000);
    lease(&log.renew(ALICE, renew_of(&a, None))); // 3
    let b = lease(&log.transfer(ROOT, transfer_of(&a, "b", Some("bob")))); // 4
    lease(&log.release(BOB, release_of(&b))); // 5
    granted(&log.acquire(ALICE, acq_ttl("r", "c", 2_000))); // 6
    log.elapse(3_000);
    log.tick(); // 7: past expiry + grace

    let (events, next) = page(&log, "r", 0, None, true, &[]).expect("history");
    assert_eq!(next, None);
    use EventKind as E;
    use LeaseStatus as S;
    let summary: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.revision,
                e.kind,
                e.actor.as_str(),
                e.holder.as_str(),
                e.lease_id.as_str(),
                e.fencing_token,
                e.from,
                e.to,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, E::Registered, "root", "", "", 0, None, None),
            (
                2,
                E::Acquired,
                "alice",
                "a",
                "lse_2_0",
                2,
                None,
                Some(S::Active)
            ),
            (
                3,
                E::Renewed,
                "alice",
                "a",
                "lse_2_0",
                2,
                Some(S::Active),
                Some(S::Active)
            ),
            (
                4,
                E::Transferred,
                "root",
                "a",
                "lse_2_0",
                2,
                Some(S::Active),
                Some(S::Transferred)
            ),
            (
                5,
                E::Released,
                "bob",
                "b",
                "lse_4_0",
                4,
                Some(S::Active),
                Some(S::Released)
            ),
            (
                6,
                E::Acquired,
                "alice",
                "c",
                "lse_6_0",
                6,
                None,
                Some(S::Active)
            ),
            (
                7,
                E::Reclaimed,
                SYSTEM_ACTOR,
                "c",
                "lse_6_0",
                6,
                Some(S::Grace),
                Some(S::Reclaimed)
            ),
        ]
    );
    assert_eq!(
        events[1].metadata, a.lease.metadata,
        "an acquire records its metadata"
    );
    assert!(events[2].metadata.is_empty());
    assert_eq!(
        events[3].successor,
        Some(Box::new(Successor {
            holder: "b".into(),
            lease_id: "lse_4_0".into(),
            fencing_token: 4,
        }))
    );
    // `at` is the leader's wall clock in the entry's stamp.
    assert_eq!(events[2].at_wall_ms - events[1].at_wall_ms, 1_000);
    assert_eq!(events[6].at_wall_ms - events[5].at_wall_ms, 3_000);
}

#[test]
fn s4_11_history_pages_in_both_orders_with_the_after_cursor() {
    let log = busy(24);
    let (everything, _) = page(&log, "r", 0, None, true, &[]).expect("history");
    assert_eq!(everything.len(), 25);
    assert!(everything
        .windows(2)
        .all(|w| w[0].position() < w[1].position()));

    let ascending = all_pages(&log, "r", 10, true);
    assert_eq!(
        ascending.iter().map(Vec::len).collect::<Vec<_>>(),
        [10, 10, 5]
    );
    assert_eq!(ascending.concat(), everything);

    let descending = all_pages(&log, "r", 10, false);
    assert_eq!(
        descending.iter().map(Vec::len).collect::<Vec<_>>(),
        [10, 10, 5]
    );
    let mut newest_first = everything.clone();
    newest_first.reverse();
    assert_eq!(descending.concat(), newest_first);

    // Exactly one page: no cursor.
    assert_eq!(page(&log, "r", 25, None, true, &[]).expect("page").1, None);
    // An unknown resource has no history (not an error).
    assert_eq!(page(&log, "none", 10, None, false, &[]), Ok((vec![], None)));
}

#[test]
fn s4_11_history_filters_by_event_kind() {
    let mut log = busy(3);
    let a = log.state.resource_view("r").leases[0].clone();
    lease(&log.release(ALICE, release_of(&a)));
    let kinds = |wanted: &[EventKind], ascending: bool| -> Vec<EventKind> {
        let (events, _) = page(&log, "r", 0, None, ascending, wanted).expect("history");
        events.iter().map(|e| e.kind).collect()
    };
    assert_eq!(kinds(&[EventKind::Renewed], true), [EventKind::Renewed; 3]);
    assert_eq!(
        kinds(&[EventKind::Acquired, EventKind::Released], false),
        [EventKind::Released, EventKind::Acquired]
    );
    assert_eq!(kinds(&[EventKind::Transferred], true), []);
    // Paging a filtered listing skips what the filter drops.
    let (first, next) = page(&log, "r", 2, None, true, &[EventKind::Renewed]).expect("page");
    assert_eq!(first.len(), 2);
    let (rest, next) = page(&log, "r", 2, next, true, &[EventKind::Renewed]).expect("page");
    assert_eq!((rest.len(), next), (1, None));
}

#[test]
fn s4_11_history_push_keeps_the_newest_per_resource_events() {
    let mut events = history::KeptEvents::default();
    let mut bytes = 0;
    let mut dropped_all = Vec::new();
    for revision in 1..=(history::PER_RESOURCE as u64 + 3) {
        let mut event = Event::of_resource(EventKind::Renewed);
        event.revision = revision;
        let (new, dropped) = history::push(&mut events, &mut bytes, &mut event);
        assert_eq!((new.seq, event.seq), (0, 0));
        dropped_all.extend(dropped);
    }
    assert_eq!(events.len(), history::PER_RESOURCE);
    assert_eq!(
        dropped_all.iter().map(|e| e.revision).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        events.front().map(|e| e.revision),
        Some(4),
        "oldest dropped first"
    );
    // Events of one revision are numbered in order.
    let mut again = Event::of_resource(EventKind::Released);
    again.revision = history::PER_RESOURCE as u64 + 3;
    assert_eq!(history::push(&mut events, &mut bytes, &mut again).0.seq, 1);
    assert_eq!(again.seq, 1);
    let costs: u64 = events.iter().map(|k| u64::from(k.cost)).sum();
    assert_eq!(u64::from(bytes), costs);
    assert_eq!(
        events.back().map(|k| k.cost as u64),
        Some(history::event_cost(&again))
    );
}

/// SPEC §4.11: history is bounded by what it costs too, per resource and in all: large
/// events (metadata) are dropped oldest first long before their count would be, and a
/// resource's newest event is always kept.
#[test]
fn s4_11_history_is_bounded_by_bytes_per_resource_and_in_all() {
    let big = |resource: &str, holder: &str| AcquireOp {
        metadata: [("blob".to_string(), "x".repeat(15_000))].into(),
        ..acq_ttl(resource, holder, 1_000)
    };
    // Per resource: 8 MiB of ~15 KB events is ~550 of them.
    let mut events = history::KeptEvents::default();
    let mut bytes = 0;
    let mut event = Event::of_resource(EventKind::Acquired);
    event.metadata = big("r", "h").metadata.into();
    for revision in 1..=1_000 {
        event.revision = revision;
        history::push(&mut events, &mut bytes, &mut event);
    }
    assert!(bytes <= history::PER_RESOURCE_BYTES, "{bytes}");
    assert!(events.len() < 600 && events.len() > 500, "{}", events.len());
    assert_eq!(events.back().map(|e| e.revision), Some(1_000));
    // In all: the global byte bound drops the oldest events across resources.
    let mut log = Log::new();
    log.state.history_total_bytes = 20 * 15_300;
    for n in 0..40 {
        let a = granted(&log.acquire(ALICE, big(&format!("r{n}"), "h")));
        log.release(ALICE, release_of(&a));
    }
    assert!(log.state.log.bytes() <= log.state.history_total_bytes);
    assert!(
        log.state.retained_events() < 60,
        "{}",
        log.state.retained_events()
    );
    assert!(
        log.events("r39").len() == 2,
        "the newest resource keeps its events"
    );
    assert!(log.events("r0").is_empty(), "the oldest are gone");
}

#[test]
fn s4_11_retention_bounds_a_resource_and_older_cursors_are_compacted() {
    // 1 acquire + PER_RESOURCE + 4 renews: the five oldest events are dropped.
    let log = busy(history::PER_RESOURCE + 4);
    let events = log.events("r");
    assert_eq!(events.len(), history::PER_RESOURCE);
    assert_eq!(log.state.retained_events(), history::PER_RESOURCE);
    let oldest = events[0].revision;
    assert_eq!(oldest, 6, "revisions 1..=5 were dropped");

    // Resuming ascending from before the oldest retained event is `compacted`, never a gap.
    let compacted = page(&log, "r", 10, Some((1, 0)), true, &[]);
    assert_eq!(compacted, Err(Rejection::Compacted { oldest }));
    assert_eq!(Rejection::Compacted { oldest }.reason(), "compacted");
    // From the newest dropped event on there is no gap.
    let (next_page, _) = page(&log, "r", 10, Some((5, 0)), true, &[]).expect("no gap");
    assert_eq!(next_page[0].revision, oldest);
    // A fresh listing starts at the oldest retained event; pages hold at most 1000.
    let (first, next) = page(&log, "r", 5_000, None, true, &[]).expect("history");
    assert_eq!(first.len(), MAX_PAGE_SIZE as usize);
    assert_eq!(first[0].revision, oldest);
    assert!(next.is_some());
    let (newest, _) = page(&log, "r", 1_000, None, false, &[]).expect("history");
    assert_eq!(newest.len(), 1_000);
    assert_eq!(newest[0].revision, log.index);
}

/// SPEC §4.11: an ad-hoc resource whose every event the global bound dropped is forgotten; if
/// its name is used again, a cursor kept from before answers `compacted` rather than resuming
/// silently past the events that were dropped.
#[test]
fn s4_11_a_forgotten_resource_used_again_answers_old_cursors_with_compacted() {
    let mut log = Log::new();
    log.state.history_total = 6;
    let first = granted(&log.acquire(ALICE, acq("a", "h")));
    lease(&log.release(ALICE, release_of(&first)));
    let (events, cursor) = page(&log, "a", 1, None, true, &[]).expect("a page");
    assert_eq!(events.len(), 1);
    let cursor = cursor.expect("more to read");
    // Other resources push every event of `a` out of the global bound: `a` is forgotten.
    for n in 0..4 {
        let other = granted(&log.acquire(ALICE, acq(&format!("b{n}"), "h")));
        lease(&log.release(ALICE, release_of(&other)));
    }
    assert!(!log.state.knows("a"), "forgotten");
    granted(&log.acquire(ALICE, acq("a", "h")));
    let oldest = log.index;
    assert_eq!(
        page(&log, "a", 10, Some(cursor), true, &[]),
        Err(Rejection::Compacted { oldest })
    );
    // A cursor from the new life of `a` pages on normally.
    let (fresh, _) = page(&log, "a", 10, Some((oldest - 1, 0)), true, &[]).expect("a page");
    assert_eq!(fresh.len(), 1);
}

/// A resource's state with its one lease inline stays within one 224-byte allocation with its
/// `Arc` (most resources are one lease and a few events: at a million, every word is 8 MB).
#[test]
fn a_resource_state_stays_small() {
    assert!(
        std::mem::size_of::<crate::machine::ResourceState>() <= 208,
        "{} bytes",
        std::mem::size_of::<crate::machine::ResourceState>()
    );
}
