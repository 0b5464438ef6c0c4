//! The Rust client's `Session` handle (SPEC §4.24): one heartbeat keeps every lease taken on
//! it; when the session is lost (closed, or refused once it is gone) every lease on it reports
//! `lost()` together.

use std::time::Duration;

use tenure_client::{pb, Acquired, Lease, Lost, Session};
use tenure_tests::started;

async fn lock(session: &Session, resource: &str) -> Box<Lease> {
    match session.lock(resource).try_acquire().await.expect("acquire") {
        Acquired::Granted(lease) => lease,
        Acquired::Refused { reason, .. } => panic!("refused: {reason}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_its_leases_past_the_ttl_and_close_ends_them_together() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let ttl = Duration::from_secs(2);
    let session = client.session(ttl).await.expect("session");
    assert!(session.id().starts_with("ses_"), "{}", session.id());
    let mut leases = Vec::new();
    for k in 0..3 {
        leases.push(lock(&session, &format!("client/session/{k}")).await);
    }
    assert!(leases
        .iter()
        .all(|l| l.info().session_id == session.id() && l.ttl() == ttl));
    tokio::select! {
        lost = session.lost() => panic!("lost a renewed session: {lost:?}"),
        _ = tokio::time::sleep(ttl * 3) => {}
    }
    let read = client
        .get_session(pb::GetSessionRequest {
            session_id: session.id().into(),
            consistency: 0,
        })
        .await
        .expect("get session")
        .session
        .expect("the session");
    assert_eq!(read.lease_count, 3);
    assert!(read
        .leases
        .iter()
        .all(|l| l.status == pb::LeaseStatus::Active as i32));
    let closed = session.close().await.expect("close");
    assert_eq!(closed.status, pb::SessionStatus::Closed as i32);
    for lease in &leases {
        assert_eq!(lease.lost().await, Lost::Released);
    }
    // Free for anyone now.
    let other = client.session(ttl).await.expect("another session");
    lock(&other, "client/session/0").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lease_on_a_session_is_lost_when_the_session_is() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let session = client
        .session(Duration::from_secs(3))
        .await
        .expect("session");
    let a = lock(&session, "client/lost/a").await;
    let b = lock(&session, "client/lost/b").await;
    // An operator closes the session behind the handle's back: its next renewal is refused.
    client
        .close_session(session.id())
        .await
        .expect("close elsewhere");
    let lost = tokio::time::timeout(Duration::from_secs(10), session.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(lost, Lost::Refused("session_not_found".into()));
    assert_eq!(a.lost().await, lost);
    assert_eq!(b.lost().await, lost);
    cluster.shutdown().await;
}

/// `session.campaign(key)`: the leadership lives on the session, and when the session closes
/// the next candidate's session leads, with a higher token, admitted by the closing entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_on_a_session_leads_while_the_session_lives() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let ttl = Duration::from_secs(2);
    let first = client.session(ttl).await.expect("first session");
    let second = cluster
        .client_of(2)
        .session(ttl)
        .await
        .expect("second session");
    let leading = first
        .campaign("client/session/leader")
        .await
        .expect("first leads");
    assert_eq!(leading.candidate_id(), first.holder());
    assert_eq!(leading.lease().info().session_id, first.id());
    let next = tokio::spawn(async move {
        let leadership = second.campaign("client/session/leader").await;
        (second, leadership)
    });
    // Past the ttl, on renewals of the session alone, the first still leads.
    tokio::select! {
        lost = leading.lost() => panic!("lost a leadership on a renewed session: {lost:?}"),
        _ = tokio::time::sleep(ttl * 2) => {}
    }
    assert!(
        !next.is_finished(),
        "the second cannot lead while the first does"
    );
    let token = leading.fencing_token();
    first.close().await.expect("close");
    assert_eq!(leading.lost().await, Lost::Released);
    let (second, leadership) = next.await.expect("joined");
    let leadership = leadership.expect("the second leads");
    assert!(leadership.fencing_token() > token);
    assert_eq!(leadership.lease().info().session_id, second.id());
    cluster.shutdown().await;
}
