//! The lease clock under clock faults (feature `fault-injection`): time counts only as the
//! log's leaders measured it, never across a leader change, so no skew shortens a lease.

use std::time::Duration;

use tenure_node::coord::stamp_clock::ClockSkew;
use tenure_tests::{acquire_request, get_resource, started, started_with, ELECTION};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_whose_clocks_run_an_hour_ahead_shortens_no_lease() {
    let (mut cluster, old_leader) = started(3).await;
    let ttl = Duration::from_secs(5);
    let sent = Instant::now();
    let granted = cluster
        .client()
        .acquire(acquire_request("clock/ahead", "holder", ttl))
        .await
        .expect("acquire");
    assert!(granted.granted);

    // Whoever wins next runs both clocks an hour ahead of the old leader's.
    let hour_ms = 3_600_000;
    for id in cluster
        .live_ids()
        .into_iter()
        .filter(|id| *id != old_leader)
    {
        let node = cluster.node(id);
        let before = node.clock.wall_ms();
        node.clock.apply_skew(ClockSkew {
            step_ms: hour_ms,
            rate_ppm: 0,
        });
        assert!(node.clock.wall_ms() >= before + hour_ms as u64);
    }
    cluster.kill(old_leader).await;
    let new_leader = cluster.leader(ELECTION).await.expect("new leader");
    // A linearizable read: the new leader has applied the grant, and still holds it.
    let read = get_resource(&cluster.client(), "clock/ahead")
        .await
        .expect("read");
    assert!(
        sent.elapsed() < ttl,
        "the election outlasted the ttl; nothing below would be checked"
    );
    assert_eq!(
        read.leases.len(),
        1,
        "the lease was cut short by the new leader's clock: {read:?}"
    );
    assert!(!cluster.local_leases(new_leader, "clock/ahead").is_empty());

    let freed = cluster.freed_on(new_leader, "clock/ahead").await;
    assert!(
        freed - sent >= ttl,
        "a leader an hour ahead ended a {ttl:?} lease after {:?}",
        freed - sent
    );

    // Under the new leader, leases still last their full ttl.
    let sent = Instant::now();
    let granted = cluster
        .client()
        .acquire(acquire_request("clock/after", "holder", ttl))
        .await
        .expect("acquire");
    assert!(granted.granted);
    let freed = cluster.freed_on(new_leader, "clock/after").await;
    assert!(freed - sent >= ttl, "ended after {:?}", freed - sent);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_clock_runs_one_percent_fast_shortens_a_lease_by_at_most_one_percent() {
    let fast = vec!["--fi-clock-rate-ppm".to_string(), "10000".into()];
    let (cluster, leader) = started_with(3, (1..=3).map(|id| (id, fast.clone())).collect()).await;
    let ttl = Duration::from_secs(10);
    let sent = Instant::now();
    let granted = cluster
        .client()
        .acquire(acquire_request("clock/fast", "holder", ttl))
        .await
        .expect("acquire");
    assert!(granted.granted);
    let freed = cluster.freed_on(leader, "clock/fast").await;
    let lived = freed - sent;
    assert!(
        lived >= ttl.mul_f64(0.99),
        "a 1% fast leader ended a {ttl:?} lease after {lived:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_idle_minute_and_a_leader_change_a_lease_outlives_its_ttl_by_at_most_a_tick_and_the_election(
) {
    let (mut cluster, leader) = started(3).await;
    let tick = cluster.node(leader).config.tick_interval;
    let ttl = Duration::from_secs(63);
    let sent = Instant::now();
    let granted = cluster
        .client()
        .acquire(acquire_request("clock/idle", "holder", ttl))
        .await
        .expect("acquire");
    assert!(granted.granted);
    let acked = Instant::now();

    // The scenario itself: a minute with no client traffic at all.
    tokio::time::sleep(Duration::from_secs(60)).await;

    let killed = Instant::now();
    cluster.kill(leader).await;
    let new_leader = cluster.leader(ELECTION).await.expect("new leader");
    let election = killed.elapsed();
    let freed = cluster.freed_on(new_leader, "clock/idle").await;

    assert!(freed - sent >= ttl, "ended early, after {:?}", freed - sent);
    // Apply, notification and the new leader's first Tick on a loaded 2-core machine.
    let slack = Duration::from_millis(500);
    let bound = ttl + tick + election + slack;
    assert!(
        freed - acked <= bound,
        "outlived its ttl by {:?}; bound: tick {tick:?} + election {election:?} + slack {slack:?}",
        (freed - acked).saturating_sub(ttl)
    );
    cluster.shutdown().await;
}
