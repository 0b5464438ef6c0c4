//! Observability (SPEC §6): Prometheus metrics over HTTP with Raft's state, the leases and
//! latency histograms; gRPC health that follows whether the node knows a leader.

use std::time::Duration;

use tenure_tests::granted;
use tenure_tests::{started, started_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET /metrics` over plain HTTP/1.1; the response body.
async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers end");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{head}"
    );
    body.to_string()
}

/// The value of the sample line that starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_show_raft_leases_and_latencies() {
    let extra = tenure_tests::same_flags(3, &["--metrics-listen", "127.0.0.1:0"]);
    let (cluster, leader) = started_with(3, extra).await;
    let client = cluster.client_of(leader);
    for i in 0..3 {
        granted(
            &client,
            &format!("metrics/{i}"),
            "h",
            Duration::from_secs(60),
        )
        .await;
    }
    let applied = cluster.applied_index(leader);
    let text = scrape(cluster.metrics_addr(leader).expect("metrics bound")).await;

    assert_eq!(sample(&text, "tenure_raft_is_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "tenure_raft_leader_id"), Some(leader as f64));
    assert_eq!(sample(&text, "tenure_raft_voters"), Some(3.0));
    assert!(sample(&text, "tenure_raft_term").is_some_and(|t| t >= 1.0));
    assert!(sample(&text, "tenure_raft_applied_index").is_some_and(|i| i >= applied as f64));
    assert_eq!(sample(&text, "tenure_leases_active"), Some(3.0));
    assert_eq!(sample(&text, "tenure_waiters"), Some(0.0));
    let fsyncs = sample(&text, "tenure_log_fsyncs_total").unwrap_or(0.0);
    assert!(fsyncs > 0.0, "{text}");
    // In seconds (docs/operations.md): well under a second per fdatasync.
    let synced = sample(&text, "tenure_log_sync_seconds_total").unwrap_or(0.0);
    assert!(synced > 0.0 && synced < fsyncs, "{text}");
    // Each acquire was applied (at least the three) and each call timed, by method.
    assert!(sample(&text, "tenure_apply_seconds_count").is_some_and(|n| n >= 3.0));
    let acquires = r#"tenure_rpc_seconds_count{method="/tenure.v1.Leases/Acquire"}"#;
    assert_eq!(sample(&text, acquires), Some(3.0), "{text}");

    // A made-up method is counted as `other`: callers cannot mint label values.
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addrs[&leader]))
            .expect("endpoint")
            .connect_lazy();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let path = "/made.Up/Path".parse().expect("path");
    let refused = grpc.unary(tonic::Request::new(()), path, codec).await;
    assert_eq!(
        refused.expect_err("no such method").code(),
        tonic::Code::Unimplemented
    );
    let text = scrape(cluster.metrics_addr(leader).expect("metrics bound")).await;
    assert!(!text.contains("made.Up"), "{text}");
    let other = r#"tenure_rpc_seconds_count{method="other"}"#;
    assert_eq!(sample(&text, other), Some(1.0), "{text}");

    // A follower reports itself as one, and the same leases once it has applied them.
    let follower = cluster.follower_of(leader);
    cluster.applied_at_least(follower, applied).await;
    let text = scrape(cluster.metrics_addr(follower).expect("metrics bound")).await;
    assert_eq!(sample(&text, "tenure_raft_is_leader"), Some(0.0));
    assert_eq!(sample(&text, "tenure_leases_active"), Some(3.0));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_is_serving_only_while_the_node_knows_a_leader() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let (mut cluster, leader) = started(3).await;
    let survivor = cluster.follower_of(leader);
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addrs[&survivor]))
            .expect("endpoint")
            .connect_lazy();
    let mut health = HealthClient::new(channel);
    let request = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let client = cluster.client_of(survivor);
    // The node's health follows its Raft metrics a moment after they change: wait for the
    // first SERVING the health stream reports, then every way of asking must agree. The node
    // sets "" first and then "tenure.v1.Leases", so the stream watches the second.
    let mut updates = health
        .watch(request("tenure.v1.Leases"))
        .await
        .expect("watch")
        .into_inner();
    while next_status(&mut updates).await != ServingStatus::Serving {}
    assert!(
        client.node_serving(0).await.expect("health"),
        "tenure health: serving"
    );
    for service in ["", "tenure.v1.Leases"] {
        let status = health.check(request(service)).await.expect("check");
        assert_eq!(
            status.into_inner().status(),
            ServingStatus::Serving,
            "{service:?}"
        );
    }
    // Alone, the survivor loses its leader at its next election and stops serving.
    for id in cluster.live_ids() {
        if id != survivor {
            cluster.kill(id).await;
        }
    }
    while next_status(&mut updates).await != ServingStatus::NotServing {}
    drop(updates);
    assert!(
        !client.node_serving(0).await.expect("health"),
        "tenure health: not serving"
    );
    cluster.shutdown().await;
}

/// The next status a `grpc.health.v1` watch stream reports; a node that never changes its
/// status fails the test rather than hanging it.
async fn next_status(
    updates: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
) -> tonic_health::pb::health_check_response::ServingStatus {
    tokio::time::timeout(std::time::Duration::from_secs(30), updates.message())
        .await
        .expect("a health update within 30 s")
        .expect("a health update")
        .expect("the stream stays open")
        .status()
}
