//! SPEC §5.3: time enters only through the log. The lease clock advances by the leader's stamps
//! and by zero across a change of leader; the leader plans a `Tick` on taking office and at
//! least every tick interval, and proposes a reclaim as soon as a lease is due (§4.4).

use super::*;
use crate::expiry::{plan, Plan};
use crate::policy::HOUR_MS;
use crate::types::LeaseStatus;

const LEADER_B: LeaderKey = LeaderKey {
    term: 2,
    node_id: 2,
};
const LEADER_C: LeaderKey = LeaderKey {
    term: 3,
    node_id: 3,
};

#[track_caller]
fn reclaimed(reply: &Reply) -> Vec<(String, u64)> {
    match reply {
        Reply::Reclaimed(views) => views
            .iter()
            .map(|v| {
                assert_eq!(v.status, LeaseStatus::Reclaimed);
                (v.lease.resource.to_string(), v.lease.fencing_token)
            })
            .collect(),
        other => panic!("expected reclaims, got {other:?}"),
    }
}

#[test]
fn s5_3_a_leader_change_does_not_shorten_a_lease() {
    let mut log = Log::new();
    let alice = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 10_000))).lease;
    log.elapse(4_000);
    log.tick();
    assert_eq!(log.now_ms(), 4_000);

    // The new leader's monotonic clock reads an hour ahead: no time passes across the change.
    log.elect(LEADER_B, log.mono_ms() + HOUR_MS);
    log.tick();
    assert_eq!(log.now_ms(), 4_000);
    assert!(
        log.validate("world", &alice.lease_id().to_string(), alice.fencing_token)
            .valid
    );
    log.elapse(5_999);
    let bob = || acq_ttl("world", "bob", 5_000);
    assert_eq!(
        refused(&log.acquire(BOB, bob())).0,
        Refusal::ResourceUnavailable
    );
    assert_eq!(log.now_ms(), 9_999);

    // The next leader's clock reads far behind (a reboot): still no time lost, none gained.
    log.elect(LEADER_C, 3);
    assert_eq!(
        refused(&log.acquire(BOB, bob())).0,
        Refusal::ResourceUnavailable
    );
    assert_eq!(log.now_ms(), 9_999);
    log.elapse(1);
    let bob = granted(&log.acquire(BOB, bob())).lease;
    assert_eq!(log.now_ms(), 10_000);
    assert_eq!(bob.fencing_token, log.index);
}

#[test]
fn s5_3_the_leader_plans_a_tick_right_after_a_leader_change() {
    assert_eq!(
        plan(&State::default(), LEADER, stamp_at(5), 500),
        Plan::Propose(Op::Tick)
    );

    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("world", "alice", 10_000)));
    let b_mono_ms = log.mono_ms() + HOUR_MS;
    assert_eq!(
        plan(&log.state, LEADER_B, stamp_at(b_mono_ms), 500),
        Plan::Propose(Op::Tick)
    );

    // Once B's Tick is applied, B plans by its own clock.
    log.elect(LEADER_B, b_mono_ms);
    log.tick();
    assert_eq!(
        plan(&log.state, LEADER_B, stamp_at(b_mono_ms + 100), 500),
        Plan::Wait(400)
    );
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(b_mono_ms + 100), 500),
        Plan::Propose(Op::Tick)
    );
}

#[test]
fn s4_4_the_leader_proposes_a_reclaim_as_soon_as_a_lease_is_due() {
    let mut log = Log::with_default_policy(Policy {
        renewal_grace_ms: 1_000,
        ..Policy::ad_hoc()
    });
    let anchor_ms = log.mono_ms();
    let token = granted(&log.acquire(ALICE, acq_ttl("world", "alice", 2_000)))
        .lease
        .fencing_token;
    // Anchored at lease time 0; due at expiry 2 000 + grace 1 000.
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 2_999), 10_000),
        Plan::Wait(1)
    );
    let due = Op::Reclaim {
        leases: vec![("world".to_string(), token)],
    };
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 3_000), 10_000),
        Plan::Propose(due.clone())
    );

    log.elapse(3_000);
    let reply = log.propose(ROOT, due);
    assert_eq!(reclaimed(&reply), vec![("world".to_string(), token)]);
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 3_100), 10_000),
        Plan::Wait(10_000)
    );
}

#[test]
fn s5_3_the_leader_waits_for_the_next_tick_or_the_next_due_lease_whichever_is_sooner() {
    let mut log = Log::new();
    let anchor_ms = log.mono_ms();
    granted(&log.acquire(ALICE, acq_ttl("world", "alice", 2_000)));
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 100), 500),
        Plan::Wait(400)
    );

    log.elapse(1_800);
    log.tick();
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 1_900), 500),
        Plan::Wait(100)
    );
}

#[test]
fn s5_3_the_leader_ticks_when_the_committed_clock_is_a_tick_interval_old() {
    let mut log = Log::new();
    let anchor_ms = log.mono_ms();
    granted(&log.acquire(ALICE, acq_ttl("world", "alice", 10_000)));
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 499), 500),
        Plan::Wait(1)
    );
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 500), 500),
        Plan::Propose(Op::Tick)
    );
}

#[test]
fn s5_3_the_leader_waits_a_tick_interval_when_nothing_is_live() {
    let mut log = Log::new();
    let anchor_ms = log.mono_ms();
    log.tick();
    assert_eq!(
        plan(&log.state, LEADER, stamp_at(anchor_ms + 59_000), 500),
        Plan::Wait(500)
    );
}
