//! Per gRPC call: its latency by method and its `rpc` span ([`RpcTimer`]), and the calls
//! refused, by cause ([`Refusals`]).

use super::*;

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
/// handler fills in `request_id` ([`record_request_id`]): a write's own, or one
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
        use tenure_proto::contract::Reason;
        let reason = reason.to_str().ok().and_then(|r| r.parse::<Reason>().ok());
        let cause = match reason {
            Some(Reason::Unauthenticated) => "unauthenticated",
            Some(Reason::InsufficientPermissions) => "permission",
            Some(Reason::TooManyRequests | Reason::TooManyStreams | Reason::SlowWatcher) => "limit",
            _ => return,
        };
        self.0.get_or_create(&RefusalLabels { cause }).inc();
    }
}

/// Names the call being handled in its `rpc` span (see [`RpcTimer`]): a write's
/// `request_id`, or for a call without one `local-N`, numbered by this process, so that what
/// the call logs can be told apart from other calls'. Does nothing when the span is off.
pub fn record_request_id(request_id: Option<&str>) {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    match request_id {
        Some(id) => span.record("request_id", id),
        None => {
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            span.record("request_id", format_args!("local-{n}"))
        }
    };
}
