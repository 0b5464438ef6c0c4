//! Sessions (SPEC §4.24) through the API of a three-node cluster: leases on a session live
//! while the session is renewed (by `RenewSession` or on the `KeepAlive` stream), end together
//! in one entry when it expires or closes, each event naming the session; only the session's
//! principal or an admin may use it, within its `sessions` quota. A session takes leases only
//! for its holder and never under a lifetime cap; a holder's lease comes back only on its own
//! session; a transferred lease leaves its session.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Client};
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::{
    acquire_request, close_session, get_resource, get_session, granted, next_event, next_message,
    refused, register, secure, started, watch, ADMIN, ALICE, BOB,
};
use tonic::Code;
use tonic_types::StatusExt;

async fn create(client: &Client, holder: &str, ttl: Duration) -> pb::Session {
    client
        .create_session(pb::CreateSessionRequest {
            holder: holder.into(),
            ttl: Some(prost_duration(ttl)),
            ..Default::default()
        })
        .await
        .expect("create session")
        .session
        .expect("the session")
}

fn on_session(session: &pb::Session, resource: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: session.holder.clone(),
        session_id: session.session_id.clone(),
        ..Default::default()
    }
}

async fn hold(client: &Client, session: &pb::Session, resource: &str) -> pb::Lease {
    let reply = client
        .acquire(on_session(session, resource))
        .await
        .expect("acquire on the session");
    assert!(reply.granted, "{reply:?}");
    let lease = reply.lease.expect("the lease");
    assert_eq!(lease.session_id, session.session_id);
    lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_an_expired_session_are_reclaimed_in_one_entry_naming_it() {
    let (cluster, leader) = started(3).await;
    let client = cluster.client();
    let session = create(&client, "worker-1", Duration::from_secs(3)).await;
    assert!(session.session_id.starts_with("ses_"));
    let mut events = watch(&client, "t88/expire/", 0).await;
    for k in 0..5 {
        hold(&client, &session, &format!("t88/expire/{k}")).await;
    }
    // Renewed on the KeepAlive stream past the leases' first expiry: they live on.
    let (requests, mut answers) =
        super::t87_keep_alive::stream_on(&cluster.addrs[&leader], None).await;
    // Four renewals a second apart: the leases outlive their first expiry (3 s) by a second.
    for seq in 1..=4u64 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        answers_send(&requests, seq, &session.session_id).await;
        let answer = answers_next(&mut answers).await;
        assert_eq!(answer.seq, seq);
        let renewed = answer.session.expect("the renewed session");
        assert_eq!(renewed.lease_count, 5);
        assert_eq!(renewed.status, pb::SessionStatus::Active as i32);
    }
    let read = get_session(&client, &session.session_id).await;
    assert_eq!(read.leases.len(), 5);
    assert!(read
        .leases
        .iter()
        .all(|l| l.status == pb::LeaseStatus::Active as i32));
    // Then left to expire: all five end in one entry, each event naming the session.
    drop(requests);
    let mut revisions = Vec::new();
    while revisions.len() < 5 {
        let message = next_message(&mut events).await;
        for reclaimed in message
            .events
            .into_iter()
            .filter(|e| e.event == pb::EventType::Reclaimed as i32)
        {
            assert_eq!(reclaimed.session_id, session.session_id);
            assert_eq!(reclaimed.actor, "tenure");
            revisions.push(reclaimed.revision);
        }
    }
    revisions.dedup();
    assert_eq!(revisions.len(), 1, "one entry: {revisions:?}");
    refused(
        "renew the expired session",
        client.renew_session(&session.session_id).await,
        Code::NotFound,
        "session_not_found",
    );
    cluster.shutdown().await;
}

async fn answers_send(
    requests: &tokio::sync::mpsc::Sender<pb::KeepAliveRequest>,
    seq: u64,
    session_id: &str,
) {
    requests
        .send(pb::KeepAliveRequest {
            seq,
            renew: None,
            session_id: session_id.into(),
        })
        .await
        .expect("send");
}

async fn answers_next(
    answers: &mut tonic::Streaming<pb::KeepAliveResponse>,
) -> pb::KeepAliveResponse {
    tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .expect("an answer in time")
        .expect("the stream is open")
        .expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_releases_its_leases_and_frees_a_waiter() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let session = create(&client, "worker-2", Duration::from_secs(60)).await;
    let mut events = watch(&client, "t88/close/", 0).await;
    hold(&client, &session, "t88/close/a").await;
    hold(&client, &session, "t88/close/b").await;
    // A lease on a session is renewed with the session, never alone.
    let lease = hold(&client, &session, "t88/close/a").await;
    refused(
        "renew a lease on a session",
        client
            .renew(tenure_client::renew_request(
                &lease,
                Duration::from_secs(60),
            ))
            .await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .acquire(pb::AcquireRequest {
                    resource: "t88/close/b".into(),
                    holder: "next".into(),
                    ttl: Some(prost_duration(Duration::from_secs(60))),
                    on_conflict: pb::OnConflict::Wait as i32,
                    wait_timeout: Some(prost_duration(Duration::from_secs(60))),
                    ..Default::default()
                })
                .await
        })
    };
    // Closed once the waiter is queued.
    next_event(&mut events, pb::EventType::Queued).await;
    let closed = close_session(&client, &session.session_id).await;
    assert_eq!(closed.status, pb::SessionStatus::Closed as i32);
    assert_eq!(closed.leases.len(), 2);
    assert!(closed
        .leases
        .iter()
        .all(|l| l.status == pb::LeaseStatus::Released as i32));
    let admitted = waiter.await.expect("joined").expect("answered");
    assert!(admitted.granted, "{admitted:?}");
    let listed = client
        .list_sessions(pb::ListSessionsRequest {
            holder: "worker-2".into(),
            ..Default::default()
        })
        .await
        .expect("list sessions");
    assert!(listed.sessions.is_empty(), "{listed:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_sessions_principal_or_an_admin_may_use_it() {
    let (cluster, node) = secure(3, &[]).await;
    let alice = cluster.client_of(node).with_token(ALICE).expect("token");
    let bob = cluster.client_of(node).with_token(BOB).expect("token");
    let session = create(&alice, "alice-worker", Duration::from_secs(60)).await;
    refused(
        "bob attaches to alice's session",
        bob.acquire(on_session(&session, "t88/auth")).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    refused(
        "bob renews alice's session",
        bob.renew_session(&session.session_id).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    refused(
        "bob closes alice's session",
        bob.close_session(&session.session_id).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    hold(&alice, &session, "t88/auth").await;
    let listed = bob
        .list_sessions(pb::ListSessionsRequest {
            principal: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.sessions.len(), 1);
    assert_eq!(listed.sessions[0].lease_count, 1);
    cluster
        .client_of(node)
        .with_token(ADMIN)
        .expect("token")
        .close_session(&session.session_id)
        .await
        .expect("an admin closes it");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_takes_leases_only_for_its_holder_and_never_under_a_lifetime_cap() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let session = create(&client, "worker-3", Duration::from_secs(60)).await;
    client
        .create_resource(pb::CreateResourceRequest {
            name: "t88/capped".into(),
            policy: Some(pb::Policy {
                max_lifetime: Some(prost_duration(Duration::from_secs(3_600))),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("register");
    refused(
        "a lease on the session for another holder",
        client
            .acquire(pb::AcquireRequest {
                holder: "worker-other".into(),
                ..on_session(&session, "t88/holder")
            })
            .await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    refused(
        "a lease on the session under max_lifetime",
        client.acquire(on_session(&session, "t88/capped")).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    let read = get_session(&client, &session.session_id).await;
    assert_eq!((read.lease_count, read.leases.len()), (0, 0), "{read:?}");
    for resource in ["t88/holder", "t88/capped"] {
        let read = get_resource(&client, resource).await.expect("get");
        assert!(read.leases.is_empty(), "{resource}: {read:?}");
    }
    // The session's holder gets the uncapped one on it.
    hold(&client, &session, "t88/holder").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_lease_comes_back_only_on_the_same_session() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let first = create(&client, "worker-4", Duration::from_secs(60)).await;
    let second = create(&client, "worker-4", Duration::from_secs(60)).await;
    let lease = hold(&client, &first, "t88/again").await;
    // Asked again on its session: the same lease back.
    let again = hold(&client, &first, "t88/again").await;
    assert_eq!(
        (again.lease_id.as_str(), again.fencing_token),
        (lease.lease_id.as_str(), lease.fencing_token)
    );
    refused(
        "the holder's lease asked for on another session",
        client.acquire(on_session(&second, "t88/again")).await,
        Code::FailedPrecondition,
        "already_held",
    );
    refused(
        "the holder's lease asked for with no session",
        client
            .acquire(acquire_request(
                "t88/again",
                "worker-4",
                Duration::from_secs(60),
            ))
            .await,
        Code::FailedPrecondition,
        "already_held",
    );
    // And a lease of its own does not come back on a session.
    let own = granted(&client, "t88/own", "worker-4", Duration::from_secs(60)).await;
    assert!(own.session_id.is_empty());
    refused(
        "the holder's own lease asked for on a session",
        client.acquire(on_session(&first, "t88/own")).await,
        Code::FailedPrecondition,
        "already_held",
    );
    let read = get_resource(&client, "t88/again").await.expect("get");
    assert_eq!(read.leases.len(), 1, "{read:?}");
    assert_eq!(read.leases[0].session_id, first.session_id);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transferred_lease_leaves_its_session_and_keeps_its_expiry() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    register(
        &client,
        "t88/handover",
        pb::Policy {
            transferable: true,
            ..Default::default()
        },
    )
    .await;
    let session = create(&client, "worker-5", Duration::from_secs(60)).await;
    let lease = hold(&client, &session, "t88/handover").await;
    hold(&client, &session, "t88/stays").await;
    // A second between the session's expiry stamp and the transfer: an expiry the transfer
    // set afresh, or one that went on following the session's renewals, would be that much
    // later. (`expires_at` is a wall-clock estimate, §5.3: compared to within 250 ms.)
    tokio::time::sleep(Duration::from_secs(1)).await;
    let moved = client
        .transfer(pb::TransferRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder: lease.holder.clone(),
            fencing_token: lease.fencing_token,
            to_holder: "next".into(),
            ..Default::default()
        })
        .await
        .expect("transfer")
        .lease
        .expect("the new lease");
    assert!(moved.session_id.is_empty(), "{moved:?}");
    assert_eq!(moved.ttl, lease.ttl, "the ttl the session gave it");
    assert_near("the transferred lease's expiry", &moved, &lease);
    let read = get_session(&client, &session.session_id).await;
    assert_eq!(read.lease_count, 1, "{read:?}");
    assert_eq!(resources(&read.leases), ["t88/stays"]);
    // Neither the session's renewal nor its close touches the transferred lease.
    let renewed = client
        .renew_session(&session.session_id)
        .await
        .expect("renew the session")
        .session
        .expect("the session");
    assert!(
        wall_ms(&renewed.expires_at) >= wall_ms(&lease.expires_at) + 900,
        "{renewed:?}"
    );
    let closed = close_session(&client, &session.session_id).await;
    assert_eq!(resources(&closed.leases), ["t88/stays"], "{closed:?}");
    let held = get_resource(&client, "t88/handover")
        .await
        .expect("get")
        .leases;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(
        (held[0].lease_id.as_str(), held[0].holder.as_str()),
        (moved.lease_id.as_str(), "next")
    );
    assert_eq!(held[0].status, pb::LeaseStatus::Active as i32);
    assert_near("the transferred lease after the close", &held[0], &lease);
    cluster.shutdown().await;
}

fn resources(leases: &[pb::Lease]) -> Vec<&str> {
    leases.iter().map(|l| l.resource.as_str()).collect()
}

fn wall_ms(at: &Option<prost_types::Timestamp>) -> i64 {
    let at = at.as_ref().expect("an expiry");
    at.seconds * 1_000 + i64::from(at.nanos) / 1_000_000
}

/// `lease` expires when `expected` does, to within 250 ms of wall-clock estimate.
#[track_caller]
fn assert_near(what: &str, lease: &pb::Lease, expected: &pb::Lease) {
    let (got, want) = (wall_ms(&lease.expires_at), wall_ms(&expected.expires_at));
    assert!(
        (got - want).abs() <= 250,
        "{what}: expires at {got} ms, not {want} ms: {lease:?}"
    );
}

/// `CreateSession` as the holder of `token` on `addr`, through a raw client so that the
/// refusal's `ErrorInfo` can be read.
async fn create_raw(
    addr: &str,
    token: &str,
    holder: &str,
) -> Result<pb::SessionResponse, tonic::Status> {
    let mut request = tonic::Request::new(pb::CreateSessionRequest {
        holder: holder.into(),
        ttl: Some(prost_duration(Duration::from_secs(60))),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ascii"),
    );
    LeasesClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
        .create_session(request)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_past_its_sessions_quota_gets_no_session_until_one_ends() {
    let (cluster, node) = secure(3, &[]).await;
    let addr = &cluster.addrs[&node];
    let alice = cluster.client_of(node).with_token(ALICE).expect("token");
    cluster
        .client_of(node)
        .with_token(ADMIN)
        .expect("token")
        .set_quota(pb::SetQuotaRequest {
            principal: "alice".into(),
            changes: vec![pb::QuotaChange {
                quota: "sessions".into(),
                limit: 2,
                reset: false,
            }],
            request_id: String::new(),
        })
        .await
        .expect("set the quota");
    let first = create(&alice, "alice-1", Duration::from_secs(60)).await;
    create(&alice, "alice-2", Duration::from_secs(60)).await;
    let status = create_raw(addr, ALICE, "alice-3")
        .await
        .expect_err("a third session");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "resource_exhausted");
    assert_eq!(
        (
            info.metadata.get("quota").map(String::as_str),
            info.metadata.get("limit").map(String::as_str)
        ),
        (Some("sessions"), Some("2")),
        "{status:?}"
    );
    let listed = alice
        .list_sessions(pb::ListSessionsRequest {
            principal: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.sessions.len(), 2, "nothing was made: {listed:?}");
    // Bob's quota is his own; and once one of alice's ends she has room again.
    create_raw(addr, BOB, "bob-1").await.expect("bob's session");
    alice.close_session(&first.session_id).await.expect("close");
    create(&alice, "alice-3", Duration::from_secs(60)).await;
    cluster.shutdown().await;
}
