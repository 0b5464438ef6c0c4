//! The Rust client's coordination recipes (SPEC §7) against live clusters: the blocking
//! `lock(..).wait(..)`, leader election (`campaign`, `resign`, `lost`), `observe`, and the
//! downstream `Fence` refusing a deposed leader. Every step awaits an event (a grant, a
//! watch event, a resolved future); a 60 s guard turns a hang into a failure.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use tenure_client::{pb, Acquired, Client, Fence, Leader, Leadership, Lost, Stale};
use tenure_tests::process::ProcessCluster;
use tenure_tests::{started, ELECTION};
use tokio::sync::mpsc;

const GUARD: Duration = Duration::from_secs(60);

/// `future`, or a failure naming `what` if it takes longer than the guard.
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing after {GUARD:?}"))
}

/// Resolves when `resource` has had `n` events of `kind` since its history began.
async fn events(
    client: &Client,
    resource: &str,
    kind: pb::EventType,
    n: usize,
) -> Vec<pb::HistoryEntry> {
    let mut seen = Vec::new();
    let mut messages = client.watch_resuming(pb::WatchRequest {
        resource: resource.into(),
        events: vec![kind as i32],
        ..Default::default()
    });
    while seen.len() < n {
        let message = within(&format!("{n} {kind:?} on {resource}"), messages.next())
            .await
            .expect("the watch ended")
            .expect("watch");
        seen.extend(message.events);
    }
    seen
}

/// Campaigns for `candidate` in a task; the leadership arrives on `elected`.
fn candidate(
    client: &Client,
    key: &str,
    candidate: &str,
    ttl: Duration,
    elected: &mpsc::UnboundedSender<Leadership>,
) {
    let (client, key, candidate, elected) = (
        client.clone(),
        key.to_string(),
        candidate.to_string(),
        elected.clone(),
    );
    tokio::spawn(async move {
        let leadership = client
            .campaign(&key, &candidate, ttl)
            .await
            .unwrap_or_else(|e| panic!("{candidate} campaign: {e}"));
        let _ = elected.send(leadership);
    });
}

fn leader_of(leadership: &Leadership) -> Option<Leader> {
    Some(Leader {
        holder: leadership.candidate_id().to_string(),
        fencing_token: leadership.fencing_token(),
        lease_id: leadership.lease().lease_id().to_string(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_of_three_candidates_leads_and_each_successor_has_a_higher_token() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let key = "election/scheduler";
    let mut observed = client.observe(key);
    let first = within("observe", observed.next()).await.expect("an item");
    assert_eq!(first.expect("observe"), None, "nobody leads yet");

    let (elected_tx, mut elected) = mpsc::unbounded_channel();
    for name in ["a", "b", "c"] {
        candidate(&client, key, name, Duration::from_secs(5), &elected_tx);
    }
    let leader1 = within("a first leader", elected.recv())
        .await
        .expect("leader");
    events(&client, key, pb::EventType::Queued, 2).await;
    // Everyone has answered the log: one leads, two wait, nobody else was elected.
    let resource = tenure_tests::get_resource(&client, key).await.expect("get");
    let holders: Vec<&str> = resource.leases.iter().map(|l| l.holder.as_str()).collect();
    assert_eq!(holders, [leader1.candidate_id()], "{resource:?}");
    assert_eq!(resource.waiting, 2, "{resource:?}");
    assert!(
        elected.try_recv().is_err(),
        "a second leader while the first leads"
    );

    let fence = Fence::new();
    fence
        .check_and_record(leader1.fencing_token())
        .expect("the first leader writes");
    let token1 = leader1.fencing_token();
    let name1 = leader1.candidate_id().to_string();
    let expected1 = leader_of(&leader1);

    // The leader resigns: the next candidate leads, admitted by the release entry.
    leader1.resign().await.expect("resign");
    let leader2 = within("a second leader", elected.recv())
        .await
        .expect("leader");
    assert!(
        leader2.fencing_token() > token1,
        "{} after {token1}",
        leader2.fencing_token()
    );
    fence
        .check_and_record(leader2.fencing_token())
        .expect("the second leader writes");
    assert_eq!(
        fence.check_and_record(token1),
        Err(Stale {
            highest: leader2.fencing_token(),
            got: token1
        }),
        "the fence must refuse the resigned leader"
    );

    // The second leader's lease is lost (ended behind its back): lost() fires, the third leads.
    client
        .release(pb::ReleaseRequest {
            resource: key.into(),
            lease_id: leader2.lease().lease_id().into(),
            holder: leader2.candidate_id().into(),
            fencing_token: leader2.fencing_token(),
            request_id: String::new(),
        })
        .await
        .expect("release behind the leader's back");
    let lost = within("lost()", leader2.lost()).await;
    assert_eq!(lost, Lost::Refused("lease_not_found".into()));
    let leader3 = within("a third leader", elected.recv())
        .await
        .expect("leader");
    assert!(leader3.fencing_token() > leader2.fencing_token());
    let names = [
        name1.as_str(),
        leader2.candidate_id(),
        leader3.candidate_id(),
    ];
    let mut sorted = names.to_vec();
    sorted.sort();
    assert_eq!(
        sorted,
        ["a", "b", "c"],
        "each candidate led once: {names:?}"
    );
    fence
        .check_and_record(leader3.fencing_token())
        .expect("the third leader writes");
    assert!(fence.check_and_record(leader2.fencing_token()).is_err());

    // observe saw exactly that sequence: each release and the admission it caused are one
    // entry, so no gap between leaders is reported; then nobody after the last resigns.
    let expected = vec![expected1, leader_of(&leader2), leader_of(&leader3), None];
    leader3.resign().await.expect("resign");
    let mut reported = Vec::new();
    while reported.len() < expected.len() {
        let item = within("observe", observed.next()).await.expect("an item");
        reported.push(item.expect("observe"));
    }
    assert_eq!(reported, expected);
    // A graceful shutdown waits for open streams.
    drop(observed);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_stops_renewing_is_replaced_once_its_lease_is_reclaimed() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let key = "election/frozen";
    let (elected_tx, mut elected) = mpsc::unbounded_channel();
    candidate(&client, key, "frozen", Duration::from_secs(2), &elected_tx);
    let frozen = within("the first leader", elected.recv())
        .await
        .expect("leader");
    candidate(&client, key, "next", Duration::from_secs(2), &elected_tx);
    events(&client, key, pb::EventType::Queued, 1).await;

    // A leader frozen by a pause renews nothing; it still has its token.
    let stale_token = frozen.fencing_token();
    drop(frozen);
    let next = within("the next leader", elected.recv())
        .await
        .expect("leader");
    assert_eq!(next.candidate_id(), "next");
    let reclaimed = events(&client, key, pb::EventType::Reclaimed, 1).await;
    assert_eq!(reclaimed[0].holder, "frozen");
    assert_eq!(
        next.fencing_token(),
        reclaimed[0].revision,
        "the reclaim entry admits the next leader and is its token"
    );
    let fence = Fence::new();
    fence
        .check_and_record(next.fencing_token())
        .expect("next writes");
    assert_eq!(
        fence.check_and_record(stale_token),
        Err(Stale {
            highest: next.fencing_token(),
            got: stale_token
        })
    );
    next.resign().await.expect("resign");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_wait_ends_with_wait_timeout_and_a_dropped_wait_leaves_the_queue() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let resource = "lock/busy";
    let Acquired::Granted(holder) = client
        .lock(resource, "holder")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("acquire")
    else {
        panic!("the resource is free");
    };

    let answer = client
        .lock(resource, "patient")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(1))
        .await
        .expect("wait");
    match answer {
        Acquired::Refused {
            reason,
            queue_position,
            holders,
        } => {
            assert_eq!(reason, "wait_timeout");
            assert_eq!(queue_position, 1);
            assert_eq!(holders[0].holder, "holder");
        }
        Acquired::Granted(_) => panic!("granted while held"),
    }

    // A waiter whose call goes away: its node proposes the removal.
    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock(resource, "impatient")
                .wait(Duration::from_secs(600))
                .await
        }
    });
    events(&client, resource, pb::EventType::Queued, 2).await;
    waiting.abort();
    let cancelled = events(&client, resource, pb::EventType::WaitCancelled, 1).await;
    assert_eq!(cancelled[0].holder, "impatient");

    // With the room empty again, the release frees the resource for a plain acquire.
    holder.release().await.expect("release");
    let Acquired::Granted(next) = client
        .lock(resource, "next")
        .wait(Duration::from_secs(5))
        .await
        .expect("acquire")
    else {
        panic!("the resource is free and nobody waits");
    };
    next.release().await.expect("release");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn observe_keeps_reporting_leaders_after_the_node_serving_its_watch_is_killed() {
    let mut cluster = ProcessCluster::start(3, BTreeMap::new()).expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    let client = cluster.client();
    let key = "election/failover";
    let mut observed = client.observe(key);
    assert_eq!(
        within("observe", observed.next())
            .await
            .expect("item")
            .expect("observe"),
        None
    );
    let (elected_tx, mut elected) = mpsc::unbounded_channel();
    candidate(&client, key, "a", Duration::from_secs(10), &elected_tx);
    let a = within("a leads", elected.recv()).await.expect("leader");
    assert_eq!(
        within("observe", observed.next())
            .await
            .expect("item")
            .expect("observe"),
        leader_of(&a)
    );

    // The watch follows the leader hint, so it is on the leader: kill it.
    cluster.kill9(leader).expect("kill -9");
    cluster.leader(ELECTION).await.expect("a new leader");
    candidate(&client, key, "b", Duration::from_secs(10), &elected_tx);
    events(&client, key, pb::EventType::Queued, 1).await;
    let a_token = a.fencing_token();
    a.resign().await.expect("resign");
    let b = within("b leads", elected.recv()).await.expect("leader");
    assert!(b.fencing_token() > a_token);
    assert_eq!(
        within("observe", observed.next())
            .await
            .expect("item")
            .expect("observe"),
        leader_of(&b),
        "observe resumed after the kill without losing the change"
    );
    b.resign().await.expect("resign");
}
