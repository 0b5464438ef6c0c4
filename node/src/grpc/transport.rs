//! One response layer for every service: it adds the `tenure-leader` header, and it gives
//! tonic's own transport refusals the codes SPEC §3 promises — a message over the size limit
//! is RESOURCE_EXHAUSTED (tonic says OUT_OF_RANGE) and an undecodable message (bad UTF-8, a
//! broken field) is INVALID_ARGUMENT (tonic says INTERNAL, which we keep for our bugs) — with
//! the reason where every other error carries it: a `google.rpc.ErrorInfo` detail and the
//! `tenure-reason` trailer.

use http::header::HeaderValue;
use http::HeaderMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use tenure_proto::contract::Reason;
pub use tenure_proto::contract::LEADER_HEADER;

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
        "11" if message.contains("message length too large") => {
            Some(("8", Code::ResourceExhausted, Reason::ResourceExhausted))
        }
        "13" if message.starts_with("failed to decode Protobuf message") => {
            Some(("3", Code::InvalidArgument, Reason::InvalidArgument))
        }
        _ => None,
    };
    if let Some((code_value, code, reason)) = rewrite {
        headers.insert("grpc-status", HeaderValue::from_static(code_value));
        headers.insert(
            crate::error::REASON_HEADER,
            HeaderValue::from_static(reason.as_str()),
        );
        // The ErrorInfo detail, encoded by tonic itself; grpc-message stays as tonic wrote it.
        let details = ErrorDetails::with_error_info(
            reason.as_str(),
            crate::error::ERROR_DOMAIN,
            std::collections::HashMap::new(),
        );
        let mut rich = HeaderMap::new();
        if Status::with_error_details(code, message, details)
            .add_header(&mut rich)
            .is_ok()
        {
            if let Some(value) = rich.remove(GRPC_STATUS_DETAILS) {
                headers.insert(GRPC_STATUS_DETAILS, value);
            }
        }
    }
}

const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";

/// `ID=HOST:PORT` of the leader as this node knows it.
pub fn leader_header(leader: Option<(u64, String)>) -> Option<HeaderValue> {
    let (id, addr) = leader?;
    HeaderValue::from_str(&format!("{id}={addr}")).ok()
}
