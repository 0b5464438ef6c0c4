//! Rules versions (SPEC §4.26): the leader raises the cluster's rules only once every member
//! supports them, refuses what needs a version not reached, and a node refuses data written
//! past its own range. A node started with `--max-rules 1` stands in for a member of the
//! release before (it announces and applies what 0.1.0 does).

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_client::{pb, Reason};
use tenure_node::rules::RELEASE;
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
    for id in cluster.live_ids() {
        let node = cluster.node(id).clone();
        until(&cluster, id, "the raise applies", || {
            node.sm.read().state.rules() == RELEASE.max
        })
        .await;
    }
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
    cluster
        .client_of(3)
        .node_snapshot(0, false)
        .await
        .expect("a snapshot on node 3");
    cluster.stop(3).await;
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
