//! Watch (SPEC §4.12) over a real cluster: history then live, in revision order, resuming
//! exactly after a revision, on any node, across the loss of the node it watched.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_client::{pb, Client};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{granted, release_request};

const ELECTION: Duration = Duration::from_secs(15);

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
        let message = stream
            .message()
            .await
            .expect("a watch message")
            .expect("the watch stays open");
        seen.extend(message.events.iter().map(key));
        if message.revision >= through {
            return seen;
        }
    }
}

async fn watch(
    client: &Client,
    prefix: &str,
    start_revision: u64,
) -> tonic::Streaming<pb::WatchResponse> {
    client
        .watch(pb::WatchRequest {
            prefix: prefix.into(),
            start_revision,
            ..Default::default()
        })
        .await
        .expect("watch")
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
    let mut cluster = InProcessCluster::start(3, BTreeMap::new())
        .await
        .expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
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
    let cluster = InProcessCluster::start(1, BTreeMap::new())
        .await
        .expect("cluster");
    cluster.leader(ELECTION).await.expect("leader");
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
    assert_eq!(refused.reason(), "invalid_argument", "{refused:?}");
    cluster.shutdown().await;
}
