//! The HTTP/JSON gateway (SPEC §2.7), on `--http-listen`: every unary `tenure.v1.Leases` and
//! `Cluster` call as a resource-oriented route ([`routes`]), JSON in the proto3 mapping from
//! the proto descriptors ([`json`]), `Watch` as Server-Sent Events ([`sse`]), and the OpenAPI
//! document of the same table at `/v1/openapi.json` ([`openapi`]); and the web console, a
//! page that calls these routes, at `/` ([`console`]).
//!
//! A call passes the gate's own admission first, from its headers alone (the bearer token,
//! then the caps on calls in flight), before a byte of its body is read; then its JSON becomes
//! the call's message and the gRPC handler itself answers it ([`call`]): no rule of the API has
//! a second implementation. Errors are `{code, reason, message, metadata}` with the HTTP
//! status of the gRPC code ([`error`]).

pub mod call;
pub mod console;
pub mod error;
pub mod json;
pub mod openapi;
pub mod routes;
pub mod serve;
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

/// The largest request body the gateway reads: room for the largest call (a `Forward` of a
/// 1 MiB payload, base64) and not much more, since JSON takes many times its size in memory
/// while it is decoded.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// A request's body must arrive within this once its head did.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Bytes of JSON being decoded at once, node-wide: a request waits for its share.
pub const DECODING_BYTES: usize = 16 * 1024 * 1024;

/// The node-wide budget of [`DECODING_BYTES`].
fn decoding() -> &'static tokio::sync::Semaphore {
    static BUDGET: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    BUDGET.get_or_init(|| tokio::sync::Semaphore::new(DECODING_BYTES))
}

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
    let openapi: Arc<str> = openapi::document().to_string().into();
    axum::Router::new().fallback(move |request: http::Request<Body>| {
        let (node, openapi) = (node.clone(), openapi.clone());
        async move {
            let path = request.uri().path();
            let response = if console::is_console(path) {
                console::serve(request.method(), path)
            } else if path == "/v1/openapi.json" {
                match request.method() == Method::GET {
                    true => (
                        [(http::header::CONTENT_TYPE, "application/json")],
                        openapi.to_string(),
                    )
                        .into_response(),
                    false => no_route(
                        request.method(),
                        "/v1/openapi.json",
                        routes::NoRoute::Method(vec![Method::GET]),
                    ),
                }
            } else {
                return guarded(handle(node, request).await);
            };
            // These answers never read a body.
            guarded(match announces_body(request.headers()) {
                true => closing(response),
                false => response,
            })
        }
    })
}

/// What no API answer may be taken for: a page to render, or something to sniff or frame.
pub const API_CONTENT_SECURITY_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

/// `response` with `nosniff` and, unless it set its own (the console's), a policy that lets
/// a browser render nothing from it.
fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers
        .entry(http::header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(API_CONTENT_SECURITY_POLICY));
    response
}

/// Serves the gateway on `listener` until `stop` (over TLS with the node's certificate when
/// TLS is on), with the gRPC port's protections ([`serve`]).
pub async fn serve(node: Arc<Node>, listener: TcpListener, stop: watch::Receiver<bool>) {
    serve::serve(node, listener, stop).await;
}

/// An `invalid_argument` refusal with its own HTTP status (a request the routes cannot take).
fn refused(status: StatusCode, code: &str, message: String) -> Response {
    let reason = crate::error::Reason::InvalidArgument.as_str();
    let body = serde_json::json!({
        "code": code,
        "reason": reason,
        "message": message,
        "metadata": {},
    });
    let mut response = json_response(status, &body);
    response.headers_mut().insert(
        crate::error::REASON_HEADER,
        HeaderValue::from_static(reason),
    );
    response
}

/// Refuses what a web page could send on a user's behalf: a cross-site request, a body that
/// is not JSON (a form or plain text needs no preflight), and, with auth off, a `Host` that is
/// a domain name: a page of another site whose name was rebound to this node's address
/// (DNS rebinding) calls with its own name, never with an address.
fn browser_check(node: &Node, parts: &http::request::Parts) -> Result<(), Response> {
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let forbidden = |message: String| {
        Err(Failure::from(ApiError::from(
            crate::lease::Rejection::InsufficientPermissions(message),
        ))
        .into_response())
    };
    if header("sec-fetch-site") == Some("cross-site") {
        return forbidden("cross-site calls are refused".into());
    }
    if let (Some(origin), Some(host)) = (header("origin"), header("host")) {
        let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if authority != host {
            return forbidden(format!("calls from the origin {origin} are refused"));
        }
    }
    if !node.auth().is_on() && !header("host").is_some_and(is_address) {
        return forbidden(
            "with auth off the gateway answers only calls addressed to an IP address or \
             localhost"
                .into(),
        );
    }
    let has_body = !matches!(parts.method, Method::GET | Method::DELETE | Method::HEAD);
    let json = header("content-type").is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if has_body && !json {
        return Err(refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "INVALID_ARGUMENT",
            format!(
                "{} takes a body of content-type application/json",
                parts.method
            ),
        ));
    }
    Ok(())
}

/// One API call: admitted from its headers, then its body read, transcoded and answered.
async fn handle(node: Arc<Node>, request: http::Request<Body>) -> Response {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    // An answer given before a body the request announced is read ends the connection, and
    // says so: a client must not send its next call on it.
    let body_pending = announces_body(&parts.headers);
    let unread = |response: Response| match body_pending {
        true => closing(response),
        false => response,
    };
    let found = match routes::find(&parts.method, parts.uri.path()) {
        Ok(found) => found,
        Err(refused) => return unread(no_route(&parts.method, parts.uri.path(), refused)),
    };
    let route = found.route;
    let method = format!("/{}/{} (http)", route.service, route.rpc);
    let span = tracing::info_span!("rpc", method = %method, request_id = tracing::field::Empty);
    let histogram = node
        .rpc_latency
        .get_or_create_owned(&crate::metrics::RpcLabels { method });
    if let Err(refusal) = browser_check(&node, &parts) {
        return unread(refusal);
    }
    // The gate's admission, from the headers alone: the body is not read for a caller it
    // refuses.
    let in_flight =
        match crate::grpc::gate::admit_client(&node, &parts.headers, &mut parts.extensions) {
            Ok(in_flight) => in_flight,
            Err(refused) => return unread(refusal(&node, refused, &parts.extensions)),
        };
    // A caller the gate knows: its connection is held to the idle time, not the greeting's.
    if let Some(on) = parts.extensions.get::<serve::OnConnection>() {
        on.0.prove();
    }
    let answered = async {
        let body = match read_body(&parts.headers, body).await {
            Ok(body) => body,
            Err(failure) => return closing(failure.into_response()),
        };
        let Some((input, output)) = json::messages(route.service, route.rpc) else {
            return Failure(tonic::Status::internal("a route without its messages"))
                .into_response();
        };
        let query = match query_pairs(&parts.method, parts.uri.query()) {
            Ok(query) => query,
            Err(failure) => return failure.into_response(),
        };
        let encoded = {
            // A share of the decoding budget while the JSON is in memory twice.
            let _share = decoding()
                .acquire_many(body.len().clamp(1, DECODING_BYTES) as u32)
                .await;
            json::request(&input, &body, &query, &found.fields)
        };
        let encoded = match encoded {
            Ok(encoded) => encoded,
            Err(bad) => {
                return Failure::from(ApiError::invalid(&bad.field, bad.to_string()))
                    .into_response()
            }
        };
        if route.rpc == routes::WATCH {
            let last_event_id = match parts.headers.get("last-event-id").map(|v| v.to_str()) {
                None => None,
                Some(Ok(id)) => Some(id.to_owned()),
                Some(Err(_)) => {
                    return Failure::from(ApiError::invalid(
                        "Last-Event-ID",
                        "not a revision (not ASCII)",
                    ))
                    .into_response()
                }
            };
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

/// A caller the gate refused, answered as the gRPC gate would, in JSON; a refusal for its
/// credentials spends a strike of its connection.
fn refusal(node: &Node, refused: ApiError, extensions: &http::Extensions) -> Response {
    let credentials = matches!(
        refused.reason_and_code().0,
        crate::error::Reason::Unauthenticated | crate::error::Reason::InsufficientPermissions
    );
    if let (true, Some(on)) = (credentials, extensions.get::<serve::OnConnection>()) {
        crate::grpc::gate::strike(node, &on.0, "calls refused for their credentials");
    }
    let response = Failure::from(refused).into_response();
    node.refusals.count(response.headers());
    response
}

/// Whether a `Host` value names an address (an IP address or `localhost`, with or without a
/// port), not a domain.
pub fn is_address(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(name, _)| name),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// Whether the request says a body follows its head.
fn announces_body(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::TRANSFER_ENCODING)
        || headers
            .get(http::header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0")
}

/// `response`, with the connection closed after it.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

/// Refuses a body too large for [`MAX_BODY_BYTES`].
fn too_large() -> Failure {
    Failure(error::status(
        tonic::Code::ResourceExhausted,
        crate::error::Reason::ResourceExhausted,
        format!("the body exceeds the {MAX_BODY_BYTES}-byte limit"),
    ))
}

/// Reads at most [`MAX_BODY_BYTES`] of the body, within [`BODY_TIMEOUT`]; a body that says
/// it is larger is refused unread.
async fn read_body(headers: &http::HeaderMap, body: Body) -> Result<Bytes, Failure> {
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    let Ok(read) = tokio::time::timeout(BODY_TIMEOUT, limited.collect()).await else {
        return Err(Failure(error::status(
            tonic::Code::DeadlineExceeded,
            crate::error::Reason::InvalidArgument,
            format!("the body did not arrive within {BODY_TIMEOUT:?}"),
        )));
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(Failure::from(ApiError::invalid(
            "",
            format!("the body could not be read: {e}"),
        ))),
    }
}

/// The query's `key=value` pairs, percent-decoded (`+` is a space): for `GET` and `DELETE`
/// only (the others take a body).
fn query_pairs(method: &Method, query: Option<&str>) -> Result<Vec<(String, String)>, Failure> {
    let query = query.unwrap_or_default();
    if query.is_empty() {
        return Ok(Vec::new());
    }
    if !matches!(*method, Method::GET | Method::DELETE) {
        return Err(Failure::from(ApiError::invalid(
            "",
            format!("{method} takes its fields in a JSON body, not the query"),
        )));
    }
    let decode = |text: &str| {
        let spaced = text.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced)
            .decode_utf8()
            .map(|t| t.into_owned())
            .map_err(|_| {
                Failure::from(ApiError::invalid(
                    "",
                    "the query is not percent-encoded UTF-8",
                ))
            })
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => Ok((decode(key)?, decode(value)?)),
            None => Ok((decode(pair)?, String::new())),
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
    let mut response = self::refused(status, "INVALID_ARGUMENT", message);
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

#[cfg(test)]
mod tests {
    use super::is_address;

    #[test]
    fn a_host_is_an_address_only_when_it_is_an_ip_or_localhost() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:8101",
            "10.1.2.3:80",
            "[::1]:8101",
            "[fe80::1]",
            "localhost",
            "LOCALHOST:8101",
        ] {
            assert!(is_address(host), "{host}");
        }
        for host in [
            "tenure.example",
            "tenure.example:8101",
            "localhost.attacker.example",
            "127.0.0.1.nip.io:8101",
            "",
            "[::1",
        ] {
            assert!(!is_address(host), "{host}");
        }
    }
}
