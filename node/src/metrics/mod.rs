//! Prometheus metrics over HTTP (SPEC §6): `GET /metrics` on `--metrics-listen`, in the text
//! exposition format.
//!
//! Raft's state (term, leader, indexes, membership), the leases, waiters, snapshots and the
//! log's fsync counters are read when the scrape comes (a [`Collector`]), so they cost
//! nothing between scrapes. Latencies are histograms observed as they happen: the time to
//! apply each entry (`StorageStats::apply_seconds`) and each gRPC call from request to
//! response headers, by method ([`RpcTimer`]), which also runs each call in its `rpc` span.

mod collector;
mod histograms;
mod rpc;
#[cfg(test)]
mod tests;

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
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::Instrument;

use crate::coord::Node;
use crate::lease::quota::Quota;
use crate::store::StorageStats;

use collector::NodeCollector;
pub use histograms::{apply_histogram, latency_histogram};
pub use rpc::{
    record_request_id, rpc_latency, RefusalLabels, Refusals, RpcLabels, RpcLatency, RpcTimer,
    RpcTimerLayer,
};

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

/// Serves `GET /metrics` on `listener` until `stop`: over TLS with the node's certificate when
/// TLS is on, plain HTTP otherwise (which `Config::validate` allows on loopback only, or with
/// `--insecure`). Its connections have a table of their own (the scrapers': 64, 16 from one
/// address, quiet ones closed as on the gateway). Without TLS (no client certificate says who
/// scrapes) a request must name the node by an address (`Host`), so that a page of another
/// site whose name resolves to the node cannot read it from a browser.
pub async fn serve(node: Arc<Node>, listener: TcpListener, stop: watch::Receiver<bool>) {
    let registry = Arc::new(registry(&node));
    let plain = node.tls.is_none();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: http::HeaderMap| {
            let registry = registry.clone();
            async move {
                let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok());
                if plain && !host.is_some_and(crate::gateway::is_address) {
                    return (
                        http::StatusCode::FORBIDDEN,
                        [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                        "the metrics endpoint answers only requests addressed to an IP address or localhost\n".to_string(),
                    );
                }
                (
                    http::StatusCode::OK,
                    [(
                        http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    render(&registry),
                )
            }
        }),
    );
    let table = node.connection_table(crate::coord::connections::Port::Metrics);
    let tls = node.tls.clone().map(|tls| (tls, crate::tls::Speaks::Http1));
    crate::gateway::serve::serve_http(&node, app, listener, (tls, table), stop).await;
}
