//! Test bodies that run unchanged against both cluster runners (in-process and real
//! processes), as etcd runs one test body with both of its cluster runners.

use std::time::Duration;

use tenure_client::Client;
use tokio::time::Instant;

use crate::{acquire_request, get_resource, ELECTION};

/// What a scenario needs from a cluster runner.
#[allow(async_fn_in_trait)] // used generically in tests only, never as `dyn`
pub trait Cluster {
    fn client(&self) -> Client;
    fn client_of(&self, id: u64) -> Client;
    fn live_ids(&self) -> Vec<u64>;
    /// Waits until every live node names the same live leader.
    async fn leader(&self, timeout: Duration) -> anyhow::Result<u64>;
    /// Crashes a node as hard as the runner can: nothing in flight is finished.
    async fn crash(&mut self, id: u64);
    /// Resolves once the cluster has committed the end of every lease on `resource`.
    async fn until_free(&self, resource: &str);
    /// Diagnostics for a failed assertion.
    fn describe(&self, id: u64) -> String;
}

/// SPEC §5.1 and §5.4: a lease acquired through a follower survives the crash of the
/// leader; every survivor reports the same holder and token; another holder is refused while
/// it lasts; it ends no earlier than its ttl; the next grant has a strictly higher token.
pub async fn leader_crash_keeps_the_lease(cluster: &mut impl Cluster) {
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
        .acquire(acquire_request("world/eu-1", "server-7", ttl))
        .await
        .expect("acquire through a follower");
    assert!(granted.granted, "{granted:?}");
    let token = granted.lease.expect("lease").fencing_token;
    assert!(
        token >= 2,
        "a fencing token is a log index past the bootstrap entries"
    );

    cluster.crash(leader).await;
    let new_leader = cluster.leader(ELECTION).await.expect("a new leader");
    assert_ne!(new_leader, leader);
    for id in cluster.live_ids() {
        let resource = get_resource(&cluster.client_of(id), "world/eu-1")
            .await
            .expect("read through a survivor");
        assert_eq!(
            resource.leases.len(),
            1,
            "node {id}: {resource:?}\n{}",
            cluster.describe(id)
        );
        let lease = &resource.leases[0];
        assert_eq!(
            (lease.holder.as_str(), lease.fencing_token),
            ("server-7", token),
            "node {id}"
        );
    }

    let client = cluster.client();
    let refused = client
        .acquire(acquire_request("world/eu-1", "server-9", ttl))
        .await
        .expect("answered");
    assert!(
        Instant::now() < sent + ttl,
        "the election outlasted the ttl; the refusal proves nothing"
    );
    assert!(
        !refused.granted,
        "another holder got a live lease: {refused:?}"
    );
    assert_eq!(refused.reason, "resource_unavailable");
    assert_eq!(refused.holders[0].fencing_token, token);

    tokio::time::timeout(ttl * 3, cluster.until_free("world/eu-1"))
        .await
        .expect("the lease ends");
    assert!(
        sent.elapsed() >= ttl,
        "ended after {:?}, before its ttl {ttl:?}",
        sent.elapsed()
    );

    let next = client
        .acquire(acquire_request("world/eu-1", "server-9", ttl))
        .await
        .expect("acquire");
    assert!(next.granted, "{next:?}");
    assert!(
        next.lease.expect("lease").fencing_token > token,
        "tokens must strictly increase"
    );
}
