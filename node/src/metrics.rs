//! Prometheus metrics over HTTP (SPEC §6): `GET /metrics` on `--metrics-listen`, in the text
//! exposition format.
//!
//! Raft's state (term, leader, indexes, membership), the leases, waiters, snapshots and the
//! log's fsync counters are read when the scrape comes (a [`Collector`]), so they cost
//! nothing between scrapes. Latencies are histograms observed as they happen: the time to
//! apply each entry (`StorageStats::apply_seconds`) and each gRPC call from request to
//! response headers, by method ([`RpcTimer`]), which also runs each call in its `rpc` span.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Instant;

use openraft::ServerState;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::Instrument;

use crate::app::Node;
use crate::lease::quota::Quota;
use crate::store::StorageStats;

/// Call latency buckets from 50 µs to ≈ 13 s, ×4 apart.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 4.0, 10))
}

/// Apply latency buckets from 1 µs to ≈ 0.5 s, ×2 apart (an entry applies in microseconds).
pub fn apply_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_001, 2.0, 20))
}

/// The gRPC methods this node serves, as `/package.Service/Method` (from the proto
/// descriptors), plus health and reflection. Any other path is labelled `other`, so a caller
/// cannot add label values (and memory) by sending made-up paths.
fn known_methods() -> std::collections::HashSet<String> {
    use prost::Message;
    let mut known = std::collections::HashSet::new();
    if let Ok(files) = prost_types::FileDescriptorSet::decode(tenure_proto::FILE_DESCRIPTOR_SET) {
        for file in files.file {
            let package = file.package();
            for service in &file.service {
                for method in &service.method {
                    known.insert(format!("/{package}.{}/{}", service.name(), method.name()));
                }
            }
        }
    }
    for method in ["Check", "Watch"] {
        known.insert(format!("/grpc.health.v1.Health/{method}"));
    }
    known.insert("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo".to_string());
    known
}

/// One gRPC method, e.g. `/tenure.v1.Leases/Acquire`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub method: String,
}

/// gRPC latency by method (shared by the server layer and the registry).
pub type RpcLatency = Family<RpcLabels, Histogram, fn() -> Histogram>;

pub fn rpc_latency() -> RpcLatency {
    Family::new_with_constructor(latency_histogram as fn() -> Histogram)
}

/// A tower layer that runs every call in a span of its own, `rpc{method, request_id}`, and
/// observes its latency, request to response headers (for a stream: until it is open). The
/// handler fills in `request_id` ([`crate::api::record_request_id`]): a write's own, or one
/// the node assigns. Events logged while the call is handled (its retries, forwarding,
/// refusals) carry both fields.
#[derive(Clone)]
pub struct RpcTimerLayer {
    latency: RpcLatency,
    known: Arc<std::collections::HashSet<String>>,
}

impl RpcTimerLayer {
    pub fn new(latency: RpcLatency) -> Self {
        RpcTimerLayer {
            latency,
            known: Arc::new(known_methods()),
        }
    }
}

impl<S> tower::Layer<S> for RpcTimerLayer {
    type Service = RpcTimer<S>;

    fn layer(&self, inner: S) -> RpcTimer<S> {
        RpcTimer {
            inner,
            latency: self.latency.clone(),
            known: self.known.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RpcTimer<S> {
    inner: S,
    latency: RpcLatency,
    known: Arc<std::collections::HashSet<String>>,
}

impl<S, B> tower::Service<http::Request<tonic::body::Body>> for RpcTimer<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let path = request.uri().path();
        let method = if self.known.contains(path) {
            path.to_string()
        } else {
            "other".to_string()
        };
        // Nodes' own traffic (AppendEntries, heartbeats, forwarded calls) only at debug.
        let span = if method.starts_with("/tenure.raft.") {
            tracing::debug_span!("rpc", method = %method, request_id = tracing::field::Empty)
        } else {
            tracing::info_span!("rpc", method = %method, request_id = tracing::field::Empty)
        };
        let histogram = self.latency.get_or_create_owned(&RpcLabels { method });
        let started = Instant::now();
        let response = span.in_scope(|| self.inner.call(request));
        Box::pin(
            async move {
                let response = response.await;
                histogram.observe(started.elapsed().as_secs_f64());
                response
            }
            .instrument(span),
        )
    }
}

/// Why a call was refused, for `tenure_refusals_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub cause: &'static str,
}

/// Calls refused by cause: `unauthenticated` (no or unknown token), `permission` (a token
/// without the right: a client on the internal service, a non-admin on an admin call, a
/// non-holder), `limit` (a node-wide cap: in flight or open streams), counted from each
/// refusal's `tenure-reason`.
#[derive(Clone, Debug, Default)]
pub struct Refusals(pub Family<RefusalLabels, Counter>);

impl Refusals {
    /// Counts the refusal a response carries, if any (the reason of a trailers-only error).
    pub fn count(&self, headers: &http::HeaderMap) {
        let Some(reason) = headers.get(crate::error::REASON_HEADER) else {
            return;
        };
        let cause = match reason.as_bytes() {
            b"unauthenticated" => "unauthenticated",
            b"insufficient_permissions" => "permission",
            b"too_many_requests" | b"too_many_streams" | b"slow_watcher" => "limit",
            _ => return,
        };
        self.0.get_or_create(&RefusalLabels { cause }).inc();
    }
}

/// Reads the node's state on every scrape.
#[derive(Debug)]
struct NodeCollector {
    node: Weak<Node>,
}

fn gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn counter<N: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Prometheus's base unit.
fn micros_as_seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

impl Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(node) = self.node.upgrade() else {
            return Ok(());
        };
        let metrics = node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let (leases, waiters, applied, exactly_once, top) = {
            let applied = node.sm.read();
            let state = &applied.state;
            (
                state.live_leases(),
                state.waiters(),
                applied.last_applied.map_or(0, |id| id.index),
                (state.dedup.len(), state.dedup.bytes()),
                crate::api::cluster::top_principals(&state.quotas),
            )
        };
        let e = &mut encoder;
        let i = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (name, help, gauge_of) in [
            (
                "tenure_requests_in_flight",
                "Client requests being handled (refused past tenure_requests_in_flight_limit)",
                &node.in_flight,
            ),
            (
                "tenure_open_streams",
                "Watch, Serve and waiting Acquire calls open (refused past tenure_open_streams_limit)",
                &node.streams,
            ),
            (
                "tenure_public_streams",
                "Health Watch and reflection streams open (refused past tenure_public_streams_limit)",
                &node.public_streams,
            ),
        ] {
            gauge(e, name, help, gauge_of.open() as i64)?;
            gauge(
                e,
                &format!("{name}_limit"),
                "The node-wide cap (--max-in-flight, --max-open-streams, --max-public-streams)",
                gauge_of.limit() as i64,
            )?;
        }
        gauge(
            e,
            "tenure_raft_term",
            "Current Raft term",
            i(metrics.current_term),
        )?;
        gauge(
            e,
            "tenure_raft_leader_id",
            "Leader this node knows (0: none)",
            i(metrics.current_leader.unwrap_or(0)),
        )?;
        gauge(
            e,
            "tenure_raft_is_leader",
            "1 on the leader",
            i64::from(metrics.state == ServerState::Leader),
        )?;
        gauge(
            e,
            "tenure_raft_last_log_index",
            "Last log index",
            i(metrics.last_log_index.unwrap_or(0)),
        )?;
        let commit = crate::api::membership::commit_index(node.id, &metrics, applied);
        gauge(
            e,
            "tenure_raft_commit_index",
            "Commit index (the quorum's on the leader; the applied index elsewhere)",
            i(commit),
        )?;
        gauge(e, "tenure_raft_applied_index", "Applied index", i(applied))?;
        gauge(
            e,
            "tenure_raft_voters",
            "Voters in the membership",
            membership.voter_ids().count() as i64,
        )?;
        gauge(
            e,
            "tenure_raft_members",
            "Members (voters and learners)",
            membership.nodes().count() as i64,
        )?;
        gauge(e, "tenure_leases_active", "Live leases", leases as i64)?;
        gauge(
            e,
            "tenure_exactly_once_records",
            "Remembered request ids (exactly-once, the last 10 minutes of lease time)",
            exactly_once.0 as i64,
        )?;
        gauge(
            e,
            "tenure_exactly_once_bytes",
            "What the remembered request ids cost, in bytes (refused past 1 GiB)",
            i(exactly_once.1),
        )?;
        {
            let mut used = e.encode_descriptor(
                "tenure_quota_used",
                "What the principals nearest a quota hold (at most 10 principals), by quota",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            let mut limits = Vec::new();
            for view in &top {
                let principal = view.principal.clone().unwrap_or_default();
                for q in crate::lease::quota::ALL {
                    let value = match q {
                        Quota::Watches | Quota::Inboxes | Quota::AllResourceWatches => {
                            node.streams_of(&principal, q)
                        }
                        _ => view.usage.get(q),
                    };
                    let labels = vec![
                        ("principal", principal.clone()),
                        ("quota", q.name().to_string()),
                    ];
                    ConstGauge::new(i(value)).encode(used.encode_family(&labels)?)?;
                    limits.push((labels, view.limits.get(q)));
                }
            }
            let mut limit = e.encode_descriptor(
                "tenure_quota_limit",
                "The limits of the principals in tenure_quota_used, by quota",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (labels, value) in limits {
                ConstGauge::new(i(value)).encode(limit.encode_family(&labels)?)?;
            }
        }
        gauge(
            e,
            "tenure_waiters",
            "Acquires waiting in waiting rooms",
            waiters as i64,
        )?;
        let s = &node.sm.stats;
        counter(
            e,
            "tenure_reclaims",
            "Leases reclaimed after expiry and grace",
            StorageStats::get(&s.reclaims),
        )?;
        counter(
            e,
            "tenure_log_appends",
            "Log appends (each flushed and fdatasynced)",
            StorageStats::get(&s.log_appends),
        )?;
        counter(
            e,
            "tenure_log_entries",
            "Log entries appended",
            StorageStats::get(&s.log_entries),
        )?;
        counter(
            e,
            "tenure_log_fsyncs",
            "Log fdatasyncs",
            StorageStats::get(&s.log_fsyncs),
        )?;
        counter(
            e,
            "tenure_log_sync_seconds",
            "Time in log flush + fdatasync",
            micros_as_seconds(StorageStats::get(&s.log_sync_micros)),
        )?;
        counter(
            e,
            "tenure_snapshots_built",
            "Snapshots this node built",
            StorageStats::get(&s.snapshots_built),
        )?;
        counter(
            e,
            "tenure_snapshots_installed",
            "Snapshots installed from the leader",
            StorageStats::get(&s.snapshots_installed),
        )?;
        counter(
            e,
            "tenure_connections_cut",
            "Connections closed for abuse (out of strikes: --connection-strikes)",
            node.connections_cut
                .load(std::sync::atomic::Ordering::Relaxed),
        )?;
        counter(
            e,
            "tenure_snapshots_refused",
            "Snapshots from the leader refused: their checksum did not match",
            StorageStats::get(&s.snapshots_refused),
        )?;
        gauge(
            e,
            "tenure_snapshot_last_index",
            "Last index of the newest snapshot",
            i(StorageStats::get(&s.last_snapshot_index)),
        )?;
        gauge(
            e,
            "tenure_snapshot_bytes",
            "Size of the newest snapshot this node built",
            i(StorageStats::get(&s.last_snapshot_bytes)),
        )?;
        gauge(
            e,
            "tenure_snapshot_build_seconds",
            "How long building the newest snapshot took",
            micros_as_seconds(StorageStats::get(&s.last_snapshot_build_micros)),
        )?;
        gauge(
            e,
            "tenure_snapshot_building",
            "1 while a snapshot is being built",
            i(StorageStats::get(&s.snapshot_building)),
        )?;
        Ok(())
    }
}

/// The registry of `node`'s metrics.
pub fn registry(node: &Arc<Node>) -> Registry {
    let mut registry = Registry::default();
    registry.register(
        "tenure_apply_seconds",
        "Time to apply one log entry to the lease state",
        node.sm.stats.apply_seconds.0.clone(),
    );
    registry.register(
        "tenure_rpc_seconds",
        "gRPC calls served, request to response headers (for a stream: until it is open), by method",
        node.rpc_latency.clone(),
    );
    registry.register(
        "tenure_refusals",
        "Calls refused, by cause: unauthenticated, permission, limit",
        node.refusals.0.clone(),
    );
    registry.register(
        "tenure_reads_paced",
        "Reads that waited for their principal's read rate (--read-rate-per-principal)",
        node.read_pacer.paced.clone(),
    );
    registry.register_collector(Box::new(NodeCollector {
        node: Arc::downgrade(node),
    }));
    registry
}

/// The text exposition of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

/// The metrics listener over TLS: HTTP/1.1 after a handshake with the node's certificate.
struct TlsListener {
    incoming: crate::tls::TlsIncoming<tonic::transport::server::TcpIncoming, tokio::net::TcpStream>,
    addr: std::net::SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        use futures::StreamExt;
        loop {
            match self.incoming.next().await {
                Some(Ok(tls)) => {
                    let peer = tls.get_ref().0.peer_addr().unwrap_or(self.addr);
                    return (tls, peer);
                }
                Some(Err(_)) => continue,
                None => std::future::pending().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// Serves `GET /metrics` on `listener` until `stop`: over TLS with the node's certificate when
/// TLS is on, plain HTTP otherwise (which `Config::validate` allows on loopback only, or with
/// `--insecure`).
pub async fn serve(node: Arc<Node>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let registry = Arc::new(registry(&node));
    let tls = node.tls.clone();
    drop(node);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            async move {
                (
                    [(
                        http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    render(&registry),
                )
            }
        }),
    );
    let shutdown = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    let served = match tls {
        Some(tls) => match listener.local_addr() {
            Ok(addr) => {
                let incoming = crate::tls::TlsIncoming::new(
                    tonic::transport::server::TcpIncoming::from(listener),
                    tls,
                    crate::tls::Speaks::Http1,
                );
                let listener = TlsListener { incoming, addr };
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            Err(e) => Err(e),
        },
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    };
    if let Err(e) = served {
        tracing::error!("the metrics endpoint stopped: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::sync::Mutex;

    use tower::{Layer as _, Service as _};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    use super::*;

    /// Each event, as the names and fields of the spans it was logged in.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<String>>>);

    struct Fields(String);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    impl<S> tracing_subscriber::Layer<S> for Captured
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            id: &tracing::span::Id,
            ctx: LayerContext<'_, S>,
        ) {
            let mut fields = Fields(String::new());
            attrs.record(&mut fields);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(fields);
            }
        }

        fn on_record(
            &self,
            id: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            ctx: LayerContext<'_, S>,
        ) {
            if let Some(span) = ctx.span(id) {
                if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                    values.record(fields);
                }
            }
        }

        fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
            let mut line = String::new();
            for span in ctx
                .event_scope(event)
                .into_iter()
                .flat_map(|s| s.from_root())
            {
                line.push_str(span.name());
                if let Some(fields) = span.extensions().get::<Fields>() {
                    line.push_str(&fields.0);
                }
            }
            self.0.lock().expect("lines").push(line);
        }
    }

    /// What a handler logs carries its call's method and request id; a call without an id of
    /// its own gets one, a made-up path is only `other`, and nodes' own calls are in a span
    /// only at debug level.
    #[test]
    fn every_call_runs_in_a_span_with_its_method_and_request_id() {
        use tracing_subscriber::Layer as _;
        let captured = Captured::default();
        let info = captured
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
        let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(info));
        let handler = tower::service_fn(|request: http::Request<tonic::body::Body>| async move {
            let write = request.uri().path().ends_with("/Acquire");
            crate::api::record_request_id(write.then_some("req-7"));
            tracing::warn!("handled");
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        });
        let mut service = RpcTimerLayer::new(rpc_latency()).layer(handler);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        for path in [
            "/tenure.v1.Leases/Acquire",
            "/tenure.v1.Leases/GetResource",
            "/x/y",
            "/tenure.raft.v1.Raft/AppendEntries",
        ] {
            let request = http::Request::builder()
                .uri(path)
                .body(tonic::body::Body::empty())
                .expect("request");
            runtime.block_on(service.call(request)).expect("answered");
        }
        let lines = captured.0.lock().expect("lines").clone();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(
            lines[0],
            r#"rpc method=/tenure.v1.Leases/Acquire request_id="req-7""#
        );
        let assigned = lines[1]
            .strip_prefix("rpc method=/tenure.v1.Leases/GetResource request_id=local-")
            .unwrap_or_else(|| panic!("{}", lines[1]));
        assert!(assigned.parse::<u64>().is_ok(), "{}", lines[1]);
        assert!(
            lines[2].starts_with("rpc method=other request_id=local-"),
            "{}",
            lines[2]
        );
        assert_eq!(lines[3], "", "no span at info level");
    }
}
