//! Watch (SPEC §4.12) over a real cluster: history then live, in revision order, resuming
//! exactly after a revision, on any node, across the loss of the node it watched.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_client::{pb, Client};
use tenure_tests::{
    granted, next_message, release_request, started, started_with, watch, ELECTION,
};

/// Acquires and releases `resource` as `holder`: two events.
async fn cycle(client: &Client, resource: &str, holder: &str) {
    let lease = granted(client, resource, holder, Duration::from_secs(60)).await;
    client
        .release(release_request(&lease))
        .await
        .expect("release");
}

/// Every event of `resources` in delivery order (revision, resource, seq), from History.
async fn committed(client: &Client, resources: &[&str]) -> Vec<(u64, String, u32, i32)> {
    let mut all = Vec::new();
    for r in resources {
        let mut page_token = String::new();
        loop {
            let page = client
                .history(pb::HistoryRequest {
                    resource: r.to_string(),
                    page_size: 1000,
                    page_token: page_token.clone(),
                    order: pb::Order::Asc as i32,
                    ..Default::default()
                })
                .await
                .expect("history");
            all.extend(page.entries.iter().map(key));
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
    }
    all.sort();
    all
}

fn key(e: &pb::HistoryEntry) -> (u64, String, u32, i32) {
    (e.revision, e.resource.clone(), e.seq, e.event)
}

/// Reads the stream until it has covered `through` (a revision), returning its events.
async fn until(
    stream: &mut tonic::Streaming<pb::WatchResponse>,
    through: u64,
) -> Vec<(u64, String, u32, i32)> {
    let mut seen = Vec::new();
    loop {
        let message = next_message(stream).await;
        seen.extend(message.events.iter().map(key));
        if message.revision >= through {
            return seen;
        }
    }
}

async fn applied(client: &Client) -> u64 {
    client
        .get_resource(pb::GetResourceRequest {
            name: "any".into(),
            ..Default::default()
        })
        .await
        .expect("read")
        .read_revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_delivers_every_event_once_in_order_and_resumes_exactly_after_a_revision() {
    let (mut cluster, leader) = started(3).await;
    let client = cluster.client();
    for k in 0..5 {
        cycle(&client, "w/a", &format!("h{k}")).await;
        cycle(&client, "w/b", &format!("h{k}")).await;
        cycle(&client, "x/outside", "h").await;
    }
    let resources = ["w/a", "w/b"];
    let history = committed(&client, &resources).await;
    assert_eq!(history.len(), 20);

    // From the start: retained history, in order, nothing outside the prefix.
    let follower = *cluster
        .live_ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let on_follower = cluster.client_of(follower);
    let through = applied(&client).await;
    let mut stream = watch(&on_follower, "w/", 0).await;
    let seen = until(&mut stream, through).await;
    assert_eq!(seen, history);

    // Resume after a revision in the middle: exactly what follows it.
    let middle = history[9].0;
    let mut resumed = watch(&client, "w/", middle).await;
    let rest = until(&mut resumed, through).await;
    let expected: Vec<_> = history.iter().filter(|e| e.0 > middle).cloned().collect();
    assert_eq!(rest, expected);

    // Live: new events arrive on the open stream.
    cycle(&client, "w/a", "live").await;
    let through = applied(&client).await;
    let live = until(&mut stream, through).await;
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|e| e.1 == "w/a" && e.0 > history[19].0));

    // The watched node goes away; the watcher resumes on another node from its last revision.
    let last = live.last().map(|e| e.0).expect("events");
    cluster.kill(follower).await;
    // Its stream ends (an error or the end), with nothing new before that.
    while let Ok(Some(message)) = stream.message().await {
        assert!(message.events.is_empty(), "{message:?}");
    }
    cycle(&client, "w/b", "after").await;
    let through = applied(&client).await;
    let mut elsewhere = watch(&client, "w/", last).await;
    let after = until(&mut elsewhere, through).await;
    let all = committed(&client, &resources).await;
    let expected: Vec<_> = all.iter().filter(|e| e.0 > last).cloned().collect();
    assert_eq!(after, expected);
    assert_eq!(after.len(), 2);
    drop((stream, resumed, elsewhere));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_names_either_a_resource_or_a_prefix() {
    let (cluster, _) = started(1).await;
    let client = cluster.client();
    let both = client
        .watch(pb::WatchRequest {
            resource: "a".into(),
            prefix: "b".into(),
            ..Default::default()
        })
        .await;
    let refused = match both {
        Err(e) => e,
        Ok(mut stream) => stream
            .message()
            .await
            .map(|_| ())
            .map_err(tenure_client::Error::from)
            .expect_err("refused"),
    };
    assert_eq!(
        refused.reason(),
        Some(tenure_client::Reason::InvalidArgument),
        "{refused:?}"
    );
    cluster.shutdown().await;
}

/// `count` leases on `watch-big/N`, each with about 12 KB of metadata: as many large events.
async fn large_events(client: &Client, count: usize) {
    for n in 0..count {
        let mut request =
            tenure_tests::acquire_request(&format!("watch-big/{n}"), "h", Duration::from_secs(600));
        request.metadata.insert("blob".into(), "x".repeat(12_000));
        let response = client.acquire(request).await.expect("acquire");
        assert!(response.granted, "{response:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_events_come_in_bounded_messages_that_never_claim_a_revision_early() {
    let (cluster, _) = started(1).await;
    let client = cluster.client();
    large_events(&client, 40).await;
    let mut stream = client
        .watch(pb::WatchRequest {
            prefix: "watch-big/".into(),
            ..Default::default()
        })
        .await
        .expect("watch");
    let mut seen = 0;
    let mut claimed = 0;
    while seen < 40 {
        let message = stream.message().await.expect("a message").expect("open");
        let bytes = prost::Message::encoded_len(&message);
        // One revision's events may pass the bound only when they are alone.
        let revisions: std::collections::BTreeSet<u64> =
            message.events.iter().map(|e| e.revision).collect();
        assert!(
            bytes <= 16 * 1024 || revisions.len() == 1,
            "a message of {bytes} bytes with {} events",
            message.events.len()
        );
        for event in &message.events {
            assert!(
                event.revision > claimed,
                "event at {} after a message claimed every event up to {claimed}",
                event.revision
            );
            assert!(
                event.revision <= message.revision,
                "a message claims its own events"
            );
        }
        seen += message.events.len();
        claimed = claimed.max(message.revision);
    }
    assert_eq!(seen, 40);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_reads_nothing_is_cut_off_and_told_where_to_resume() {
    let flags = vec!["--slow-watcher".to_string(), "1s".to_string()];
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    large_events(&cluster.client(), 40).await;
    // A client whose windows hold less than the history: the node's sends block.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addrs[&1]))
        .expect("endpoint")
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect()
        .await
        .expect("connect");
    let mut leases = tenure_proto::v1::leases_client::LeasesClient::new(channel);
    let mut stream = leases
        .watch(pb::WatchRequest {
            prefix: "watch-big/".into(),
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let node = cluster.node(1).clone();
    tokio::time::timeout(ELECTION, async {
        while node.streams.open() > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the node cuts the watcher off and frees its place");
    // What was queued comes first, then the reason with the revision to resume from.
    let mut events = 0;
    let status = loop {
        match stream.message().await {
            Ok(Some(message)) => events += message.events.len(),
            Ok(None) => panic!("the stream ended without a reason"),
            Err(status) => break status,
        }
    };
    assert!(
        events < 40,
        "{events} events reached a watcher that read nothing"
    );
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let reason = status.metadata().get("tenure-reason").expect("a reason");
    assert_eq!(reason, "slow_watcher");
    assert!(status.message().contains("start_revision"), "{status:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resuming_watch_cut_off_for_reading_slowly_resumes_without_a_gap() {
    let flags = vec!["--slow-watcher".to_string(), "1s".to_string()];
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    // More than the client's windows hold: a reader that stops makes the node wait.
    const COUNT: usize = 600;
    large_events(&cluster.client(), COUNT).await;
    let mut messages = cluster.client().watch_resuming(pb::WatchRequest {
        prefix: "watch-big/".into(),
        ..Default::default()
    });
    use futures::StreamExt;
    let first = messages.next().await.expect("a message").expect("ok");
    // The watch holds a place among the node's open streams until the node cuts it off.
    let node = cluster.node(1).clone();
    assert_eq!(node.streams.open(), 1);
    tokio::time::timeout(ELECTION, async {
        while node.streams.open() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the node cuts the reader off while it does not read");
    let mut revisions: Vec<u64> = first.events.iter().map(|e| e.revision).collect();
    while revisions.len() < COUNT {
        let message = messages.next().await.expect("a message").expect("no error");
        revisions.extend(message.events.iter().map(|e| e.revision));
    }
    let mut unique = revisions.clone();
    unique.dedup();
    assert_eq!(unique, revisions, "no event twice");
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "in order, no gap"
    );
    assert_eq!(revisions.len(), COUNT);
    cluster.shutdown().await;
}
