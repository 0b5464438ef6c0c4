//! Lock delay (SPEC §4.4) through the API: after a reclaim the resource refuses acquires with
//! `lock_delay` and says in `closed_until` when it opens; a release closes nothing, and other
//! refusals carry no `closed_until`.

use std::time::{Duration, UNIX_EPOCH};

use tenure_client::{pb, prost_duration, Client};
use tenure_tests::{acquire_request, granted, next_event, release_request, started, watch};

const DELAY: Duration = Duration::from_secs(3_600);

async fn create(client: &Client, name: &str) {
    client
        .create_resource(pb::CreateResourceRequest {
            name: name.into(),
            policy: Some(pb::Policy {
                lock_delay: Some(prost_duration(DELAY)),
                // Reclaimed as soon as its ttl ends.
                renewal_grace: Some(prost_duration(Duration::ZERO)),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("create");
}

/// An acquire of `resource` for a minute, answered (granted or not).
async fn try_acquire(client: &Client, resource: &str, holder: &str) -> pb::AcquireResponse {
    client
        .acquire(acquire_request(resource, holder, Duration::from_secs(60)))
        .await
        .expect("answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reclaim_acquires_are_refused_until_closed_until() {
    let (cluster, leader) = started(3).await;
    let client = cluster.client();
    create(&client, "delay/reclaimed").await;
    create(&client, "delay/released").await;

    // A release ends the lease without closing the resource.
    let lease = granted(&client, "delay/released", "a", Duration::from_secs(60)).await;
    client
        .release(release_request(&lease))
        .await
        .expect("release");
    granted(&client, "delay/released", "b", Duration::from_secs(60)).await;
    // Held: refused, but not closed.
    let held = try_acquire(&client, "delay/released", "c").await;
    assert!(!held.granted);
    assert_eq!(held.reason, "resource_unavailable");
    assert_eq!(held.closed_until, None);

    // A lease left to expire is reclaimed, which closes the resource for the delay.
    let mut events = watch(&client, "delay/reclaimed", 0).await;
    granted(&client, "delay/reclaimed", "a", Duration::from_secs(1)).await;
    let reclaim = next_event(&mut events, pb::EventType::Reclaimed).await;
    let reclaimed_at = reclaim.at.as_ref().expect("the event's time");

    // From the leader and from a follower that has applied the reclaim (the answering node
    // reads `closed_until` from its own state).
    let follower = cluster.follower_of(leader);
    cluster.applied_at_least(follower, reclaim.revision).await;
    for (holder, c) in [
        ("b", cluster.client_of(leader)),
        ("c", cluster.client_of(follower)),
    ] {
        let refused = try_acquire(&c, "delay/reclaimed", holder).await;
        assert!(!refused.granted);
        assert_eq!(refused.reason, "lock_delay");
        let until = refused.closed_until.as_ref().expect("closed_until");
        // The delay counts from the reclaim, in the cluster's time: opens an hour after it,
        // within the slack of wall clocks read on different nodes.
        let opens = until.seconds - reclaimed_at.seconds;
        assert!(
            (DELAY.as_secs() as i64 - 5..=DELAY.as_secs() as i64 + 5).contains(&opens),
            "opens {opens} s after the reclaim at {reclaimed_at:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        assert!(until.seconds > now + DELAY.as_secs() as i64 - 60);
    }
    cluster.shutdown().await;
}
