//! The waiting room (SPEC §4.7) over a real three-node cluster: blocked calls on any node,
//! FIFO admission in the entry that frees the resource, and removal when a call goes away.

use std::time::Duration;

use tenure_client::{pb, Client};
use tenure_tests::{get_resource, granted, next_event, release_request, started};

fn waiting(resource: &str, holder: &str, wait: Duration) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: holder.into(),
        ttl: Some(tenure_client::prost_duration(Duration::from_secs(30))),
        on_conflict: pb::OnConflict::Wait as i32,
        wait_timeout: Some(tenure_client::prost_duration(wait)),
        ..Default::default()
    }
}

/// Live events of `resource` from now on.
async fn events(client: &Client, resource: &str) -> tonic::Streaming<pb::WatchResponse> {
    client
        .watch(pb::WatchRequest {
            resource: resource.into(),
            live_only: true,
            ..Default::default()
        })
        .await
        .expect("watch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_on_every_node_are_admitted_first_in_first_out_by_each_release() {
    let (cluster, _) = started(3).await;
    let resource = "wait/fifo";
    let client = cluster.client();
    let first = granted(&client, resource, "h0", Duration::from_secs(30)).await;
    let mut watch = events(&client, resource).await;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let ids = cluster.live_ids();
    for k in 1..=20u64 {
        // Spread the blocked calls over all nodes, followers included.
        let node = cluster.client_of(ids[k as usize % ids.len()]);
        let holder = format!("h{k}");
        let done = done_tx.clone();
        let request = waiting(resource, &holder, Duration::from_secs(120));
        tokio::spawn(async move {
            let reply = node.acquire(request).await;
            let _ = done.send((k, reply));
        });
        // Queue them one by one so that FIFO order is known.
        let queued = next_event(&mut watch, pb::EventType::Queued).await;
        assert_eq!(queued.holder, holder);
    }
    let mut holding = first;
    for k in 1..=20u64 {
        let released = client
            .release(release_request(&holding))
            .await
            .expect("release");
        let (admitted, reply) = done_rx.recv().await.expect("a waiter returns");
        assert_eq!(admitted, k, "FIFO: waiter {k} first");
        let reply = reply.expect("the blocked call answers");
        assert!(reply.granted, "{reply:?}");
        let lease = reply.lease.expect("lease");
        assert_eq!(lease.holder, format!("h{k}"));
        assert!(lease.fencing_token > holding.fencing_token);
        // The release's entry admitted it: its history shows both at one revision.
        let history = client
            .history(pb::HistoryRequest {
                resource: resource.into(),
                page_size: 2,
                ..Default::default()
            })
            .await
            .expect("history");
        let newest: Vec<(u64, i32)> = history
            .entries
            .iter()
            .map(|e| (e.revision, e.event))
            .collect();
        assert_eq!(
            newest,
            vec![
                (lease.fencing_token, pb::EventType::Admitted as i32),
                (lease.fencing_token, pb::EventType::Released as i32)
            ],
            "released {released:?}"
        );
        holding = lease;
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_call_that_goes_away_is_removed_from_the_waiting_room_by_an_entry() {
    let (cluster, leader) = started(3).await;
    let resource = "wait/gone";
    let client = cluster.client();
    granted(&client, resource, "owner", Duration::from_secs(600)).await;
    let mut watch = events(&client, resource).await;
    // A follower holds the blocked call; the client goes away long before wait_timeout.
    let follower = *cluster
        .live_ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let impatient = cluster.client_of(follower);
    let call = tokio::spawn(async move {
        impatient
            .acquire(waiting(resource, "impatient", Duration::from_secs(600)))
            .await
    });
    let queued = next_event(&mut watch, pb::EventType::Queued).await;
    assert_eq!(queued.holder, "impatient");
    call.abort();
    let removed = next_event(&mut watch, pb::EventType::WaitCancelled).await;
    assert_eq!(removed.holder, "impatient");
    let view = client
        .get_resource(pb::GetResourceRequest {
            name: resource.into(),
            ..Default::default()
        })
        .await
        .expect("get");
    assert_eq!(view.resource.expect("resource").waiting, 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_timeout_and_cancel_wait_answer_the_blocked_call_with_their_reason() {
    let (cluster, _) = started(3).await;
    let resource = "wait/ends";
    let client = cluster.client();
    granted(&client, resource, "owner", Duration::from_secs(600)).await;
    let timed_out = client
        .acquire(waiting(resource, "w1", Duration::from_secs(1)))
        .await
        .expect("answered");
    assert!(!timed_out.granted);
    assert_eq!(timed_out.reason, "wait_timeout");
    assert_eq!(timed_out.queue_position, 1);

    let mut watch = events(&client, resource).await;
    let waiter = client.clone();
    let call = tokio::spawn(async move {
        waiter
            .acquire(waiting(resource, "w2", Duration::from_secs(600)))
            .await
    });
    next_event(&mut watch, pb::EventType::Queued).await;
    let cancelled = client
        .cancel_wait(pb::CancelWaitRequest {
            resource: resource.into(),
            holder: "w2".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    assert!(cancelled.cancelled);
    // The answer names the entry that removed the wait.
    let newest = client
        .history(pb::HistoryRequest {
            resource: resource.into(),
            page_size: 1,
            ..Default::default()
        })
        .await
        .expect("history")
        .entries;
    assert_eq!(
        newest
            .iter()
            .map(|e| (e.revision, e.event))
            .collect::<Vec<_>>(),
        vec![(cancelled.revision, pb::EventType::WaitCancelled as i32)]
    );
    let answer = call.await.expect("task").expect("answered");
    assert!(!answer.granted);
    assert_eq!(answer.reason, "wait_cancelled");
    cluster.shutdown().await;
}

/// `CancelWait` with `queued_revision` ends only the wait that entry queued: whoever saw an
/// older wait of the holder (a console row, a script) cannot cancel a newer one by mistake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_wait_naming_a_queued_revision_ends_only_the_wait_that_entry_queued() {
    let (cluster, _) = started(3).await;
    let resource = "wait/named";
    let client = cluster.client();
    granted(&client, resource, "owner", Duration::from_secs(600)).await;
    let mut watch = events(&client, resource).await;
    // The holder's first wait times out; its second stays queued.
    let timed_out = client
        .acquire(waiting(resource, "w", Duration::from_secs(1)))
        .await
        .expect("answered");
    assert_eq!(timed_out.reason, "wait_timeout");
    let first = next_event(&mut watch, pb::EventType::Queued).await.revision;
    let waiter = client.clone();
    let call = tokio::spawn(async move {
        waiter
            .acquire(waiting(resource, "w", Duration::from_secs(600)))
            .await
    });
    let second = next_event(&mut watch, pb::EventType::Queued).await.revision;
    assert!(second > first);
    let cancel = |queued_revision| pb::CancelWaitRequest {
        resource: resource.into(),
        holder: "w".into(),
        queued_revision,
        ..Default::default()
    };
    let stale = client.cancel_wait(cancel(first)).await.expect("cancel");
    assert!(!stale.cancelled, "the first wait had ended already");
    let room = get_resource(&client, resource).await.expect("get").waiters;
    assert_eq!(
        room.iter()
            .map(|w| (w.holder.as_str(), w.queued_revision))
            .collect::<Vec<_>>(),
        [("w", second)],
        "the second wait is still queued"
    );
    let cancelled = client.cancel_wait(cancel(second)).await.expect("cancel");
    assert!(cancelled.cancelled);
    let answer = call.await.expect("task").expect("answered");
    assert_eq!(answer.reason, "wait_cancelled");
    cluster.shutdown().await;
}
