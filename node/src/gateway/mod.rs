//! The HTTP/JSON gateway (SPEC §2.7), on `--http-listen`: every unary `tenure.v1.Leases` and
//! `Cluster` call as a resource-oriented route ([`routes`]), JSON in the proto3 mapping from
//! the proto descriptors ([`json`]), `Watch` as Server-Sent Events ([`sse`]), and the OpenAPI
//! document of the same table at `/v1/openapi.json` ([`openapi`]).
//!
//! A call passes the gate's own admission first, from its headers alone (the bearer token,
//! then the caps on calls in flight), before a byte of its body is read; then its JSON becomes
//! the call's message and the gRPC handler itself answers it ([`call`]): no rule of the API has
//! a second implementation. Errors are `{code, reason, message, metadata}` with the HTTP
//! status of the gRPC code ([`error`]).

pub mod call;
pub mod error;
pub mod json;
pub mod openapi;
pub mod routes;
pub mod sse;

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::Instrument;

use crate::coord::Node;
use crate::error::ApiError;
use error::Failure;

/// The largest request body the gateway reads (the gRPC transport's bound, SPEC §3.5).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// A JSON response.
pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The gateway's routes, for `node`.
pub fn router(node: Arc<Node>) -> axum::Router {
    let openapi = Arc::new(openapi::document().to_string());
    axum::Router::new()
        .route(
            "/v1/openapi.json",
            axum::routing::get(move || {
                let openapi = openapi.clone();
                async move {
                    (
                        [(http::header::CONTENT_TYPE, "application/json")],
                        openapi.as_str().to_owned(),
                    )
                }
            }),
        )
        .fallback(move |request: http::Request<Body>| {
            let node = node.clone();
            async move { handle(node, request).await }
        })
}

/// Serves the gateway on `listener` until `stop` (over TLS with the node's certificate when
/// TLS is on).
pub async fn serve(node: Arc<Node>, listener: TcpListener, stop: watch::Receiver<bool>) {
    let tls = node
        .tls
        .clone()
        .map(|tls| (tls, crate::tls::Speaks::Gateway));
    let app = router(node);
    crate::metrics::serve_app(app, listener, tls, stop, "the HTTP gateway").await;
}

/// One API call: admitted from its headers, then its body read, transcoded and answered.
async fn handle(node: Arc<Node>, request: http::Request<Body>) -> Response {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    let found = match routes::find(&parts.method, parts.uri.path()) {
        Ok(found) => found,
        Err(refused) => return no_route(&parts.method, parts.uri.path(), refused),
    };
    let route = found.route;
    let method = format!("/{}/{} (http)", route.service, route.rpc);
    let span = tracing::info_span!("rpc", method = %method, request_id = tracing::field::Empty);
    let histogram = node
        .rpc_latency
        .get_or_create_owned(&crate::metrics::RpcLabels { method });
    // The gate's admission, from the headers alone: the body is not read for a caller it
    // refuses.
    let in_flight =
        match crate::grpc::gate::admit_client(&node, &parts.headers, &mut parts.extensions) {
            Ok(in_flight) => in_flight,
            Err(refused) => return refusal(&node, refused),
        };
    let answered = async {
        let body = match read_body(body).await {
            Ok(body) => body,
            Err(failure) => return failure.into_response(),
        };
        let Some((input, output)) = json::messages(route.service, route.rpc) else {
            return Failure(tonic::Status::internal("a route without its messages"))
                .into_response();
        };
        let query = query_pairs(parts.uri.query());
        let encoded = match json::request(&input, &body, &query, &found.fields) {
            Ok(encoded) => encoded,
            Err(bad) => {
                return Failure::from(ApiError::invalid(&bad.field, bad.to_string()))
                    .into_response()
            }
        };
        if route.rpc == routes::WATCH {
            let last_event_id = parts
                .headers
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            return sse::watch(&node, input, encoded, last_event_id, parts.extensions).await;
        }
        match call::unary(&node, route.service, route.rpc, &encoded, parts.extensions).await {
            Ok(reply) => match json::reply(&output, &reply) {
                Ok(json) => json_response(StatusCode::OK, &json),
                Err(e) => {
                    Failure(tonic::Status::internal(format!("reply to JSON: {e}"))).into_response()
                }
            },
            Err(status) => Failure(status).into_response(),
        }
    }
    .instrument(span)
    .await;
    in_flight.release();
    histogram.observe(started.elapsed().as_secs_f64());
    let mut response = answered;
    node.refusals.count(response.headers());
    if let Some(value) = crate::grpc::transport::leader_header(node.leader()) {
        response
            .headers_mut()
            .insert(crate::grpc::transport::LEADER_HEADER, value);
    }
    response
}

/// A caller the gate refused, answered as the gRPC gate would, in JSON.
fn refusal(node: &Node, refused: ApiError) -> Response {
    let response = Failure::from(refused).into_response();
    node.refusals.count(response.headers());
    response
}

/// Reads at most [`MAX_BODY_BYTES`] of the body.
async fn read_body(body: Body) -> Result<Bytes, Failure> {
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Failure(error::status(
            tonic::Code::ResourceExhausted,
            crate::error::Reason::ResourceExhausted,
            format!("the body exceeds the {MAX_BODY_BYTES}-byte limit"),
        ))),
        Err(e) => Err(Failure::from(ApiError::invalid(
            "",
            format!("the body could not be read: {e}"),
        ))),
    }
}

/// The query's `key=value` pairs, percent-decoded (`+` is a space).
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    let decode = |text: &str| {
        let spaced = text.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced)
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (decode(key), decode(value)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// No route for the request: 404, or 405 with the methods the path takes.
fn no_route(method: &Method, path: &str, refused: routes::NoRoute) -> Response {
    let (status, message) = match &refused {
        routes::NoRoute::NotFound => (
            StatusCode::NOT_FOUND,
            format!("no route {method} {path} (GET /v1/openapi.json lists them)"),
        ),
        routes::NoRoute::Method(allowed) => (
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "{path} takes {}, not {method}",
                allowed
                    .iter()
                    .map(Method::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        routes::NoRoute::BadEncoding => (
            StatusCode::BAD_REQUEST,
            format!("{path}: a path segment is not percent-encoded UTF-8"),
        ),
    };
    let body = serde_json::json!({
        "code": "INVALID_ARGUMENT",
        "reason": crate::error::Reason::InvalidArgument.as_str(),
        "message": message,
        "metadata": {},
    });
    let mut response = json_response(status, &body);
    if let routes::NoRoute::Method(allowed) = refused {
        let allow = allowed
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if let Ok(value) = HeaderValue::from_str(&allow) {
            response.headers_mut().insert(http::header::ALLOW, value);
        }
    }
    response
}
