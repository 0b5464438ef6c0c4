//! What a client without a token can hold of a node's ports (issue 37): connections that never
//! say a word, or stop after a TLS handshake, a health check or a console file. Each port has
//! a cap, a share per address, and a deadline for quiet connections that carried no
//! authenticated call; when a port is full a quiet one makes room. Each test is an attack of
//! `tenure-jepsen abuse` at a smaller scale, with an authenticated client served beside it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::{acquire_request, started_with, ELECTION};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;

use super::t71_gate::{bearer, channel_from, token_file, ALICE, PEER, TTL};

/// A TCP connection to `addr` from the loopback address `from`.
async fn connect_from(addr: SocketAddr, from: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(from.parse().expect("an IP"), 0))
        .expect("bind");
    socket.connect(addr).await.expect("connect")
}

/// Reads `stream` until the node closes it (or it fails); panics if it stays open past
/// `ELECTION`.
async fn closed_by_the_node(stream: &mut (impl AsyncReadExt + Unpin), what: &str) {
    let mut sink = [0u8; 4096];
    tokio::time::timeout(ELECTION, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: still open after {ELECTION:?}"));
}

/// Whether the node closed `stream` within a moment (a connection refused at once).
async fn closed_at_once(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(2), stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// One node with auth on (`ALICE` a client) and `more` flags.
async fn node_with(
    dir: &std::path::Path,
    more: &[&str],
) -> tenure_tests::in_process::InProcessCluster {
    let mut flags = token_file(dir, &[(PEER, "nodes", "peer"), (ALICE, "alice", "client")]);
    flags.extend(more.iter().map(|f| f.to_string()));
    started_with(1, BTreeMap::from([(1, flags)])).await.0
}

fn table(
    cluster: &tenure_tests::in_process::InProcessCluster,
    port: &str,
) -> std::sync::Arc<tenure_node::guard::Table> {
    cluster
        .node(1)
        .connection_tables()
        .into_iter()
        .find(|t| t.port == port)
        .expect("the port's table")
}

/// The attack `idle-connections`: TCP connections that never send the HTTP/2 preface, from a
/// few addresses. Before, they were never closed, and 20,000 of them took every descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_capped_per_address_and_closed_and_a_client_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(
        dir.path(),
        &[
            "--max-connections",
            "24",
            "--max-connections-per-address",
            "8",
            "--greeting-timeout",
            "2s",
        ],
    )
    .await;
    let addr: SocketAddr = cluster.addrs[&1].parse().expect("an address");
    let mut silent = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..8 {
            silent.push(connect_from(addr, from).await);
        }
    }
    // An address past its share is closed at once.
    let mut ninth = connect_from(addr, "127.0.0.2").await;
    assert!(
        closed_at_once(&mut ninth).await,
        "past the per-address share"
    );
    // The port is full: a new connection makes room by closing the oldest quiet one.
    let mut newer = Vec::new();
    for _ in 0..4 {
        newer.push(connect_from(addr, "127.0.0.5").await);
    }
    closed_by_the_node(&mut silent[0], "the oldest silent connection").await;
    // An authenticated client from yet another address is served.
    let channel = channel_from(&cluster.addrs[&1], "127.0.0.6").await;
    let mut leases = LeasesClient::new(channel);
    leases
        .acquire(bearer(acquire_request("t73/a", "a", TTL), ALICE))
        .await
        .expect("alice is served");
    // Every silent connection is closed at the greeting deadline; alice's stays.
    for stream in silent.iter_mut().chain(newer.iter_mut()) {
        closed_by_the_node(stream, "a silent connection").await;
    }
    let grpc = table(&cluster, "grpc");
    assert_eq!(grpc.open(), 1, "only alice's connection is left");
    use tenure_node::guard::Closed;
    assert!(grpc.closed(Closed::PerAddress) >= 1);
    assert!(grpc.closed(Closed::Evicted) >= 4);
    assert!(grpc.closed(Closed::Greeting) >= 20);
    leases
        .acquire(bearer(acquire_request("t73/b", "a", TTL), ALICE))
        .await
        .expect("alice's connection is still served");
    cluster.shutdown().await;
}

/// The attack `idle-tls`: connections that finish the TLS handshake and then say nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_quiet_after_its_tls_handshake_is_closed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = super::t92_tls::pki("t73");
    let mut flags = super::t92_tls::flags(dir.path(), &pki);
    flags.extend(["--greeting-timeout".to_string(), "1s".to_string()]);
    let (cluster, _) = started_with(1, BTreeMap::from([(1, flags)])).await;
    let addr: SocketAddr = cluster.addrs[&1].parse().expect("an address");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.expect("PEM")).expect("the CA");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = connect_from(addr, "127.0.0.2").await;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("a name");
    let mut tls = connector.connect(name, tcp).await.expect("the handshake");
    closed_by_the_node(&mut tls, "a connection quiet after its handshake").await;
    let grpc = table(&cluster, "grpc");
    assert!(grpc.closed(tenure_node::guard::Closed::Greeting) >= 1);
    cluster.shutdown().await;
}

/// A keep-alive connection of the gateway (`GET path`, answered), left open.
async fn keep_alive(addr: SocketAddr, from: &str, path: &str) -> TcpStream {
    let mut stream = connect_from(addr, from).await;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .expect("a request");
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    // The head and a body of `content-length`: enough to know it was answered.
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
        let n = stream.read(&mut buf).await.expect("an answer");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&answer).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream
}

/// The attack `idle-gateway`: keep-alive connections that fetch a console file (no token
/// needed) and stay. Before, they held the gateway's 4,096 places for as long as they liked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_closes_quiet_keep_alive_connections_first_and_serves_a_client() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(
        dir.path(),
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--http-max-connections",
            "8",
            "--max-connections-per-address",
            "4",
            "--greeting-timeout",
            "3s",
        ],
    )
    .await;
    let addr = cluster.http_addr(1).expect("the gateway");
    let mut held = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3"] {
        for _ in 0..4 {
            held.push(keep_alive(addr, from, "/console/console.css").await);
        }
    }
    let mut fifth = connect_from(addr, "127.0.0.2").await;
    assert!(
        closed_at_once(&mut fifth).await,
        "past the per-address share"
    );
    // The gateway is full: a new connection makes room by closing the oldest quiet one, and
    // an authenticated call on it is answered.
    let mut alice = connect_from(addr, "127.0.0.4").await;
    alice
        .write_all(
            format!(
                "GET /v1/resources HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {ALICE}\r\nconnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("a request");
    let mut answer = Vec::new();
    alice.read_to_end(&mut answer).await.expect("an answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    closed_by_the_node(&mut held[0], "the oldest quiet keep-alive connection").await;
    for stream in held.iter_mut() {
        closed_by_the_node(stream, "a keep-alive connection of console files").await;
    }
    let gateway = table(&cluster, "http");
    use tenure_node::guard::Closed;
    assert!(gateway.closed(Closed::PerAddress) >= 1);
    assert!(gateway.closed(Closed::Evicted) >= 1);
    assert!(gateway.closed(Closed::Greeting) >= 7);
    cluster.shutdown().await;
}

/// A connection held open and silent holds no place for ever, a token or not: past
/// `--connection-idle-timeout` without a call an authenticated gRPC connection is closed, and
/// its client's channel connects again when it next calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_authenticated_connection_is_closed_at_the_idle_time_and_its_client_reconnects() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(
        dir.path(),
        &[
            "--connection-idle-timeout",
            "1s",
            "--greeting-timeout",
            "1h",
        ],
    )
    .await;
    let mut leases = LeasesClient::new(channel_from(&cluster.addrs[&1], "127.0.0.6").await);
    leases
        .acquire(bearer(acquire_request("t73/idle/a", "a", TTL), ALICE))
        .await
        .expect("alice is served");
    let grpc = table(&cluster, "grpc");
    use tenure_node::guard::Closed;
    super::t71_gate::until("alice's quiet connection is closed", || {
        grpc.closed(Closed::Idle) >= 1 && grpc.open() == 0
    })
    .await;
    assert_eq!(grpc.closed(Closed::Greeting), 0, "closed for its idle time");
    // The channel learns of the close when the node's FIN reaches it: a call sent before
    // that fails as the connection goes (`cancelled` or `unavailable`, or, when its write
    // meets the closed socket, tonic's `unknown` "transport error" of a broken pipe: nothing
    // done), and the next one connects again.
    let again = || bearer(acquire_request("t73/idle/b", "a", TTL), ALICE);
    let went = |e: &tonic::Status| {
        matches!(e.code(), Code::Cancelled | Code::Unavailable)
            || (e.code() == Code::Unknown && e.message() == "transport error")
    };
    match leases.acquire(again()).await {
        Ok(_) => {}
        Err(raced) if went(&raced) => {
            leases
                .acquire(again())
                .await
                .expect("alice's channel connects again");
        }
        Err(other) => panic!("alice's channel connects again: {other:?}"),
    }
    cluster.shutdown().await;
}

/// Alice's listing of resources on the keep-alive connection `stream`: the answer's head,
/// once its whole body is read.
async fn listed(stream: &mut TcpStream) -> String {
    stream
        .write_all(
            format!("GET /v1/resources HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {ALICE}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("a request");
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    let (head, length) = loop {
        let n = stream.read(&mut buf).await.expect("an answer");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).to_string();
        if let Some((head, _)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().expect("a length"))
                })
                .expect("a content-length");
            break (head.to_string(), length);
        }
    };
    while answer.len() < head.len() + 4 + length {
        let n = stream.read(&mut buf).await.expect("the body");
        assert!(n > 0, "closed before the body ended");
        answer.extend_from_slice(&buf[..n]);
    }
    head
}

/// A gateway connection that carried an authenticated call is held to the idle time, not to
/// the greeting's: it outlives a connection that fetched only a console file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_connection_with_an_authenticated_call_outlives_the_greeting_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(
        dir.path(),
        &["--http-listen", "127.0.0.1:0", "--greeting-timeout", "1s"],
    )
    .await;
    let addr = cluster.http_addr(1).expect("the gateway");
    // Alice's connection first: it is quiet the longer of the two.
    let mut alice = connect_from(addr, "127.0.0.4").await;
    let head = listed(&mut alice).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut files = keep_alive(addr, "127.0.0.5", "/console/console.css").await;
    closed_by_the_node(&mut files, "a connection of console files only").await;
    let gateway = table(&cluster, "http");
    assert_eq!(gateway.open(), 1, "alice's connection stays");
    let head = listed(&mut alice).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    cluster.shutdown().await;
}

/// `/metrics` answers only requests addressed to this machine (a page of another site that
/// resolves to it cannot read the principals' names), and closes quiet connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_refuse_another_host_and_close_quiet_connections() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(
        dir.path(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--http-idle-timeout",
            "2s",
        ],
    )
    .await;
    let addr = cluster.metrics_addr(1).expect("metrics");
    let get = |host: String| async move {
        let mut stream = connect_from(addr, "127.0.0.1").await;
        stream
            .write_all(
                format!("GET /metrics HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .expect("a request");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.expect("an answer");
        String::from_utf8_lossy(&answer).to_string()
    };
    let refused = get("rebound.example:9100".into()).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let served = get(addr.to_string()).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert!(
        served.contains("tenure_connections_closed_total"),
        "{served}"
    );
    // A scraper's keep-alive connection, quiet past the idle time, is closed.
    let mut quiet = connect_from(addr, "127.0.0.2").await;
    quiet
        .write_all(format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("a request");
    closed_by_the_node(&mut quiet, "a quiet metrics connection").await;
    cluster.shutdown().await;
}

/// The 256 health Watch places need no token: one address holds only its share of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_only_its_share_of_the_public_streams() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(dir.path(), &["--max-public-streams-per-address", "2"]).await;
    let mut health = HealthClient::new(channel_from(&cluster.addrs[&1], "127.0.0.2").await);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            health
                .watch(HealthCheckRequest::default())
                .await
                .expect("within the address's share"),
        );
    }
    let refused = health
        .watch(HealthCheckRequest::default())
        .await
        .expect_err("past the address's share");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("--max-public-streams-per-address"),
        "{refused:?}"
    );
    let mut other = HealthClient::new(channel_from(&cluster.addrs[&1], "127.0.0.3").await);
    other
        .watch(HealthCheckRequest::default())
        .await
        .expect("another address is served");
    cluster.shutdown().await;
}

/// The attack `rapid-reset-auth`: HEADERS with a valid token and RST_STREAM sent together. The
/// handler answered each (its body broke off), so none was a dropped call and none cost a
/// strike: 257k resets in 20 s were never cut. Each now costs one, and the connection is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_client_that_resets_its_calls_at_once_is_cut_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = node_with(dir.path(), &["--connection-strikes", "20"]).await;
    let addr: SocketAddr = cluster.addrs[&1].parse().expect("an address");
    let tcp = connect_from(addr, "127.0.0.2").await;
    let (mut client, mut connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
    let mut ping = connection.ping_pong().expect("a ping");
    let driver = tokio::spawn(connection);
    let mut sent = 0u32;
    let cut = tokio::time::timeout(ELECTION, async {
        loop {
            // A PING answered every 50 calls: the node has read what came before it. Sent
            // further ahead, thousands of resets of calls h2 has not handed over yet trip
            // h2's own limit (1,000) first on a busy machine, and that close is not the
            // node's strikes.
            if sent % 50 == 49 && ping.ping(h2::Ping::opaque()).await.is_err() {
                return;
            }
            let Ok(ready) = client.clone().ready().await else {
                return;
            };
            client = ready;
            let request = http::Request::post(format!("http://{addr}/tenure.v1.Leases/Acquire"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header("authorization", format!("Bearer {ALICE}"))
                .body(())
                .expect("a request");
            match client.send_request(request, false) {
                Ok((_response, mut body)) => body.send_reset(h2::Reason::CANCEL),
                Err(_) => return,
            }
            sent += 1;
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(cut.is_ok(), "still open after {sent} resets");
    let node = cluster.node(1).clone();
    assert!(
        node.connections_cut
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    // The cooldown keeps its address out; another address is served.
    let channel = channel_from(&cluster.addrs[&1], "127.0.0.3").await;
    LeasesClient::new(channel)
        .acquire(bearer(acquire_request("t73/r", "a", TTL), ALICE))
        .await
        .expect("another client is served");
    driver.abort();
    cluster.shutdown().await;
}
