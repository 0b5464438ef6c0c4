//! Sessions (SPEC §4.24) through the API of a three-node cluster: leases on a session live
//! while the session is renewed (by `RenewSession` or on the `KeepAlive` stream), end together
//! in one entry when it expires or closes, each event naming the session; only the session's
//! principal or an admin may use it.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Client};
use tenure_tests::{next_event, next_message, refused, secure, started, watch, ADMIN, ALICE, BOB};
use tonic::Code;

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
    let read = client
        .get_session(pb::GetSessionRequest {
            session_id: session.session_id.clone(),
            consistency: 0,
        })
        .await
        .expect("get session")
        .session
        .expect("the session");
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
    let closed = client
        .close_session(&session.session_id)
        .await
        .expect("close")
        .session
        .expect("the session");
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
