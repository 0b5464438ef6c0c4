//! Errors as the gateway answers them: `{code, reason, message, metadata}` with the HTTP
//! status that matches the gRPC code (SPEC §3.2 gives both for every reason).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::error::{ApiError, REASON_HEADER};

/// The HTTP status of a gRPC code (the mapping of `google.rpc.Code`).
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `INVALID_ARGUMENT`, as the proto names a code.
pub fn code_name(code: Code) -> String {
    format!("{code:?}")
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let gap = (i > 0 && c.is_ascii_uppercase()).then_some('_');
            gap.into_iter()
                .chain(std::iter::once(c.to_ascii_uppercase()))
        })
        .collect()
}

/// The JSON body of an error, and its HTTP status.
pub fn body_of(status: &Status) -> (StatusCode, serde_json::Value) {
    let reason = status
        .metadata()
        .get(REASON_HEADER)
        .and_then(|r| r.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            status
                .get_error_details()
                .error_info()
                .map(|i| i.reason.clone())
        })
        .unwrap_or_default();
    let metadata = status
        .get_error_details()
        .error_info()
        .map(|info| info.metadata.clone())
        .unwrap_or_default();
    let body = json!({
        "code": code_name(status.code()),
        "reason": reason,
        "message": status.message(),
        "metadata": metadata,
    });
    (http_status(status.code()), body)
}

/// A status of the gateway's own (a body too large), with its reason as the handlers give it.
pub fn status(code: Code, reason: crate::error::Reason, message: String) -> Status {
    let details = tonic_types::ErrorDetails::with_error_info(
        reason.as_str(),
        crate::error::ERROR_DOMAIN,
        std::collections::HashMap::<String, String>::new(),
    );
    let mut status = Status::with_error_details(code, message, details);
    status.metadata_mut().insert(
        REASON_HEADER,
        tonic::metadata::MetadataValue::from_static(reason.as_str()),
    );
    status
}

/// An error answered as JSON.
pub struct Failure(pub Status);

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure(status)
    }
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Self {
        Failure(error.into())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, body) = body_of(&self.0);
        let mut response = super::json_response(status, &body);
        let retry = self
            .0
            .get_error_details()
            .retry_info()
            .and_then(|r| r.retry_delay);
        if let Some(delay) = retry {
            let seconds = delay.as_secs_f64().ceil().max(1.0) as u64;
            if let Ok(value) = http::HeaderValue::from_str(&seconds.to_string()) {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, value);
            }
        }
        if let Some(reason) = self.0.metadata().get(REASON_HEADER) {
            if let Ok(value) = http::HeaderValue::from_bytes(reason.as_bytes()) {
                response.headers_mut().insert(REASON_HEADER, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_the_proto_names_them() {
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
        assert_eq!(code_name(Code::DataLoss), "DATA_LOSS");
    }

    #[test]
    fn an_api_error_keeps_its_reason_and_metadata() {
        let error = ApiError::from(crate::lease::Rejection::Compacted { oldest: 41 });
        let (status, body) = body_of(&error.into());
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["code"], "OUT_OF_RANGE");
        assert_eq!(body["reason"], "compacted");
        assert_eq!(body["metadata"]["oldest_revision"], "41");
    }
}
