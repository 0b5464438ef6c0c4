//! What one principal can take of a node that others need (issue 37): its share of the open
//! streams, one place for however many calls rejoin one wait, proposals refused before they
//! are replicated, and quotas for `anonymous` when auth is off. Each test is an attack of the
//! abuse harness (`tenure-jepsen abuse`) at a smaller scale, with another principal's calls
//! served beside it.

use std::collections::BTreeMap;

use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::{acquire_request, started_with};
use tonic::Code;

use super::t71_gate::{bearer, token_file, until, waiting_acquire, watch, ALICE, BOB, PEER, TTL};

/// One node with auth on (`ALICE` is alice, `BOB` is mallory, both clients) and `more` flags,
/// and a client of it.
async fn node_with(
    dir: &std::path::Path,
    more: &[&str],
) -> (
    tenure_tests::in_process::InProcessCluster,
    LeasesClient<tonic::transport::Channel>,
) {
    let mut flags = token_file(
        dir,
        &[
            (PEER, "nodes", "peer"),
            (ALICE, "alice", "client"),
            (BOB, "mallory", "client"),
        ],
    );
    flags.extend(more.iter().map(|f| f.to_string()));
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    (cluster, leases)
}

#[track_caller]
fn too_many_streams(refused: tonic::Status, flag: &str) {
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let reason = refused.metadata().get("tenure-reason").expect("a reason");
    assert_eq!(reason, "too_many_streams", "{refused:?}");
    assert!(refused.message().contains(flag), "{refused:?}");
}

/// The attack `rejoin` of `tenure-jepsen abuse`: the same WAIT acquire again and again. Each
/// call rejoins the one wait (the `waiters` quota does not move), and before, each took one of
/// the node's open-stream places until other principals' Watch calls were refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_rejoin_one_wait_hold_one_place_among_the_open_streams() {
    const CALLS: usize = 24;
    let dir = tempfile::tempdir().expect("temp dir");
    let (cluster, leases) = node_with(dir.path(), &["--max-open-streams", "4"]).await;
    let node = cluster.node(1).clone();
    leases
        .clone()
        .acquire(bearer(acquire_request("t72/held", "m-1", TTL), BOB))
        .await
        .expect("mallory holds t72/held");
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..CALLS {
        let mut leases = leases.clone();
        calls.spawn(async move {
            leases
                .acquire(bearer(waiting_acquire("t72/held", "m-2"), BOB))
                .await
        });
    }
    until("every call waits", || {
        node.streams_held_by("mallory") == CALLS
    })
    .await;
    assert_eq!(node.waits_open(), 1, "one wait, one place");
    assert_eq!(node.streams.open(), 1);
    until("the wait is queued", || node.sm.read().state.waiters() == 1).await;
    // Alice's streams are served beside them.
    let _alice = leases
        .clone()
        .watch(bearer(watch("t72/alice"), ALICE))
        .await
        .expect("alice's watch");
    calls.abort_all();
    while calls.join_next().await.is_some() {}
    until("the wait's place is freed when its calls are gone", || {
        node.waits_open() == 0
    })
    .await;
    cluster.shutdown().await;
}

/// One principal's streams stop at its share (`--max-open-streams-per-principal`), well below
/// the node's cap, and another principal's are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_past_its_share_of_the_open_streams_is_refused_while_another_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cluster, leases) = node_with(
        dir.path(),
        &[
            "--max-open-streams",
            "8",
            "--max-open-streams-per-principal",
            "3",
        ],
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            leases
                .clone()
                .watch(bearer(watch("t72/w"), BOB))
                .await
                .expect("within mallory's share"),
        );
    }
    let refused = leases
        .clone()
        .watch(bearer(watch("t72/w"), BOB))
        .await
        .expect_err("mallory's fourth stream");
    too_many_streams(refused, "--max-open-streams-per-principal");
    // Every kind of stream counts: a WAIT acquire too.
    leases
        .clone()
        .acquire(bearer(acquire_request("t72/h", "a-1", TTL), ALICE))
        .await
        .expect("alice holds t72/h");
    let refused = leases
        .clone()
        .acquire(bearer(waiting_acquire("t72/h", "m-3"), BOB))
        .await
        .expect_err("mallory's waiting acquire");
    too_many_streams(refused, "--max-open-streams-per-principal");
    let _alice = leases
        .clone()
        .watch(bearer(watch("t72/w"), ALICE))
        .await
        .expect("alice is served");
    drop(held.pop());
    let node = cluster.node(1).clone();
    until("mallory's closed watch frees its share", || {
        node.streams_held_by("mallory") < 3
    })
    .await;
    leases
        .clone()
        .watch(bearer(watch("t72/w"), BOB))
        .await
        .expect("a place again");
    cluster.shutdown().await;
}
