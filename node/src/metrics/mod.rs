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
pub async fn serve(node: Arc<Node>, listener: TcpListener, stop: watch::Receiver<bool>) {
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
    let tls = tls.map(|tls| (tls, crate::tls::Speaks::Http1));
    serve_app(app, listener, tls, stop, "the metrics endpoint").await;
}

/// Serves `app` over HTTP/1.1 on `listener` until `stop`: after a TLS handshake with the
/// node's certificate, of the kind `Speaks` says, when `tls` is given. `what` names it in the
/// log if it stops on an error.
pub async fn serve_app(
    app: axum::Router,
    listener: TcpListener,
    tls: Option<(Arc<crate::tls::Tls>, crate::tls::Speaks)>,
    mut stop: watch::Receiver<bool>,
    what: &str,
) {
    let shutdown = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    let served = match tls {
        Some((tls, speaks)) => match listener.local_addr() {
            Ok(addr) => {
                let incoming = crate::tls::TlsIncoming::new(
                    tonic::transport::server::TcpIncoming::from(listener),
                    tls,
                    speaks,
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
        tracing::error!("{what} stopped: {e}");
    }
}
