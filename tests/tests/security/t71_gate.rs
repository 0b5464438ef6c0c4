//! Secure by default: a node refuses to serve a network address open; the caller is known from
//! the headers before the body is read; a client's token never reaches the internal service;
//! and the node-wide caps on calls in flight and streams open refuse with a reason while other
//! clients go on.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use tenure_node::store::WatchReceiver as _;
use tenure_proto::raft::v1::raft_client::RaftClient;
use tenure_proto::raft::v1::RaftBytes;
use tenure_proto::v1 as pb;
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::process::{tenured_bin, ProcessCluster};
use tenure_tests::{acquire_request, granted, started, started_with, write_secret, ELECTION};
use tonic::transport::Channel;
use tonic::Code;

pub(crate) const TTL: Duration = Duration::from_secs(60);
pub(crate) const ADMIN: &str = "t71-admin-token-0123456789abcdef0123";
pub(crate) const PEER: &str = "t71-peer-token-0123456789abcdef01234";
pub(crate) const ALICE: &str = "t71-alice-token-0123456789abcdef012";
pub(crate) const BOB: &str = "t71-bob-token-0123456789abcdef012345";
const MIB: usize = 1024 * 1024;

/// Every node's flags for a token file under `dir`: `ADMIN` (admin) and `PEER`.
pub(crate) fn auth_flags(dir: &std::path::Path) -> Vec<String> {
    token_file(dir, &[(ADMIN, "ops", "admin"), (PEER, "nodes", "peer")])
}

pub(crate) fn bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value = format!("Bearer {token}").parse().expect("ascii");
    request.metadata_mut().insert("authorization", value);
    request
}

/// One node started with `flags`, once it leads, and a channel to it.
async fn one_node(flags: Vec<String>) -> (InProcessCluster, Channel) {
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let channel = Channel::from_shared(format!("http://{}", cluster.addrs[&1]))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    (cluster, channel)
}

/// Writes a token file of `lines` (`TOKEN PRINCIPAL ROLE`) under `dir`; the flags naming it.
pub(crate) fn token_file(dir: &std::path::Path, lines: &[(&str, &str, &str)]) -> Vec<String> {
    let path = dir.join("tokens");
    let text: String = lines
        .iter()
        .map(|(token, principal, role)| format!("{token} {principal} {role}\n"))
        .collect();
    write_secret(&path, &text);
    vec!["--token-file".into(), path.display().to_string()]
}

/// `tenured` with `args` (and a data dir of its own): its exit status and what it said.
fn tenured(args: &[&str]) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = Command::new(tenured_bin())
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("TENURED_INSECURE")
        .env_remove("TENURED_TOKEN_FILE")
        .output()
        .expect("run tenured");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_node_refuses_to_start_open_on_a_network_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("0.0.0.0:{port}");
    let (status, said) = tenured(&[
        "--id",
        "1",
        "--listen",
        &listen,
        "--peers",
        "1=10.0.0.1:7101",
    ]);
    assert!(!status.success(), "started open: {said}");
    assert!(said.contains("without auth"), "{said}");
    assert!(said.contains("--token-file"), "names the fix: {said}");
    assert!(said.contains("--insecure"), "names the way out: {said}");
    // It never listened.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());

    // Auth on, TLS off, a peer on the network: the peer token would travel in clear.
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = auth_flags(dir.path());
    let mut args = vec![
        "--id",
        "1",
        "--listen",
        &listen,
        "--peers",
        "1=10.0.0.1:7101,2=10.0.0.2:7101",
    ];
    args.extend(flags.iter().map(String::as_str));
    let (status, said) = tenured(&args);
    assert!(!status.success(), "started with tokens in clear: {said}");
    assert!(said.contains("in clear"), "{said}");
    assert!(said.contains("--tls-cert"), "names the fix: {said}");
    assert!(
        said.contains("--insecure-transport"),
        "names the way out: {said}"
    );
}

/// The resident set of process `pid`, in bytes.
pub(crate) fn rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_service_refuses_an_unauthenticated_200_mib_body_without_reading_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster =
        ProcessCluster::start(1, BTreeMap::from([(1, auth_flags(dir.path()))])).expect("a node");
    let pid = cluster.pid(1).expect("pid");
    let endpoint = Channel::from_shared(format!("http://{}", cluster.addrs[&1])).expect("endpoint");
    let channel = tokio::time::timeout(ELECTION, async {
        loop {
            match endpoint.connect().await {
                Ok(channel) => break channel,
                // Not listening yet.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("the node listens");
    let mut raft = RaftClient::new(channel).max_encoding_message_size(usize::MAX);
    // One small call first, so that the connection and its buffers exist before measuring.
    let status = raft
        .append_entries(RaftBytes { data: vec![0; 16] })
        .await
        .expect_err("no token");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    let before = rss(pid);
    let status = raft
        .append_entries(RaftBytes {
            data: vec![7; 200 * MIB],
        })
        .await
        .expect_err("no token");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let grown = rss(pid).saturating_sub(before);
    assert!(
        grown < 8 * MIB,
        "the node's RSS grew by {} MiB: it read the body",
        grown / MIB
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_token_on_the_raft_service_is_permission_denied() {
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = auth_flags(dir.path());
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let addr = &cluster.addrs[&1];
    let mut raft = RaftClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let status = raft
        .vote(bearer(RaftBytes { data: vec![] }, ADMIN))
        .await
        .expect_err("an admin's token");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("peer token"), "{status:?}");
    // The peer token passes the gate and reaches the decoder, which refuses an empty body.
    let status = raft
        .vote(bearer(RaftBytes { data: vec![] }, PEER))
        .await
        .expect_err("an empty body");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // Only an authenticated caller learns the leader.
    let mut leases = LeasesClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let refused = leases
        .acquire(acquire_request("t71/a", "h", TTL))
        .await
        .expect_err("no token");
    assert!(refused.metadata().get("tenure-leader").is_none());
    let served = leases
        .acquire(bearer(acquire_request("t71/a", "h", TTL), ADMIN))
        .await
        .expect("the admin acquires");
    assert!(served.metadata().get("tenure-leader").is_some());
    // Each refusal is counted by its cause; the bad body is not a refusal.
    let metrics = tenure_node::metrics::render(&tenure_node::metrics::registry(cluster.node(1)));
    for counted in [
        r#"tenure_refusals_total{cause="permission"} 1"#,
        r#"tenure_refusals_total{cause="unauthenticated"} 1"#,
    ] {
        assert!(metrics.contains(counted), "{counted} in:\n{metrics}");
    }
    assert!(!metrics.contains(r#"cause="limit""#), "{metrics}");
    cluster.shutdown().await;
}

/// Waits (yielding to the node's tasks) until `done` holds; fails the test after `ELECTION`.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(ELECTION, async {
        while !done() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not within {ELECTION:?}: {what}"));
}

/// An acquire of `resource` for `holder` that waits up to a minute in the waiting room.
pub(crate) fn waiting_acquire(resource: &str, holder: &str) -> pb::AcquireRequest {
    let mut request = acquire_request(resource, holder, TTL);
    request.on_conflict = pb::OnConflict::Wait as i32;
    request.wait_timeout = Some(prost_types::Duration {
        seconds: 60,
        nanos: 0,
    });
    request
}

pub(crate) fn limits(flags: &[&str]) -> BTreeMap<u64, Vec<String>> {
    tenure_tests::same_flags(1, flags)
}

pub(crate) fn watch(resource: &str) -> pb::WatchRequest {
    pb::WatchRequest {
        resource: resource.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_open_stream_cap_a_watch_is_refused_until_one_closes() {
    let (cluster, _) = started_with(1, limits(&["--max-open-streams", "2"])).await;
    let mut leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    let first = leases.watch(watch("t71/w")).await.expect("first watch");
    let _second = leases.watch(watch("t71/w")).await.expect("second watch");
    let refused = leases.watch(watch("t71/w")).await.expect_err("third watch");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let reason = refused.metadata().get("tenure-reason").expect("a reason");
    assert_eq!(reason, "too_many_streams");
    assert!(
        refused.message().contains("--max-open-streams"),
        "{refused:?}"
    );
    // Calls that are not streams go on.
    granted(&cluster.client(), "t71/w", "h", TTL).await;
    // The node frees the place when the watch ends.
    drop(first);
    let node = cluster.node(1).clone();
    until("the closed watch's place is freed", || {
        node.streams.open() < 2
    })
    .await;
    leases.watch(watch("t71/w")).await.expect("a place again");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_in_flight_cap_a_call_is_refused_and_waits_do_not_count() {
    let (cluster, _) = started_with(1, limits(&["--max-in-flight", "1"])).await;
    let client = cluster.client();
    let node = cluster.node(1).clone();
    granted(&client, "t71/f", "holder", TTL).await;
    // A waiting acquire gives its place in flight up for one among the open streams: the
    // node's one place stays free for other calls.
    let waiting = waiting_acquire("t71/f", "waiter");
    let mut leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    let mut blocked = leases.clone();
    let wait = tokio::spawn(async move { blocked.acquire(waiting).await });
    until("the waiter is queued", || {
        node.sm.read().state.waiters() > 0
    })
    .await;
    granted(&client, "t71/g", "h", TTL).await;

    // A forward to an owner that never answers stays in flight: the next call is refused.
    let lease = granted(&client, "t71/owned", "owner", TTL).await;
    let _inbox = client.serve(&lease).await.expect("serve");
    let forwarder = client.clone();
    let forward = tokio::spawn(async move {
        forwarder
            .forward("t71/owned", b"hello".to_vec(), Duration::from_secs(30))
            .await
    });
    until("the forward is in flight", || node.in_flight.open() > 0).await;
    let refused = leases
        .acquire(acquire_request("t71/other", "h", TTL))
        .await
        .expect_err("a second call in flight");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let reason = refused.metadata().get("tenure-reason").expect("a reason");
    assert_eq!(reason, "too_many_requests");
    forward.abort();
    wait.abort();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_streams_on_one_connection_stop_at_its_limit_and_others_are_served() {
    const LIMIT: usize = 1024;
    let (cluster, _) = started(1).await;
    let addr = cluster.addrs[&1].clone();
    let greedy = Channel::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .buffer_size(20_000)
        .connect()
        .await
        .expect("connect");
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..10_000 {
        let mut leases = LeasesClient::new(greedy.clone());
        calls.spawn(async move { leases.watch(watch("t71/s")).await.map(|s| s.into_inner()) });
    }
    let node = cluster.node(1).clone();
    until("the connection opens its share", || {
        node.streams.open() >= LIMIT
    })
    .await;
    // Another client, on its own connection, is served meanwhile.
    granted(&cluster.client(), "t71/s", "other", TTL).await;
    assert_eq!(
        node.streams.open(),
        LIMIT,
        "one connection holds no more streams than --max-streams-per-connection"
    );
    calls.abort_all();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_by_sighup_is_refused_and_its_open_watch_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = token_file(
        dir.path(),
        &[
            (ADMIN, "ops", "admin"),
            (PEER, "nodes", "peer"),
            (ALICE, "alice", "client"),
        ],
    );
    let path = dir.path().join("tokens");
    let cluster = ProcessCluster::start(1, BTreeMap::from([(1, flags)])).expect("a node");
    let alice = cluster.client().with_token(ALICE).expect("token");
    granted(&alice, "t71/r", "alices", TTL).await;
    let mut leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    let mut watching = leases
        .watch(bearer(watch("t71/r"), ALICE))
        .await
        .expect("alice watches")
        .into_inner();

    // Alice's token goes, Bob's comes; the node reads the file again on SIGHUP.
    write_secret(
        &path,
        &format!("{ADMIN} ops admin\n{PEER} nodes peer\n{BOB} bob client\n"),
    );
    let pid = nix::unistd::Pid::from_raw(cluster.pid(1).expect("pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    let ended = tokio::time::timeout(ELECTION, async {
        loop {
            match watching.message().await {
                Ok(Some(_)) => continue,
                other => break other,
            }
        }
    })
    .await
    .expect("the watch ends");
    let status = ended.expect_err("ended by the revocation");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("revoked"), "{status:?}");

    let status = leases
        .acquire(bearer(acquire_request("t71/r2", "h", TTL), ALICE))
        .await
        .expect_err("a revoked token");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let bob = cluster.client().with_token(BOB).expect("token");
    granted(&bob, "t71/r2", "bobs", TTL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_open_to_callers_without_a_token_have_a_cap_of_their_own() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut flags = auth_flags(dir.path());
    flags.extend(["--max-public-streams".to_string(), "2".to_string()]);
    let (cluster, channel) = one_node(flags).await;
    let mut health = HealthClient::new(channel);
    let first = health
        .watch(HealthCheckRequest::default())
        .await
        .expect("first health watch");
    let _second = health
        .watch(HealthCheckRequest::default())
        .await
        .expect("second health watch");
    let refused = health
        .watch(HealthCheckRequest::default())
        .await
        .expect_err("a third");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("--max-public-streams"),
        "{refused:?}"
    );
    // A one-off health check is no stream, and the authenticated caller's watches have their
    // own places.
    health
        .check(HealthCheckRequest::default())
        .await
        .expect("a health check");
    let mut leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    leases
        .watch(bearer(watch("t71/p"), ADMIN))
        .await
        .expect("an admin's watch");
    // The place is held by the stream's body: it comes back once the stream is dropped.
    drop(first);
    let node = cluster.node(1).clone();
    until("the dropped stream's place is freed", || {
        node.public_streams.open() < 2
    })
    .await;
    health
        .watch(HealthCheckRequest::default())
        .await
        .expect("a place again");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_off_this_machine_is_not_added_to_a_cluster_that_sends_its_peer_token_in_clear() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cluster, _) = started_with(1, BTreeMap::from([(1, auth_flags(dir.path()))])).await;
    let admin = cluster.client().with_token(ADMIN).expect("token");
    let refused = admin
        .add_learner(4, "10.0.0.4:7101", false)
        .await
        .expect_err("the peer token would go in clear");
    let tenure_client::Error::Status { code, message, .. } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(*code, Code::InvalidArgument, "{refused:?}");
    assert!(message.contains("in clear"), "{message}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_a_different_configuration_is_refused_and_named_in_status() {
    // Node 3 alone refuses unregistered resources: it would apply differently.
    let extra = BTreeMap::from([(3, vec!["--require-registration".to_string()])]);
    let cluster = InProcessCluster::start(3, extra).await.expect("cluster");
    let one = cluster.node(1).clone();
    let three = cluster.node(3).clone();
    assert_ne!(one.config_digest(), three.config_digest());
    assert_eq!(one.config_digest(), cluster.node(2).config_digest());
    until("nodes 1 and 2 elect a leader between them", || {
        one.raft
            .metrics()
            .borrow_watched()
            .current_leader
            .is_some_and(|leader| leader != 3)
    })
    .await;
    let lease = granted(&cluster.client_of(1), "t71/digest", "h", TTL).await;

    let mismatches = |id: u64| {
        cluster
            .node(id)
            .peers
            .mismatches
            .recent(Duration::from_secs(60))
    };
    // Node 3 refuses the leader's calls, and the leader learns it was refused, with node 3's
    // digest.
    until("node 3 refuses the leader's calls", || {
        !mismatches(3).is_empty()
    })
    .await;
    let leader = one
        .raft
        .metrics()
        .borrow_watched()
        .current_leader
        .expect("a leader");
    let node3_addr = cluster.addrs[&3].clone();
    until("the leader knows node 3 refuses it", || {
        mismatches(leader)
            .iter()
            .any(|m| m.contains(&node3_addr) && m.contains(&three.config_digest()))
    })
    .await;
    // Node 3 took none of the leader's entries.
    assert!(three.sm.read().last_applied.map_or(0, |id| id.index) < lease.fencing_token);
    // Status names the refused peer, with its digest.
    let status = cluster.client_of(3).node_status(0).await.expect("status");
    assert_eq!(status.config_digest, three.config_digest());
    assert!(
        status
            .config_mismatches
            .iter()
            .any(|m| m.starts_with(&format!("node {leader}:")) && m.contains(&one.config_digest())),
        "{:?}",
        status.config_mismatches
    );
    cluster.shutdown().await;
}

/// A node of the release before openraft 0.10 (Raft protocol 1: a digest, no protocol header)
/// and one of an unknown protocol are refused by name, before their body is read; a call with
/// the current protocol goes on to the decoder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_raft_protocol_is_refused_by_name() {
    let (cluster, channel) = one_node(Vec::new()).await;
    let node = cluster.node(1).clone();
    let mut raft = RaftClient::new(channel);
    let call = |protocol: Option<&'static str>| {
        let mut request = tonic::Request::new(RaftBytes { data: vec![] });
        let metadata = request.metadata_mut();
        metadata.insert("tenure-raft-from", "9".parse().expect("ascii"));
        let digest = node.config_digest().parse().expect("ascii");
        metadata.insert("tenure-config-digest", digest);
        if let Some(protocol) = protocol {
            metadata.insert("tenure-raft-protocol", protocol.parse().expect("ascii"));
        }
        request
    };
    for (protocol, named) in [(None, "Raft protocol 1"), (Some("3"), "Raft protocol 3")] {
        let status = raft.vote(call(protocol)).await.expect_err("refused");
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains(named), "{status:?}");
        assert!(status.message().contains("node 9"), "{status:?}");
    }
    let status = raft.vote(call(Some("2"))).await.expect_err("an empty body");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let status = cluster.client().node_status(0).await.expect("status");
    assert!(
        status
            .config_mismatches
            .iter()
            .any(|m| m.starts_with("node 9:") && m.contains("raft protocol 3")),
        "{:?}",
        status.config_mismatches
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_past_its_share_in_flight_is_refused_while_another_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut flags = token_file(
        dir.path(),
        &[
            (PEER, "nodes", "peer"),
            (ALICE, "alice", "client"),
            (BOB, "bob", "client"),
        ],
    );
    flags.extend(["--max-in-flight-per-principal".to_string(), "1".to_string()]);
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let mut leases = LeasesClient::connect(format!("http://{}", cluster.addrs[&1]))
        .await
        .expect("connect");
    // A Serve whose body never comes: alice's one place in flight, held.
    let mut idle = leases.clone();
    let held = tokio::spawn(async move {
        idle.serve(bearer(
            futures::stream::pending::<pb::ServeRequest>(),
            ALICE,
        ))
        .await
    });
    let node = cluster.node(1).clone();
    until("alice's idle call is in flight", || {
        node.in_flight.open() > 0
    })
    .await;
    let refused = leases
        .acquire(bearer(acquire_request("t71/share", "a", TTL), ALICE))
        .await
        .expect_err("alice's second call");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("alice"), "{refused:?}");
    leases
        .acquire(bearer(acquire_request("t71/share", "b", TTL), BOB))
        .await
        .expect("bob is served");
    held.abort();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_is_not_queued_behind_its_own_connections_waits() {
    const WAITS: usize = 300;
    let (cluster, _) = started(1).await;
    let held = granted(&cluster.client(), "t71/busy", "holder", TTL).await;
    // One connection carries many waits for the busy resource, and then the holder's renew.
    let channel = Channel::from_shared(format!("http://{}", cluster.addrs[&1]))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut waits = tokio::task::JoinSet::new();
    for n in 0..WAITS {
        let mut leases = LeasesClient::new(channel.clone());
        let request = waiting_acquire("t71/busy", &format!("waiter-{n}"));
        waits.spawn(async move { leases.acquire(request).await });
    }
    let node = cluster.node(1).clone();
    until("every wait is queued", || {
        node.sm.read().state.waiters() >= WAITS
    })
    .await;
    let mut leases = LeasesClient::new(channel);
    let mut renew = tonic::Request::new(tenure_client::renew_request(&held, TTL));
    renew.set_timeout(Duration::from_secs(5));
    leases
        .renew(renew)
        .await
        .expect("the renew is answered beside the waits");
    waits.abort_all();
    cluster.shutdown().await;
}

/// A channel to `addr` whose connections come from the loopback address `from`.
pub(crate) async fn channel_from(addr: &str, from: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .local_address(Some(from.parse().expect("an IP")))
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_out_of_strikes_is_closed_and_its_address_kept_out_for_a_while() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut flags = auth_flags(dir.path());
    flags.extend(["--connection-strikes", "5", "--abuse-cooldown", "60s"].map(String::from));
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let addr = cluster.addrs[&1].clone();
    let node = cluster.node(1).clone();
    // 127.0.0.2 is on loopback but is no member's address.
    let mut stranger = LeasesClient::new(channel_from(&addr, "127.0.0.2").await);
    let mut transport_failure = None;
    for n in 0..20 {
        match stranger
            .acquire(acquire_request("t71/strikes", "h", TTL))
            .await
        {
            Err(status) if status.code() == Code::Unauthenticated => continue,
            other => {
                transport_failure = Some((n, other));
                break;
            }
        }
    }
    let (after, failure) = transport_failure.expect("the connection was closed");
    assert_eq!(after, 5, "closed after {after} refusals: {failure:?}");
    assert_eq!(
        node.connections_cut
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // Its address may not connect again for the cooldown; the members' address may.
    let again = Channel::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .local_address(Some("127.0.0.2".parse().expect("ip")))
        .timeout(Duration::from_secs(2))
        .connect()
        .await;
    let refused = match again {
        Err(_) => true,
        Ok(channel) => LeasesClient::new(channel)
            .acquire(bearer(acquire_request("t71/strikes", "h", TTL), ADMIN))
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a connection from the address in the cooldown was served"
    );
    let mut member = LeasesClient::new(channel_from(&addr, "127.0.0.1").await);
    member
        .acquire(bearer(acquire_request("t71/strikes", "h", TTL), ADMIN))
        .await
        .expect("the members' address is never kept out");
    cluster.shutdown().await;
}

/// The services `ListServices` names through reflection in the version of `$pb`, asked with
/// `token` (or none).
macro_rules! reflected_services {
    ($pb:ident, $channel:expr, $token:expr) => {{
        use tonic_reflection::pb::$pb::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$pb::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$pb::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::$pb::ServerReflectionRequest;
        let ask = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let stream = futures::stream::iter([ask]);
        let request = match $token {
            Some(token) => bearer(stream, token),
            None => tonic::Request::new(stream),
        };
        let mut replies = ServerReflectionClient::new($channel)
            .server_reflection_info(request)
            .await
            .expect("reflection answers")
            .into_inner();
        let reply = replies
            .message()
            .await
            .expect("a reply")
            .expect("one message");
        match reply.message_response {
            Some(MessageResponse::ListServicesResponse(list)) => {
                // Each version names itself; the rest must be the same in both.
                let mut names: Vec<String> = list
                    .service
                    .into_iter()
                    .map(|s| s.name)
                    .filter(|name| !name.starts_with("grpc.reflection."))
                    .collect();
                names.sort();
                names
            }
            other => panic!("not a list of services: {other:?}"),
        }
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_answers_in_v1_and_v1alpha_and_shows_the_internal_service_only_to_callers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cluster, channel) = one_node(auth_flags(dir.path())).await;
    let stranger_v1 = reflected_services!(v1, channel.clone(), None::<&str>);
    let stranger_v1alpha = reflected_services!(v1alpha, channel.clone(), None::<&str>);
    assert_eq!(stranger_v1, stranger_v1alpha);
    assert!(
        stranger_v1.contains(&"tenure.v1.Leases".to_string()),
        "{stranger_v1:?}"
    );
    assert!(
        !stranger_v1.iter().any(|s| s.starts_with("tenure.raft")),
        "{stranger_v1:?}"
    );
    let caller_v1 = reflected_services!(v1, channel.clone(), Some(ADMIN));
    let caller_v1alpha = reflected_services!(v1alpha, channel, Some(ADMIN));
    assert_eq!(caller_v1, caller_v1alpha);
    assert!(
        caller_v1.contains(&"tenure.raft.v1.Raft".to_string()),
        "{caller_v1:?}"
    );
    cluster.shutdown().await;
}
