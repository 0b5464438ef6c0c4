//! A three-node cluster in one process: leases survive the leader, expire only after their
//! ttl, and come back from snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_node::store::StorageStats;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::scenario::{self, ELECTION};
use tenure_tests::{acquire_request, get_resource};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_acquired_on_a_follower_survives_the_leader_and_expires_only_after_its_ttl() {
    let mut cluster = InProcessCluster::start(3, BTreeMap::new())
        .await
        .expect("cluster");
    scenario::leader_crash_keeps_the_lease(&mut cluster).await;

    // Every survivor's committed state agrees, and every append was fdatasynced.
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let leader_applied = cluster
        .node(leader)
        .sm
        .read()
        .last_applied
        .map_or(0, |l| l.index);
    let mut states = Vec::new();
    for id in cluster.live_ids() {
        cluster.applied_at_least(id, leader_applied).await;
        states.push(cluster.local_leases(id, "world/eu-1"));
        let stats = &cluster.node(id).sm.stats;
        let (appends, fsyncs) = (
            StorageStats::get(&stats.log_appends),
            StorageStats::get(&stats.log_fsyncs),
        );
        assert!(
            appends > 0 && fsyncs >= appends,
            "node {id}: {appends} appends, {fsyncs} fdatasyncs"
        );
    }
    assert!(states.windows(2).all(|w| w[0] == w[1]), "{states:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_loads_the_snapshot_and_replays_only_the_tail() {
    let flags = vec![
        "--snapshot-every".to_string(),
        "20".into(),
        "--snapshot-keep-logs".into(),
        "0".into(),
    ];
    let extra = (1..=3).map(|id| (id, flags.clone())).collect();
    let mut cluster = InProcessCluster::start(3, extra).await.expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let client = cluster.client();
    let mut tokens = BTreeMap::new();
    for i in 0..45 {
        let resource = format!("seat/{i}");
        let granted = client
            .acquire(acquire_request(
                &resource,
                "holder",
                Duration::from_secs(300),
            ))
            .await
            .expect("acquire");
        tokens.insert(resource, granted.lease.expect("granted").fencing_token);
    }
    let restarted = cluster
        .live_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let node = cluster.node(restarted).clone();
    node.raft
        .wait(Some(ELECTION))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= 40) && m.purged.is_some(),
            "snapshot and purge",
        )
        .await
        .expect("a snapshot was built and the log purged behind it");
    drop(node);

    cluster.kill(restarted).await;
    let more = client
        .acquire(acquire_request(
            "seat/after",
            "holder",
            Duration::from_secs(300),
        ))
        .await
        .expect("acquire");
    tokens.insert(
        "seat/after".into(),
        more.lease.expect("granted").fencing_token,
    );
    cluster.restart(restarted).await.expect("restart");

    let stats = &cluster.node(restarted).sm.stats;
    assert!(
        StorageStats::get(&stats.last_snapshot_index) >= 40,
        "the restarted node loaded its snapshot from disk"
    );
    let read = get_resource(&client, "seat/after").await.expect("read");
    assert_eq!(read.leases[0].fencing_token, tokens["seat/after"]);
    let leader_applied = cluster
        .node(cluster.leader(ELECTION).await.expect("leader"))
        .sm
        .read()
        .last_applied
        .map_or(0, |l| l.index);
    cluster.applied_at_least(restarted, leader_applied).await;
    let purged = cluster.node(restarted).raft.metrics().borrow().purged;
    assert!(
        purged.is_some_and(|p| p.index > 1),
        "its log starts after the snapshot: {purged:?}"
    );
    for (resource, token) in &tokens {
        assert_eq!(
            cluster.local_leases(restarted, resource),
            vec![("holder".to_string(), *token)],
            "{resource}"
        );
    }
    cluster.shutdown().await;
}
