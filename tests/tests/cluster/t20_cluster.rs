//! A three-node cluster in one process: leases survive the leader, expire only after their
//! ttl, and come back from snapshots.

use std::collections::BTreeMap;
use std::time::Duration;
use tenure_node::store::WatchReceiver as _;

use tenure_node::store::StorageStats;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::scenario;
use tenure_tests::{acquire_request, get_resource, started_with, ELECTION};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_acquired_on_a_follower_survives_the_leader_and_expires_only_after_its_ttl() {
    let mut cluster = InProcessCluster::start(3, BTreeMap::new())
        .await
        .expect("cluster");
    scenario::leader_crash_keeps_the_lease(&mut cluster).await;

    // Every survivor's committed state agrees, and every append was fdatasynced.
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let leader_applied = cluster.applied_index(leader);
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
    let (mut cluster, leader) = snapshotting_cluster().await;
    let client = cluster.client();
    let mut tokens = acquire_seats(&client, 45).await;
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
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let leader_applied = cluster.applied_index(leader);
    cluster.applied_at_least(restarted, leader_applied).await;
    let purged = cluster
        .node(restarted)
        .raft
        .metrics()
        .borrow_watched()
        .purged;
    assert!(
        purged.is_some_and(|p| p.index > 1),
        "its log starts after the snapshot: {purged:?}"
    );
    assert_holds(&cluster, restarted, &tokens);
    cluster.shutdown().await;
}

/// A follower that was down while the leader purged its log catches up from the leader's
/// snapshot file, sent in chunks and installed from disk, then from the log after it. The
/// cluster runs this release's rules first, so the snapshot is of its format (9: the live
/// state and the archive's entries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_a_purged_log_catches_up_from_a_sent_snapshot() {
    let (mut cluster, leader) = snapshotting_cluster().await;
    let rules = tenure_node::rules::RELEASE.max;
    let mut applied = cluster.node(leader).sm.subscribe();
    while cluster.node(leader).sm.read().state.rules() < rules {
        tokio::time::timeout(ELECTION, applied.changed())
            .await
            .expect("the rules rise")
            .expect("the node runs");
    }
    let behind = cluster
        .live_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.kill(behind).await;

    let tokens = acquire_seats(&cluster.client(), 45).await;
    cluster
        .node(leader)
        .raft
        .wait(Some(ELECTION))
        .metrics(
            |m| {
                m.snapshot.is_some_and(|s| s.index >= 40) && m.purged.is_some_and(|p| p.index >= 40)
            },
            "the leader's snapshot and purge",
        )
        .await
        .expect("the leader built a snapshot and purged its log behind it");

    cluster.restart(behind).await.expect("restart");
    let leader_applied = cluster.applied_index(leader);
    cluster.applied_at_least(behind, leader_applied).await;
    let stats = &cluster.node(behind).sm.stats;
    // At least one: a send begun while the follower was down goes on with the snapshot it
    // read then (openraft 0.10 retries the same one), and the newer one follows it.
    assert!(
        StorageStats::get(&stats.snapshots_installed) >= 1,
        "the follower installed the leader's snapshot"
    );
    assert!(StorageStats::get(&stats.last_snapshot_index) >= 40);
    assert_eq!(cluster.node(behind).sm.read().state.rules(), rules);
    assert_holds(&cluster, behind, &tokens);
    // The installed snapshot is the one a restart loads.
    cluster.kill(behind).await;
    cluster.restart(behind).await.expect("second restart");
    assert!(StorageStats::get(&cluster.node(behind).sm.stats.last_snapshot_index) >= 40);
    cluster.applied_at_least(behind, leader_applied).await;
    assert_eq!(
        cluster.local_leases(behind, "seat/44"),
        vec![("holder".to_string(), tokens["seat/44"])]
    );
    cluster.shutdown().await;
}

/// Three nodes that snapshot every 20 entries and keep no log behind a snapshot, and their
/// leader.
async fn snapshotting_cluster() -> (InProcessCluster, u64) {
    let flags = ["--snapshot-every", "20", "--snapshot-keep-logs", "0"];
    started_with(3, tenure_tests::same_flags(3, &flags)).await
}

/// Acquires `seat/0` .. `seat/{n-1}` for `holder`; their fencing tokens by name.
async fn acquire_seats(client: &tenure_client::Client, n: usize) -> BTreeMap<String, u64> {
    let mut tokens = BTreeMap::new();
    for i in 0..n {
        let resource = format!("seat/{i}");
        let lease =
            tenure_tests::granted(client, &resource, "holder", Duration::from_secs(300)).await;
        tokens.insert(resource, lease.fencing_token);
    }
    tokens
}

/// Node `id` shows every seat held by `holder` under its token.
fn assert_holds(cluster: &InProcessCluster, id: u64, tokens: &BTreeMap<String, u64>) {
    for (resource, token) in tokens {
        assert_eq!(
            cluster.local_leases(id, resource),
            vec![("holder".to_string(), *token)],
            "node {id}: {resource}"
        );
    }
}
