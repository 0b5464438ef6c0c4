//! One response layer for every service: it adds the `tenure-leader` header, and it gives
//! tonic's own transport refusals the codes SPEC §3 promises — a message over the size limit
//! is RESOURCE_EXHAUSTED (tonic says OUT_OF_RANGE) and an undecodable message (bad UTF-8, a
//! broken field) is INVALID_ARGUMENT (tonic says INTERNAL, which we keep for our bugs).

use http::header::HeaderValue;
use http::HeaderMap;

pub const LEADER_HEADER: &str = "tenure-leader";

fn grpc_message(headers: &HeaderMap) -> String {
    headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .replace("%20", " ")
}

/// Rewrites a trailers-only error response produced by the transport itself.
pub fn fix_transport_status(headers: &mut HeaderMap) {
    let Some(code) = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return;
    };
    let message = grpc_message(headers);
    let rewrite = match code.as_str() {
        "11" if message.contains("message length too large") => Some(("8", "resource_exhausted")),
        "13" if message.starts_with("failed to decode Protobuf message") => {
            Some(("3", "invalid_argument"))
        }
        _ => None,
    };
    if let Some((code, reason)) = rewrite {
        headers.insert("grpc-status", HeaderValue::from_static(code));
        headers.insert(
            crate::error::REASON_TRAILER,
            HeaderValue::from_static(reason),
        );
    }
}

/// `ID=HOST:PORT` of the leader as this node knows it.
pub fn leader_header(leader: Option<(u64, String)>) -> Option<HeaderValue> {
    let (id, addr) = leader?;
    HeaderValue::from_str(&format!("{id}={addr}")).ok()
}
