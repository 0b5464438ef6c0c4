//! Real `tenured` processes on loopback, killed with SIGKILL: leases survive the leader and a
//! full-cluster crash with their tokens.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_client::pb;
use tenure_tests::process::ProcessCluster;
use tenure_tests::scenario;
use tenure_tests::{acquire_request, get_resource, ELECTION};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_loses_no_lease_and_expiry_waits_for_the_ttl() {
    let mut cluster = ProcessCluster::start(3, BTreeMap::new()).expect("cluster");
    scenario::leader_crash_keeps_the_lease(&mut cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_cluster_sigkill_and_restart_keeps_every_acknowledged_lease() {
    let mut cluster = ProcessCluster::start(3, BTreeMap::new()).expect("cluster");
    cluster.leader(ELECTION).await.expect("leader");
    let client = cluster.client();
    let ttl = Duration::from_secs(600);
    let mut held = BTreeMap::new();
    let mut released = Vec::new();
    for i in 0..40 {
        let resource = format!("slot/{i}");
        let response = client
            .acquire(acquire_request(&resource, &format!("worker-{i}"), ttl))
            .await
            .expect("acquire");
        let lease = response.lease.expect("granted");
        if i % 4 == 3 {
            client
                .release(pb::ReleaseRequest {
                    resource: resource.clone(),
                    lease_id: lease.lease_id,
                    holder: lease.holder,
                    fencing_token: lease.fencing_token,
                    request_id: String::new(),
                })
                .await
                .expect("release");
            released.push(resource);
        } else {
            held.insert(resource, (lease.holder, lease.fencing_token));
        }
    }
    for i in 0..3 {
        let status = client.node_status(i).await.expect("status");
        let storage = status.storage.expect("storage stats");
        assert!(
            storage.log_appends > 0 && storage.log_fsyncs >= storage.log_appends,
            "node {}: every append fdatasynced: {storage:?}",
            status.id
        );
    }

    for id in cluster.live_ids() {
        cluster.kill9(id).expect("kill -9");
    }
    for id in [3, 1, 2] {
        cluster.restart(id).expect("restart");
    }
    cluster
        .leader(ELECTION)
        .await
        .expect("leader after restart");
    for (resource, (holder, token)) in &held {
        let read = get_resource(&client, resource).await.expect("read");
        assert_eq!(read.leases.len(), 1, "{resource} lost: {read:?}");
        assert_eq!(
            (&read.leases[0].holder, read.leases[0].fencing_token),
            (holder, *token),
            "{resource}"
        );
    }
    for resource in &released {
        assert!(
            get_resource(&client, resource)
                .await
                .expect("read")
                .leases
                .is_empty(),
            "{resource} came back"
        );
    }
}

/// A follower whose forwarded call finds the leader's port refusing connections starts the
/// election itself as soon as the old leader's lease has run out (`--election-max`), instead
/// of also waiting out its own election timeout. With election timeouts of 6–8 s, openraft's
/// timers alone would elect 14–16 s after the leader's last heartbeat, at random; the call
/// below, through the lowest-id survivor and bounded at 12 s, is served only if that node
/// started it at ~8 s (the other survivor's turn comes 6 s later), with 4 s to spare for a
/// loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_refused_by_a_dead_leader_elects_when_the_lease_ends() {
    let flags = [
        "--election-min=6s",
        "--election-max=8s",
        "--request-timeout=12s",
    ];
    let extra = tenure_tests::same_flags(3, &flags);
    let mut cluster = ProcessCluster::start(3, extra).expect("cluster");
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let survivor = cluster
        .live_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .min()
        .expect("a survivor");
    cluster.kill9(leader).expect("kill -9");
    let client = cluster
        .client_of(survivor)
        .with_timeout(Duration::from_secs(12));
    let lease =
        tenure_tests::granted(&client, "after/leader", "holder", Duration::from_secs(60)).await;
    assert!(lease.fencing_token > 0);
    assert_eq!(
        cluster
            .leader(Duration::from_secs(10))
            .await
            .expect("leader"),
        survivor,
        "the survivor that saw the refusal started the election and won it"
    );
}
