//! A three-node cluster in one process: leases survive the leader, expire only after their
//! ttl, and come back from snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_client::pb;
use tenure_node::lease::Answer;
use tenure_node::lease::Query;
use tenure_node::store::StorageStats;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{acquire_request, get_resource};
use tokio::time::Instant;

const ELECTION: Duration = Duration::from_secs(15);

/// Waits until node `id` has applied at least `index`.
async fn applied_at_least(cluster: &InProcessCluster, id: u64, index: u64) {
    let mut applied = cluster.node(id).sm.subscribe();
    applied
        .wait_for(|i| *i >= index)
        .await
        .expect("state machine alive");
}

/// The local (committed) view of `resource` on node `id`.
fn local_leases(cluster: &InProcessCluster, id: u64, resource: &str) -> Vec<(String, u64)> {
    let applied = cluster.node(id).sm.read();
    match tenure_node::lease::query::answer(
        &applied.state,
        &Query::Resource {
            name: resource.into(),
        },
    ) {
        Answer::Resource(view) => view
            .leases
            .iter()
            .map(|l| (l.lease.holder.clone(), l.lease.fencing_token))
            .collect(),
        other => panic!("unexpected answer {other:?}"),
    }
}

/// Resolves when node `id` no longer shows any lease on `resource`.
async fn lease_gone(cluster: &InProcessCluster, id: u64, resource: &str) {
    let mut applied = cluster.node(id).sm.subscribe();
    loop {
        if local_leases(cluster, id, resource).is_empty() {
            return;
        }
        applied.changed().await.expect("state machine alive");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_acquired_on_a_follower_survives_the_leader_and_expires_only_after_its_ttl() {
    let mut cluster = InProcessCluster::start(3, BTreeMap::new())
        .await
        .expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let follower = cluster
        .live_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");

    // Long enough that the election below ends well inside it.
    let ttl = Duration::from_secs(8);
    let sent = Instant::now();
    let granted = cluster
        .client_of(follower)
        .acquire(acquire_request("shard/7", "holder-a", ttl))
        .await
        .expect("acquire on a follower");
    assert!(granted.granted, "{granted:?}");
    let lease = granted.lease.expect("lease");
    let token = lease.fencing_token;
    assert!(
        token >= 2,
        "a fencing token is a log index past the bootstrap entries"
    );

    cluster.kill(leader).await;
    let new_leader = cluster.leader(ELECTION).await.expect("a new leader");
    assert_ne!(new_leader, leader);

    let mut read_revision = 0;
    for id in cluster.live_ids() {
        let response = cluster
            .client_of(id)
            .get_resource(pb::GetResourceRequest {
                name: "shard/7".into(),
                consistency: 0,
            })
            .await
            .expect("linearizable read through a survivor");
        let resource = response.resource.expect("resource");
        assert_eq!(resource.leases.len(), 1, "node {id}: {resource:?}");
        assert_eq!(resource.leases[0].holder, "holder-a");
        assert_eq!(resource.leases[0].fencing_token, token);
        read_revision = read_revision.max(response.read_revision);
    }
    for id in cluster.live_ids() {
        applied_at_least(&cluster, id, read_revision).await;
        let local = local_leases(&cluster, id, "shard/7");
        assert!(
            local.is_empty() || local == vec![("holder-a".to_string(), token)],
            "node {id} committed state disagrees: {local:?}"
        );
    }

    let refused = cluster
        .client()
        .acquire(acquire_request("shard/7", "holder-b", ttl))
        .await
        .expect("answered");
    assert!(
        Instant::now() < sent + ttl,
        "the election outlasted the ttl; the refusal below proves nothing"
    );
    assert!(
        !refused.granted,
        "another holder got a live lease: {refused:?}"
    );
    assert_eq!(refused.reason, "resource_unavailable");
    assert_eq!(refused.holders[0].fencing_token, token);

    let survivor = cluster.live_ids()[0];
    lease_gone(&cluster, survivor, "shard/7").await;
    assert!(
        sent.elapsed() >= ttl,
        "reclaimed after {:?}, before its ttl {ttl:?}",
        sent.elapsed()
    );

    let next = cluster
        .client()
        .acquire(acquire_request("shard/7", "holder-b", ttl))
        .await
        .expect("acquire");
    assert!(next.granted, "{next:?}");
    assert!(
        next.lease.expect("lease").fencing_token > token,
        "tokens must strictly increase"
    );

    for id in cluster.live_ids() {
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
    applied_at_least(&cluster, restarted, leader_applied).await;
    let purged = cluster.node(restarted).raft.metrics().borrow().purged;
    assert!(
        purged.is_some_and(|p| p.index > 1),
        "its log starts after the snapshot: {purged:?}"
    );
    for (resource, token) in &tokens {
        assert_eq!(
            local_leases(&cluster, restarted, resource),
            vec![("holder".to_string(), *token)],
            "{resource}"
        );
    }
    cluster.shutdown().await;
}
