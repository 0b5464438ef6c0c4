//! What one principal can take of a node that others need (issue 37): its share of the open
//! streams, one place for however many calls rejoin one wait, proposals refused before they
//! are replicated, and quotas for `anonymous` when auth is off. Each test is an attack of the
//! abuse harness (`tenure-jepsen abuse`) at a smaller scale, with another principal's calls
//! served beside it.

use std::collections::BTreeMap;

use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::{acquire_request, started_with};
use tonic::Code;

use super::t71_gate::{
    bearer, rss, token_file, until, waiting_acquire, watch, ALICE, BOB, PEER, TTL,
};

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

/// With auth off every caller is `anonymous`, whose calls have no principal's share: calls
/// that rejoin one wait, which take no second place among the open streams, are held between
/// them to the node's cap, not let grow without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_off_calls_that_rejoin_a_wait_are_held_to_the_nodes_cap() {
    const CAP: usize = 4;
    let flags = vec!["--max-open-streams".to_string(), CAP.to_string()];
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let node = cluster.node(1).clone();
    let leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    leases
        .clone()
        .acquire(acquire_request("t72/anon-held", "h-1", TTL))
        .await
        .expect("h-1 holds it");
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..CAP {
        let mut leases = leases.clone();
        calls.spawn(async move {
            leases
                .acquire(waiting_acquire("t72/anon-held", "h-2"))
                .await
        });
    }
    until("every call waits", || {
        node.streams_held_by("anonymous") == CAP
    })
    .await;
    assert_eq!(node.waits_open(), 1, "one wait, one place");
    let refused = leases
        .clone()
        .acquire(waiting_acquire("t72/anon-held", "h-2"))
        .await
        .expect_err("one call more than the node's cap");
    too_many_streams(refused, "--max-open-streams");
    calls.abort_all();
    while calls.join_next().await.is_some() {}
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

/// With auth off every caller is the admin `anonymous`, held to the quotas all the same: a
/// development cluster cannot be grown without limit either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_off_anonymous_is_held_to_the_quotas() {
    let (cluster, _) = tenure_tests::started(1).await;
    let client = cluster.client();
    client
        .set_quota(tenure_client::pb::SetQuotaRequest {
            principal: String::new(),
            changes: vec![tenure_client::pb::QuotaChange {
                quota: "leases".into(),
                limit: 2,
                reset: false,
            }],
            request_id: String::new(),
        })
        .await
        .expect("anonymous is an admin: it sets the defaults");
    for n in 0..2 {
        tenure_tests::granted(&client, &format!("t72/anon/{n}"), "h", TTL).await;
    }
    tenure_tests::refused(
        "a third lease",
        client
            .acquire(acquire_request("t72/anon/2", "h", TTL))
            .await,
        Code::ResourceExhausted,
        "resource_exhausted",
    );
    cluster.shutdown().await;
}

/// Only an admin hands a lease to another principal, and only to one that can use it: a client
/// cannot put leases on another principal's quota, nor give one to the nodes' principal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_transfers_a_lease_to_another_principal_that_can_hold_it() {
    use super::t71_gate::ADMIN;
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = token_file(
        dir.path(),
        &[
            (PEER, "nodes", "peer"),
            (ADMIN, "ops", "admin"),
            (ALICE, "alice", "client"),
            (BOB, "bob", "client"),
        ],
    );
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let admin = cluster.client().with_token(ADMIN).expect("token");
    tenure_tests::register(
        &admin,
        "t72/t",
        tenure_client::pb::Policy {
            transferable: true,
            ..Default::default()
        },
    )
    .await;
    let alice = cluster.client().with_token(ALICE).expect("token");
    let lease = tenure_tests::granted(&alice, "t72/t", "a", TTL).await;
    let transfer = |to_principal: &str| tenure_client::pb::TransferRequest {
        resource: lease.resource.clone(),
        lease_id: lease.lease_id.clone(),
        holder: lease.holder.clone(),
        fencing_token: lease.fencing_token,
        to_holder: "b".into(),
        to_principal: to_principal.into(),
        request_id: String::new(),
    };
    tenure_tests::refused(
        "alice hands her lease to bob",
        alice.transfer(transfer("bob")).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    tenure_tests::refused(
        "a lease for the nodes' principal",
        admin.transfer(transfer("nodes")).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    let moved = admin
        .transfer(transfer("bob"))
        .await
        .expect("an admin hands it to bob")
        .lease
        .expect("the lease");
    assert_eq!(moved.principal, "bob");
    cluster.shutdown().await;
}

/// The attack `slow-watch` at a smaller scale: one principal's watches of everything from
/// revision 0, never read. Each held a page of events read from the state and a message
/// queued (≈ 270 KiB: 1,000 of them held 270 MiB of a node until `slow_watcher` cut them);
/// now they share their principal's 4 MiB buffer, and each holds one message beyond it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_watches_hold_their_principals_buffer_not_a_page_each() {
    const WATCHES: usize = 400;
    const MIB: usize = 1 << 20;
    let flags = tenure_tests::same_flags(1, &["--slow-watcher", "60s"]);
    let cluster = tenure_tests::process::ProcessCluster::start(1, flags).expect("a node");
    cluster
        .leader(tenure_tests::ELECTION)
        .await
        .expect("a leader");
    let client = cluster.client();
    // About 3.6 MB of events to catch up on.
    for n in 0..300 {
        let mut request = acquire_request(&format!("t72/big/{n}"), "h", TTL);
        request.metadata.insert("blob".into(), "x".repeat(12_000));
        assert!(client.acquire(request).await.expect("acquire").granted);
    }
    let pid = cluster.pid(1).expect("pid");
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", cluster.addrs[&1]))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let before = rss(pid);
    let mut unread = Vec::with_capacity(WATCHES);
    for _ in 0..WATCHES {
        let mut leases = LeasesClient::new(channel.clone());
        unread.push(
            leases
                .watch(tenure_proto::v1::WatchRequest {
                    prefix: "t72/big/".into(),
                    ..Default::default()
                })
                .await
                .expect("a watch"),
        );
    }
    // Every watch has started its catch-up: what the node holds for them now stays.
    let mut most = 0;
    for _ in 0..30 {
        most = most.max(rss(pid).saturating_sub(before));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        most < 40 * MIB,
        "{WATCHES} unread watches grew the node by {} MiB",
        most / MIB
    );
    drop(unread);
}

/// The attacks `quota-flood` and `refused-flood`: acquires whose metadata the principal's
/// quota cannot take, and acquires of a resource held for a while yet, as fast as one client
/// can send them. Each was refused in apply, after it had gone through Raft onto every node's
/// log and disk; the leader now refuses them without proposing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_certainly_refused_are_refused_before_they_reach_the_log() {
    const FLOOD: usize = 60;
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = token_file(
        dir.path(),
        &[
            (PEER, "nodes", "peer"),
            (super::t71_gate::ADMIN, "ops", "admin"),
            (ALICE, "alice", "client"),
        ],
    );
    let (cluster, leader) = started_with(
        3,
        tenure_tests::ids(3)
            .into_iter()
            .map(|id| (id, flags.clone()))
            .collect(),
    )
    .await;
    let admin = cluster
        .client()
        .with_token(super::t71_gate::ADMIN)
        .expect("token");
    admin
        .set_quota(tenure_client::pb::SetQuotaRequest {
            principal: "alice".into(),
            changes: vec![tenure_client::pb::QuotaChange {
                quota: "metadata_bytes".into(),
                limit: 4096,
                reset: false,
            }],
            request_id: String::new(),
        })
        .await
        .expect("alice's metadata quota");
    // Through a follower, as a client that reaches any node would.
    let alice = cluster
        .client_of(cluster.follower_of(leader))
        .with_token(ALICE)
        .expect("token");
    let node = cluster.node(leader).clone();
    let log_index = || {
        use tenure_node::store::WatchReceiver as _;
        node.raft
            .metrics()
            .borrow_watched()
            .last_log_index
            .unwrap_or(0)
    };
    let before = log_index();
    let began = std::time::Instant::now();
    for n in 0..FLOOD {
        let mut request = acquire_request(&format!("t72/flood/{n}"), "a", TTL);
        request.metadata.insert("blob".into(), "x".repeat(16_000));
        tenure_tests::refused(
            "an acquire past the metadata quota",
            alice.acquire(request).await,
            Code::ResourceExhausted,
            "resource_exhausted",
        );
    }
    // None of them reached the log: what grew it is the leader's own `Tick`s, one each time
    // the idle cluster's newest entry was older than a quarter second (`FRESH_MS`).
    let none_proposed = |what: &str, before: u64, began: std::time::Instant, refused: u64| {
        let grown = log_index() - before;
        let ticks = began.elapsed().as_millis() as u64 / tenure_node::lease::FRESH_MS + 2;
        assert!(
            grown <= ticks,
            "{FLOOD} {what} grew the leader's log by {grown} entries (at most {ticks} ticks)"
        );
        assert_eq!(
            node.refused_before_proposing
                .load(std::sync::atomic::Ordering::Relaxed),
            refused
        );
    };
    none_proposed("acquires past the quota", before, began, FLOOD as u64);
    // Within the quota, the same principal is served.
    let mut small = acquire_request("t72/flood/small", "a", TTL);
    small.metadata.insert("k".into(), "v".into());
    assert!(alice.acquire(small).await.expect("acquire").granted);

    // Acquires of a resource held for a while yet, each with a fresh request id: refused for
    // the resource, with its holder, and none of them reached the log either (SPEC §4.21).
    let before = log_index();
    let began = std::time::Instant::now();
    for _ in 0..FLOOD {
        let mut request = acquire_request("t72/flood/small", "b", TTL);
        request.request_id = uuid_like();
        let answer = alice.acquire(request).await.expect("an answer");
        assert!(!answer.granted, "{answer:?}");
        assert_eq!(answer.reason, "resource_unavailable");
        assert_eq!(answer.holders.len(), 1, "{answer:?}");
        assert_eq!(answer.holders[0].holder, "a");
    }
    none_proposed(
        "acquires of a held resource",
        before,
        began,
        2 * FLOOD as u64,
    );

    // A retry whose first copy is still on its way to the log (counted as the leader counts
    // the copies it serves) is proposed, never refused ahead of it; apply answers it, and
    // remembers the answer for the next retry.
    let refused = || {
        node.refused_before_proposing
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let retry = || {
        let mut request = acquire_request("t72/flood/small", "b", TTL);
        request.request_id = "t72-first-copy".into();
        alice.acquire(request)
    };
    let first = node.copy_on_its_way("alice", "t72-first-copy");
    let answer = retry().await.expect("an answer");
    assert!(
        !answer.granted && answer.reason == "resource_unavailable",
        "{answer:?}"
    );
    assert_eq!(refused(), 2 * FLOOD as u64, "proposed, not refused ahead");
    drop(first);
    // Remembered: the next retry is proposed too, and gets apply's answer again.
    let again = retry().await.expect("an answer");
    assert_eq!(again.reason, "resource_unavailable");
    assert_eq!(
        refused(),
        2 * FLOOD as u64,
        "a remembered request is proposed"
    );

    // A waiting acquire of it is proposed, and queued.
    let mut wait = acquire_request("t72/flood/small", "b", TTL);
    wait.on_conflict = tenure_client::pb::OnConflict::Wait as i32;
    wait.wait_timeout = Some(tenure_client::prost_duration(
        std::time::Duration::from_secs(1),
    ));
    let before = log_index();
    let answer = alice.acquire(wait).await.expect("an answer");
    assert!(!answer.granted && log_index() > before, "{answer:?}");
    cluster.shutdown().await;
}

/// A request id no other call of the test uses.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("t72-held-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
