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
        record_request_id(write.then_some("req-7"));
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
