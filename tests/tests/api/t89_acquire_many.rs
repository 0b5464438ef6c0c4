//! `AcquireMany` with `WAIT` over a real three-node cluster (SPEC §4.25): a blocked call on a
//! follower is admitted in every room by one entry; a multi-wait ends in every room in one
//! entry — its call going away, its `wait_timeout`, a `CancelWait` on any one of its
//! resources, its session's close — and its blocked call answers once, with every claim.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Client};
use tenure_tests::{close_session, granted, next_events, release_request, started};

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

/// A multi-wait's blocked call must have answered once, not granted, `reason` for the whole
/// and for every claim in the order named, each with the place it had (`positions`).
#[track_caller]
fn ended(answer: &pb::AcquireManyResponse, reason: &str, resources: &[&str], positions: &[u32]) {
    assert!(!answer.granted, "{answer:?}");
    assert!(answer.leases.is_empty(), "{answer:?}");
    assert_eq!(answer.reason, reason, "{answer:?}");
    assert_eq!(
        answer
            .claims
            .iter()
            .map(|c| (c.resource.as_str(), c.reason.as_str(), c.queue_position))
            .collect::<Vec<_>>(),
        resources
            .iter()
            .zip(positions)
            .map(|(r, p)| (*r, reason, *p))
            .collect::<Vec<_>>(),
        "{answer:?}"
    );
}

/// The multi-wait of `holder` left each of `resources` in one entry, recorded as `kind`; no
/// room still counts it.
async fn left_every_room(
    client: &Client,
    watch: &mut tonic::Streaming<pb::WatchResponse>,
    kind: pb::EventType,
    holder: &str,
    resources: &[&str],
) -> u64 {
    let mut events = next_events(watch, kind, resources.len()).await;
    events.sort_by(|a, b| a.resource.cmp(&b.resource));
    let mut named: Vec<&str> = resources.to_vec();
    named.sort();
    assert_eq!(
        events
            .iter()
            .map(|e| e.resource.as_str())
            .collect::<Vec<_>>(),
        named
    );
    assert!(events.iter().all(|e| e.holder == holder), "{events:?}");
    let revision = events[0].revision;
    assert!(
        events.iter().all(|e| e.revision == revision),
        "one entry: {events:?}"
    );
    for resource in resources {
        assert_eq!(waiting_count(client, resource).await, 0, "{resource}");
    }
    revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_wait_past_its_wait_timeout_answers_with_every_claim_and_leaves_every_room() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    granted(&client, "many/c/x", "owner", Duration::from_secs(600)).await;
    let mut watch = events(&client, "many/c/").await;
    let claims = ["many/c/x", "many/c/y"];
    let answer = client
        .acquire_many(waiting_many("patient", &claims, Duration::from_secs(2)))
        .await
        .expect("answered");
    ended(&answer, "wait_timeout", &claims, &[1, 1]);
    let queued = next_events(&mut watch, pb::EventType::Queued, 2).await;
    let timed_out = left_every_room(
        &client,
        &mut watch,
        pb::EventType::WaitTimedOut,
        "patient",
        &claims,
    )
    .await;
    assert!(timed_out > queued[0].revision);
    // y was free all along and nobody holds a place before it now.
    granted(&client, "many/c/y", "later", Duration::from_secs(60)).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_wait_on_one_resource_ends_a_multi_wait_in_every_room() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    granted(&client, "many/d/x", "owner", Duration::from_secs(600)).await;
    granted(&client, "many/d/y", "owner", Duration::from_secs(600)).await;
    let mut watch = events(&client, "many/d/").await;
    let claims = ["many/d/x", "many/d/y", "many/d/z"];
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .acquire_many(waiting_many("both", &claims, Duration::from_secs(600)))
                .await
        })
    };
    next_events(&mut watch, pb::EventType::Queued, 3).await;
    let cancelled = client
        .cancel_wait(pb::CancelWaitRequest {
            resource: "many/d/y".into(),
            holder: "both".into(),
            request_id: String::new(),
            queued_revision: 0,
        })
        .await
        .expect("cancel");
    assert!(cancelled.cancelled, "{cancelled:?}");
    let answer = call.await.expect("joined").expect("answered");
    ended(&answer, "wait_cancelled", &claims, &[1, 1, 1]);
    let revision = left_every_room(
        &client,
        &mut watch,
        pb::EventType::WaitCancelled,
        "both",
        &claims,
    )
    .await;
    assert_eq!(revision, cancelled.revision);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_its_session_ends_a_multi_wait_in_every_room() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    granted(&client, "many/e/x", "owner", Duration::from_secs(600)).await;
    let session = client
        .create_session(pb::CreateSessionRequest {
            holder: "on-session".into(),
            ttl: Some(prost_duration(Duration::from_secs(600))),
            ..Default::default()
        })
        .await
        .expect("create session")
        .session
        .expect("the session");
    let mut watch = events(&client, "many/e/").await;
    let claims = ["many/e/x", "many/e/y"];
    let call = {
        let client = client.clone();
        let session_id = session.session_id.clone();
        tokio::spawn(async move {
            client
                .acquire_many(pb::AcquireManyRequest {
                    ttl: None,
                    session_id,
                    ..waiting_many("on-session", &claims, Duration::from_secs(600))
                })
                .await
        })
    };
    let queued = next_events(&mut watch, pb::EventType::Queued, 2).await;
    assert!(
        queued.iter().all(|e| e.session_id == session.session_id),
        "{queued:?}"
    );
    let closed = close_session(&client, &session.session_id).await;
    assert_eq!(closed.status, pb::SessionStatus::Closed as i32);
    let answer = call.await.expect("joined").expect("answered");
    ended(&answer, "wait_cancelled", &claims, &[1, 1]);
    left_every_room(
        &client,
        &mut watch,
        pb::EventType::WaitCancelled,
        "on-session",
        &claims,
    )
    .await;
    // y was free all along and nobody holds a place before it now.
    granted(&client, "many/e/y", "later", Duration::from_secs(60)).await;
    cluster.shutdown().await;
}
