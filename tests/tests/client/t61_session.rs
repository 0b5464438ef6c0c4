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

/// Reads `events` until a `wait_cancelled` of `holder`; panics if none comes within `within`.
async fn wait_cancelled(
    events: &mut tonic::Streaming<pb::WatchResponse>,
    holder: &str,
    within: Duration,
) {
    tokio::time::timeout(within, async {
        loop {
            let message = tenure_tests::next_message(events).await;
            if message
                .events
                .iter()
                .any(|e| e.event == pb::EventType::WaitCancelled as i32 && e.holder == holder)
            {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{holder}'s wait was not cancelled within {within:?}"));
}

/// A WAIT acquire of `resource` on `session` through `client`, in a task of its own.
fn wait_on(
    client: &tenure_client::Client,
    session: &Session,
    resource: &str,
) -> tokio::task::JoinHandle<Result<pb::AcquireResponse, tenure_client::Error>> {
    let client = client.clone();
    let request = pb::AcquireRequest {
        resource: resource.into(),
        holder: session.holder().into(),
        session_id: session.id().into(),
        on_conflict: pb::OnConflict::Wait as i32,
        wait_timeout: Some(tenure_client::prost_duration(Duration::from_secs(120))),
        ..Default::default()
    };
    tokio::spawn(async move { client.acquire(request).await })
}

/// `Session::cancel_wait` (what a campaign lost with its session calls for the wait it leaves
/// behind): it cancels the session's own wait, found by the revision that queued it, and never
/// a newer wait of the same holder on another session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cancels_its_own_wait_and_never_a_newer_one_of_its_holder() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let key = "client/session/cancel";
    tenure_tests::granted(&client, key, "incumbent", Duration::from_secs(120)).await;
    let mut events = tenure_tests::watch(&client, key, 0).await;
    let first = client
        .session_for("candidate", Duration::from_secs(30))
        .await
        .expect("first session");
    let waiting = wait_on(&client, &first, key);
    tenure_tests::next_event(&mut events, pb::EventType::Queued).await;
    assert!(first.cancel_wait(key).await.expect("cancel"), "its wait");
    let answer = waiting.await.expect("joined").expect("answered");
    assert_eq!(answer.reason, "wait_cancelled");
    wait_cancelled(&mut events, "candidate", Duration::from_secs(10)).await;
    // The same holder waits again, on another session: the first one's cancel leaves it.
    let second = client
        .session_for("candidate", Duration::from_secs(30))
        .await
        .expect("second session");
    let newer = wait_on(&client, &second, key);
    tenure_tests::next_event(&mut events, pb::EventType::Queued).await;
    assert!(
        !first.cancel_wait(key).await.expect("cancel"),
        "no wait of its own"
    );
    assert!(!newer.is_finished(), "the newer wait goes on");
    let resource = tenure_tests::get_resource(&client, key)
        .await
        .expect("read");
    assert_eq!(resource.waiters.len(), 1);
    assert!(
        second.cancel_wait(key).await.expect("cancel"),
        "the newer one's own"
    );
    assert_eq!(
        newer.await.expect("joined").expect("answered").reason,
        "wait_cancelled"
    );
    cluster.shutdown().await;
}

/// `Session::close` marks its leases lost before it sends the close, not once the answer is
/// back: a close held up by a node that does not answer leaves no lease believed held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_session_has_lost_its_leases_before_the_close_is_answered() {
    use tenure_tests::process::ProcessCluster;
    let cluster = ProcessCluster::start(3, Default::default()).expect("cluster");
    let leader = cluster
        .leader(tenure_tests::ELECTION)
        .await
        .expect("leader");
    let paused = *cluster
        .addrs
        .keys()
        .find(|id| **id != leader)
        .expect("a follower");
    let client = tenure_client::Client::new([&cluster.addrs[&paused]]).expect("endpoint");
    let session = client
        .session(Duration::from_secs(5))
        .await
        .expect("session");
    let lease = lock(&session, "client/closing").await;
    cluster.set_stopped(paused, true).expect("SIGSTOP");
    let closing = tokio::spawn(session.close());
    let lost = tokio::time::timeout(Duration::from_secs(2), lease.lost())
        .await
        .expect("lost while the close is still unanswered");
    assert_eq!(lost, Lost::Released);
    assert!(!closing.is_finished(), "the close cannot be answered yet");
    cluster.set_stopped(paused, false).expect("SIGCONT");
    let _ = closing.await;
}

/// A node taken out of the cluster answers the renewals on its KeepAlive stream `unavailable`
/// (a leader that removed itself knows it is out); after a few in a row the client opens its
/// stream at the next endpoint, and the leases it renews there (each with a ttl of its own,
/// and one on a session) are not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_stream_on_a_removed_node_moves_to_the_next_endpoint() {
    let (cluster, removed) = started(3).await;
    let mut endpoints = vec![cluster.addrs[&removed].clone()];
    endpoints.extend(
        cluster
            .addrs
            .iter()
            .filter(|(id, _)| **id != removed)
            .map(|(_, addr)| addr.clone()),
    );
    let client = tenure_client::Client::new(&endpoints).expect("endpoints");
    let ttl = Duration::from_secs(2);
    let own = match client
        .lock("client/rotate/own", "rotating")
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("acquire")
    {
        Acquired::Granted(lease) => lease,
        Acquired::Refused { reason, .. } => panic!("refused: {reason}"),
    };
    let session = client.session(ttl).await.expect("session");
    let on_session = lock(&session, "client/rotate/session").await;
    cluster
        .client()
        .change_membership(vec![], vec![removed])
        .await
        .expect("remove the node");
    tokio::select! {
        lost = own.lost() => panic!("a lease renewed elsewhere was lost: {lost:?}"),
        lost = session.lost() => panic!("a session renewed elsewhere was lost: {lost:?}"),
        _ = tokio::time::sleep(ttl * 5) => {}
    }
    let read = tenure_tests::get_session(&client, session.id()).await;
    assert_eq!(read.status, pb::SessionStatus::Active as i32);
    drop((own, on_session));
    cluster.shutdown().await;
}
