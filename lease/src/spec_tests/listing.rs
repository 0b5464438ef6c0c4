//! SPEC §2's listings: `ListResources` by prefix and `ListLeases` by holder or principal, paged
//! with the cursor of the previous page.

use super::*;
use crate::query::ResourceView;

fn resources(
    log: &Log,
    prefix: &str,
    page_size: u32,
    after: Option<String>,
) -> (Vec<String>, Option<String>) {
    match log.query(&Query::Resources {
        prefix: prefix.into(),
        page_size,
        after,
    }) {
        Answer::Resources { resources, next } => (
            resources
                .iter()
                .map(|r: &ResourceView| r.name.clone())
                .collect(),
            next,
        ),
        other => panic!("expected resources, got {other:?}"),
    }
}

type LeasePage = (Vec<(String, String)>, Option<(String, String)>);

fn leases(
    log: &Log,
    holder: Option<&str>,
    principal: Option<&str>,
    page_size: u32,
    after: Option<(String, String)>,
) -> LeasePage {
    match log.query(&Query::Leases {
        holder: holder.map(str::to_string),
        principal: principal.map(str::to_string),
        page_size,
        after,
    }) {
        Answer::Leases { leases, next } => (
            leases
                .iter()
                .map(|v| (v.lease.resource.to_string(), v.lease.holder.to_string()))
                .collect(),
            next,
        ),
        other => panic!("expected leases, got {other:?}"),
    }
}

#[test]
fn s2_list_resources_pages_by_prefix_in_name_order() {
    let mut log = Log::new();
    for name in ["app/c", "app/a", "other/x", "app/b", "app/d", "ap"] {
        log.register(name, Policy::registered());
    }
    granted(&log.acquire(ALICE, acq("app/e-adhoc", "a")));
    let (first, next) = resources(&log, "app/", 2, None);
    assert_eq!(first, ["app/a", "app/b"]);
    let (second, next) = resources(&log, "app/", 2, next);
    assert_eq!(second, ["app/c", "app/d"]);
    let (last, next) = resources(&log, "app/", 2, next);
    assert_eq!((last, next), (vec!["app/e-adhoc".to_string()], None));
    let (all, next) = resources(&log, "", 0, None);
    assert_eq!(all.len(), 7);
    assert_eq!(next, None);
}

#[test]
fn s2_list_leases_finds_a_holders_and_a_principals_leases_across_resources() {
    let mut log = Log::new();
    for resource in ["r1", "r2", "r3"] {
        granted(&log.acquire(ALICE, acq(resource, "worker-1")));
    }
    granted(&log.acquire(BOB, acq("r4", "worker-2")));
    granted(&log.acquire(BOB, acq("r5", "worker-1")));

    let (first, next) = leases(&log, Some("worker-1"), None, 2, None);
    assert_eq!(first, held_on(&[("r1", "worker-1"), ("r2", "worker-1")]));
    let (rest, next) = leases(&log, Some("worker-1"), None, 2, next);
    assert_eq!(rest, held_on(&[("r3", "worker-1"), ("r5", "worker-1")]));
    assert_eq!(next, None);

    let (bobs, _) = leases(&log, None, Some("bob"), 0, None);
    assert_eq!(bobs, held_on(&[("r4", "worker-2"), ("r5", "worker-1")]));
    let (both, _) = leases(&log, Some("worker-1"), Some("bob"), 0, None);
    assert_eq!(both, held_on(&[("r5", "worker-1")]));
    // Ended leases are not listed.
    let r1 = log.state.resource_view("r1").leases[0].clone();
    lease(&log.release(ALICE, release_of(&r1)));
    let (alices, _) = leases(&log, None, Some("alice"), 0, None);
    assert_eq!(alices, held_on(&[("r2", "worker-1"), ("r3", "worker-1")]));
}

fn held_on(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(r, h)| (r.to_string(), h.to_string()))
        .collect()
}

/// Lease ids sort by number (`lse_9_0` before `lse_10_0`), so a page boundary between them
/// neither skips nor repeats a lease, however many digits the indexes have.
#[test]
fn s2_list_leases_pages_in_grant_order_across_index_digit_counts() {
    let mut log = Log::new();
    log.register("pool", shared_policy(&[Mode::Read], 0));
    while log.index < 7 {
        log.tick();
    }
    let mut granted_ids = Vec::new();
    for holder in ["h1", "h2", "h3", "h4"] {
        granted_ids.push(granted(
            &log.acquire(ALICE, shared("pool", holder, Mode::Read, 1)),
        ));
    }
    let ids: Vec<String> = granted_ids
        .iter()
        .map(|v| v.lease.lease_id().to_string())
        .collect();
    assert_eq!(ids, ["lse_8_0", "lse_9_0", "lse_10_0", "lse_11_0"]);
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = leases(&log, None, Some("alice"), 1, after);
        listed.extend(page.into_iter().map(|(_, holder)| holder));
        match next {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(listed, ["h1", "h2", "h3", "h4"]);
    // One principal's several leases of one resource: one ends, the rest stay listed, and a
    // restart rebuilds the same index.
    lease(&log.release(ALICE, release_of(&granted_ids[1])));
    log.restore_from_snapshot();
    let (rest, _) = leases(&log, None, Some("alice"), 0, None);
    let holders: Vec<_> = rest.into_iter().map(|(_, holder)| holder).collect();
    assert_eq!(holders, ["h1", "h3", "h4"]);
    let cursor = Some(("pool".to_string(), "lse_9_0".to_string()));
    let (page, _) = leases(&log, None, Some("alice"), 1, cursor);
    assert_eq!(
        page,
        held_on(&[("pool", "h3")]),
        "past an ended lease's cursor"
    );
}
