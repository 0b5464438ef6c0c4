//! `AcquireMany` with `WAIT` over a real three-node cluster (SPEC §4.25): a blocked call on a
//! follower is admitted in every room by one entry, and a call that goes away leaves every
//! room in one entry.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Client};
use tenure_tests::{granted, next_events, release_request, started};

fn waiting_many(holder: &str, resources: &[&str], wait: Duration) -> pb::AcquireManyRequest {
    pb::AcquireManyRequest {
        holder: holder.into(),
        claims: resources
            .iter()
            .map(|r| pb::ResourceClaim {
                resource: r.to_string(),
                ..Default::default()
            })
            .collect(),
        ttl: Some(prost_duration(Duration::from_secs(30))),
        on_conflict: pb::OnConflict::Wait as i32,
        wait_timeout: Some(prost_duration(wait)),
        ..Default::default()
    }
}

/// Live events of every resource under `prefix` from now on.
async fn events(client: &Client, prefix: &str) -> tonic::Streaming<pb::WatchResponse> {
    client
        .watch(pb::WatchRequest {
            prefix: prefix.into(),
            live_only: true,
            ..Default::default()
        })
        .await
        .expect("watch")
}

async fn waiting_count(client: &Client, resource: &str) -> u32 {
    client
        .get_resource(pb::GetResourceRequest {
            name: resource.into(),
            ..Default::default()
        })
        .await
        .expect("get")
        .resource
        .expect("resource")
        .waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_multi_wait_on_a_follower_is_admitted_in_every_room_by_one_entry() {
    let (cluster, leader) = started(3).await;
    let client = cluster.client();
    let x = granted(&client, "many/a/x", "owner", Duration::from_secs(600)).await;
    let y = granted(&client, "many/a/y", "owner", Duration::from_secs(600)).await;
    let mut watch = events(&client, "many/a/").await;
    let follower = *cluster
        .live_ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let waiter = cluster.client_of(follower);
    let call = tokio::spawn(async move {
        waiter
            .acquire_many(waiting_many(
                "both",
                &["many/a/x", "many/a/y"],
                Duration::from_secs(600),
            ))
            .await
    });
    let queued = next_events(&mut watch, pb::EventType::Queued, 2).await;
    assert!(queued.iter().all(|e| e.holder == "both"), "{queued:?}");
    client
        .release(release_request(&x))
        .await
        .expect("release x");
    client
        .release(release_request(&y))
        .await
        .expect("release y");
    let answer = call.await.expect("joined").expect("admitted");
    assert!(answer.granted, "{answer:?}");
    assert_eq!(answer.leases.len(), 2);
    let token = answer.leases[0].fencing_token;
    assert!(answer.leases.iter().all(|l| l.fencing_token == token));
    // Admitted in both rooms by the entry of the second release, which freed the last one.
    let admitted = next_events(&mut watch, pb::EventType::Admitted, 2).await;
    assert!(admitted.iter().all(|e| e.revision == token), "{admitted:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_wait_whose_call_goes_away_leaves_every_room_in_one_entry() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    granted(&client, "many/b/y", "owner", Duration::from_secs(600)).await;
    let mut watch = events(&client, "many/b/").await;
    let impatient = cluster.client();
    let call = tokio::spawn(async move {
        impatient
            .acquire_many(waiting_many(
                "impatient",
                &["many/b/x", "many/b/y", "many/b/z"],
                Duration::from_secs(600),
            ))
            .await
    });
    next_events(&mut watch, pb::EventType::Queued, 3).await;
    call.abort();
    let removed = next_events(&mut watch, pb::EventType::WaitCancelled, 3).await;
    assert!(
        removed.iter().all(|e| e.holder == "impatient"),
        "{removed:?}"
    );
    assert!(
        removed.iter().all(|e| e.revision == removed[0].revision),
        "one entry: {removed:?}"
    );
    for resource in ["many/b/x", "many/b/y", "many/b/z"] {
        assert_eq!(waiting_count(&client, resource).await, 0, "{resource}");
    }
    // x and z were free all along, and nobody was granted them.
    let free = client
        .acquire_many(pb::AcquireManyRequest {
            on_conflict: pb::OnConflict::Fail as i32,
            ..waiting_many("later", &["many/b/x", "many/b/z"], Duration::ZERO)
        })
        .await
        .expect("acquire");
    assert!(free.granted, "{free:?}");
    cluster.shutdown().await;
}
