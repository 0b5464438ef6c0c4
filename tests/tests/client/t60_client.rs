//! The Rust client's `Lease` handle: renews in the background, reports `lost()` when the
//! cluster refuses a renewal or when its local deadline passes.

use std::time::Duration;

use tenure_client::{pb, Acquired, Lost};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::started;
use tokio::time::Instant;

async fn hold(
    cluster: &InProcessCluster,
    resource: &str,
    ttl: Duration,
) -> Box<tenure_client::Lease> {
    match cluster
        .client()
        .lease(resource, "holder", ttl)
        .await
        .expect("acquire")
    {
        Acquired::Granted(lease) => lease,
        Acquired::Refused { reason, .. } => panic!("refused: {reason}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handle_keeps_its_lease_past_the_ttl_by_renewing() {
    let (cluster, _) = started(3).await;
    let ttl = Duration::from_secs(2);
    let lease = hold(&cluster, "client/renewed", ttl).await;
    tokio::select! {
        lost = lease.lost() => panic!("lost a renewed lease: {lost:?}"),
        _ = tokio::time::sleep(ttl * 3) => {}
    }
    let valid = cluster
        .client()
        .validate(pb::ValidateRequest {
            resource: "client/renewed".into(),
            fencing_token: lease.fencing_token(),
            ..Default::default()
        })
        .await
        .expect("validate");
    assert!(valid.valid, "{valid:?}");
    assert!(
        lease.deadline() > Instant::now(),
        "renewals moved the local deadline"
    );
    let released = lease.release().await.expect("release");
    assert_eq!(released.status, pb::LeaseStatus::Released as i32);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_the_cluster_refuses_a_renewal() {
    let (cluster, _) = started(3).await;
    let lease = hold(&cluster, "client/taken", Duration::from_secs(3)).await;
    // Someone else (an operator, a bug) ends the lease behind the handle's back.
    cluster
        .client()
        .release(pb::ReleaseRequest {
            resource: "client/taken".into(),
            lease_id: lease.lease_id().into(),
            holder: "holder".into(),
            fencing_token: lease.fencing_token(),
            request_id: String::new(),
        })
        .await
        .expect("release");
    let lost = tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(lost, Lost::Refused("lease_not_found".into()));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_at_the_local_deadline_when_no_node_answers() {
    let (mut cluster, _) = started(3).await;
    let ttl = Duration::from_secs(2);
    let sent = Instant::now();
    let lease = hold(&cluster, "client/cut-off", ttl).await;
    for id in cluster.live_ids() {
        cluster.kill(id).await;
    }
    let lost = tokio::time::timeout(ttl * 2, lease.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(lost, Lost::DeadlinePassed);
    let now = Instant::now();
    assert!(now >= lease.deadline(), "fired before the local deadline");
    assert!(
        now - sent <= ttl,
        "fired after the ttl had run out: {:?}",
        now - sent
    );
}
