//! Rules versions (SPEC §4.26): the leader raises the cluster's rules only once every member
//! supports them, refuses what needs a version not reached, and a node refuses data written
//! past its own range. A node started with `--max-rules 1` stands in for a member of the
//! release before (it announces and applies what 0.1.0 does).

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_client::{pb, Reason};
use tenure_node::rules::RELEASE;
use tenure_node::store::StorageStats;
use tenure_node::store::WatchReceiver as _;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{acquire_request, ELECTION};

const WAIT: Duration = Duration::from_secs(20);

/// Waits until `holds` is true of node `id`, checking whenever its Raft metrics change (the
/// leader's change with every heartbeat it gets back).
async fn until(cluster: &InProcessCluster, id: u64, what: &str, holds: impl Fn() -> bool) {
    let mut metrics = cluster.node(id).raft.metrics();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !holds() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        let _ = tokio::time::timeout_at(deadline, metrics.changed()).await;
    }
}

/// Waits until every live node of `cluster` runs rules version `rules`.
async fn all_run(cluster: &InProcessCluster, rules: u32) {
    for id in cluster.live_ids() {
        let node = cluster.node(id).clone();
        until(
            cluster,
            id,
            &format!("the raise to {rules} applies"),
            || node.sm.read().state.rules() == rules,
        )
        .await;
    }
}

/// Takes a snapshot on node `id` (its own, kept in its data directory) and stops it.
async fn snapshot_and_stop(cluster: &mut InProcessCluster, id: u64) {
    let snapshot = cluster.client_of(id).node_snapshot(0, false).await;
    snapshot.expect("a snapshot");
    cluster.stop(id).await;
}

fn renew_setting(lease: &pb::Lease, key: &str, value: &str) -> pb::RenewRequest {
    pb::RenewRequest {
        metadata: [(key.to_string(), value.to_string())].into(),
        replace_metadata: true,
        ..tenure_client::renew_request(lease, Duration::from_secs(60))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_rise_only_once_every_member_supports_them_and_gate_what_needs_them() {
    let extra = BTreeMap::from([(3, vec!["--max-rules".to_string(), "1".to_string()])]);
    let mut cluster = InProcessCluster::start(3, extra).await.expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let client = cluster.client();
    let lease = client
        .acquire(acquire_request("svc/leader", "a", Duration::from_secs(60)))
        .await
        .expect("acquire")
        .lease
        .expect("granted");

    // Node 3 holds the raise back, and the leader says so.
    let node = cluster.node(leader).clone();
    until(&cluster, leader, "the leader names node 3", || {
        node.rules_raise()
            == tenure_node::rules::Raise::HeldBack(vec!["node 3 supports rules up to 1".into()])
    })
    .await;
    let status = client
        .node_status(leader as usize - 1)
        .await
        .expect("status");
    assert_eq!(status.rules_version, 1);
    assert_eq!(
        status.rules_held_back,
        vec!["node 3 supports rules up to 1".to_string()]
    );
    let member_3 = status.members.iter().find(|m| m.id == 3).expect("member 3");
    assert_eq!(member_3.rules, "1-1");

    // What needs rules 2 is refused before it is proposed, on any node.
    let before = cluster.applied_index(leader);
    let refused = client
        .renew(renew_setting(&lease, "addr", "10.0.0.7:80"))
        .await
        .expect_err("refused");
    assert_eq!(refused.reason(), Some(Reason::RulesNotReached), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("needs rules version 2 and the cluster runs 1"),
        "{refused}"
    );
    let through_3 = cluster
        .client_of(3)
        .renew(renew_setting(&lease, "addr", "10.0.0.7:80"))
        .await
        .expect_err("refused");
    assert_eq!(through_3.reason(), Some(Reason::RulesNotReached));
    assert!(
        cluster.applied_index(leader) <= before + 2,
        "nothing but the leader's own entries was proposed"
    );

    // Node 3 comes back on this release's full range: the leader raises the rules.
    cluster.stop(3).await;
    cluster.set_flags(3, Vec::new());
    cluster.restart(3).await.expect("restart");
    all_run(&cluster, RELEASE.max).await;
    let renewed = client
        .renew(renew_setting(&lease, "addr", "10.0.0.7:80"))
        .await
        .expect("renewed with metadata")
        .lease
        .expect("a lease");
    assert_eq!(renewed.metadata["addr"], "10.0.0.7:80");
    assert_eq!(renewed.fencing_token, lease.fencing_token);

    // Node 3's data is of this release's rules now (format 9 from rules 3): started as a
    // release of rules 1, it refuses to start.
    snapshot_and_stop(&mut cluster, 3).await;
    cluster.set_flags(3, vec!["--max-rules".to_string(), "1".to_string()]);
    let refused = cluster.restart(3).await.expect_err("refuses to start");
    assert!(
        refused.to_string().contains(&format!(
            "is of rules version {}, and this node applies rules up to 1",
            RELEASE.max
        )),
        "{refused:#}"
    );
    cluster.shutdown().await;
}

/// SPEC §4.26: a node whose range stops below the cluster's version, added after the raise,
/// stops at the leader's first call (before decoding what it carries) and is never promoted
/// to voter (it neither catches up nor announces a range that holds the version), so it
/// costs the quorum nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_below_the_clusters_rules_halts_and_is_not_promoted() {
    let mut cluster = InProcessCluster::start(3, BTreeMap::new())
        .await
        .expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let node = cluster.node(leader).clone();
    until(&cluster, leader, "the raise applies", || {
        node.sm.read().state.rules() == RELEASE.max
    })
    .await;
    cluster.set_flags(4, vec!["--max-rules".to_string(), "1".to_string()]);
    let addr = cluster.join(4, None).await.expect("node 4 starts");
    let client = cluster.client();
    client
        .add_learner(4, &addr, false)
        .await
        .expect("a learner is added");
    let joined = cluster.node(4).clone();
    until(&cluster, leader, "node 4 halts", || {
        joined.sm.halted().is_some()
    })
    .await;
    let why = joined.sm.halted().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "rules version {}, and this node applies rules up to 1",
            RELEASE.max
        )),
        "{why}"
    );
    let refused = client
        .change_membership(vec![4], Vec::new())
        .await
        .expect_err("not promoted");
    assert_eq!(refused.reason(), Some(Reason::Unavailable), "{refused}");
    assert!(refused.to_string().contains("learner 4"), "{refused}");
    let status = client
        .node_status(leader as usize - 1)
        .await
        .expect("status");
    assert!(
        status.members.iter().any(|m| m.id == 4 && !m.voter),
        "{:?}",
        status.members
    );
    cluster.shutdown().await;
}

/// Acquires and releases `name` through `client`: it is left idle, and goes cold. Returns the
/// lease it had.
async fn cycle(client: &tenure_client::Client, name: &str) -> pb::Lease {
    let lease = client
        .acquire(acquire_request(name, "a", Duration::from_secs(60)))
        .await
        .expect("acquire")
        .lease
        .expect("granted");
    client
        .release(tenure_client::release_request(&lease))
        .await
        .expect("release");
    lease
}

/// Waits until every live node of `cluster` has applied what the leader has.
async fn caught_up(cluster: &InProcessCluster, leader: u64) {
    let index = cluster.applied_index(leader);
    for id in cluster.live_ids() {
        cluster.applied_at_least(id, index).await;
    }
}

/// What node `id` answers of the idle resource `lease` ended on: its revision, and how
/// Validate sees the ended lease.
fn seen_on(cluster: &InProcessCluster, id: u64, lease: &pb::Lease) -> (u64, bool, String) {
    let applied = cluster.node(id).sm.read();
    let state = &applied.state;
    let v = state.validate(&lease.resource, &lease.lease_id, lease.fencing_token, None);
    (
        state.resource_view(&lease.resource).revision,
        v.valid,
        v.reason,
    )
}

/// SPEC §4.26, rules version 4: while a member supports only 3 (a node started with
/// `--max-rules 3` stands in for the release before), idle resources keep a key each on every
/// node; after the raise, new ones go into chunks, and both are read the same on every node:
/// after a restart from a node's own snapshot (format 9, then 10) and on a learner that
/// installs the whole snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_resources_go_into_chunks_only_once_every_member_runs_rules_4() {
    // Snapshots purge the whole log behind them, so that a learner installs one.
    let keep: Vec<String> = ["--snapshot-keep-logs", "0"].map(String::from).to_vec();
    let mut extra = tenure_tests::same_flags(3, &keep);
    let max_3 = ["--max-rules", "3"].map(String::from);
    extra.get_mut(&3).expect("node 3").extend(max_3);
    let mut cluster = InProcessCluster::start(3, extra).await.expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    all_run(&cluster, 3).await;
    let client = cluster.client();
    let mut old = Vec::new();
    for n in 0..20 {
        old.push(cycle(&client, &format!("old/{n}")).await);
    }
    caught_up(&cluster, leader).await;
    for id in cluster.live_ids() {
        let layout = cluster.node(id).sm.read().state.idle_layout();
        assert_eq!(layout, (20, 0), "node {id}: a key each at rules 3");
    }
    // Node 3 keeps a snapshot of format 9, then comes back on the full range.
    snapshot_and_stop(&mut cluster, 3).await;
    cluster.set_flags(3, keep.clone());
    cluster.restart(3).await.expect("restart");
    all_run(&cluster, RELEASE.max).await;
    let mut new = Vec::new();
    for n in 0..40 {
        new.push(cycle(&client, &format!("new/{n}")).await);
    }
    caught_up(&cluster, leader).await;
    // A node restarted from its own snapshot of format 10 (the open chunk in it).
    let restarted = cluster.follower_of(leader);
    snapshot_and_stop(&mut cluster, restarted).await;
    cluster.restart(restarted).await.expect("restart");
    // A learner that installs the leader's snapshot whole (its log purged behind it).
    client
        .node_snapshot(leader as usize - 1, false)
        .await
        .expect("a snapshot on the leader");
    let addr = cluster.join(4, None).await.expect("node 4 starts");
    client
        .add_learner(4, &addr, true)
        .await
        .expect("node 4 caught up");
    caught_up(&cluster, leader).await;
    let installed = &cluster.node(4).sm.stats.snapshots_installed;
    assert!(
        StorageStats::get(installed) >= 1,
        "node 4 installed a snapshot"
    );
    let ended = [&old[0], &old[19], &new[0], &new[20], &new[39]];
    for id in cluster.live_ids() {
        let layout = cluster.node(id).sm.read().state.idle_layout();
        assert_eq!(layout, (20, 40), "node {id}: new ones in chunks");
        for lease in ended {
            let seen = seen_on(&cluster, id, lease);
            assert_eq!(seen, seen_on(&cluster, leader, lease), "node {id}");
            let wanted = (lease.fencing_token + 1, false, "lease released".to_string());
            assert_eq!(seen, wanted, "node {id}, {}", lease.resource);
        }
    }
    cluster.shutdown().await;
}
