//! Client errors: a gRPC status with Tenure's reason, or a local problem.

use tenure_proto::contract::{Reason, REASON_HEADER};
use tonic::Code;
use tonic_types::StatusExt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster answered with an error; `reason` is the SPEC §3 reason. Shown as
    /// `reason: message`, the reason once (a node's message may begin with it already).
    #[error("{reason}: {}", message.strip_prefix(reason.as_str()).and_then(|m| m.strip_prefix(": ")).unwrap_or(message))]
    Status {
        code: Code,
        reason: String,
        message: String,
    },
    /// The cluster answered without granting, and retrying cannot change that (a campaign
    /// whose wait was cancelled: `wait_cancelled`).
    #[error("not granted: {reason}")]
    NotGranted { reason: String },
    /// A bad endpoint or argument on this side.
    #[error("{0}")]
    Local(String),
}

impl Error {
    /// The machine-readable reason (`stale_fencing_token`, `unavailable`, …).
    pub fn reason(&self) -> &str {
        match self {
            Error::Status { reason, .. } | Error::NotGranted { reason } => reason,
            Error::Local(_) => "local",
        }
    }

    /// Whether retrying the same request (same `request_id`) elsewhere may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Status { code, reason, .. } if *code == Code::Unavailable || reason == "unavailable")
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        let reason = status
            .get_details_error_info()
            .map(|info| info.reason)
            .or_else(|| {
                status
                    .metadata()
                    .get(REASON_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
            // No reason from a node: the transport failed (connection lost, deadline, an h2
            // GOAWAY), and the call may or may not have taken effect.
            .unwrap_or_else(|| Reason::Unavailable.as_str().into());
        Error::Status {
            code: status.code(),
            reason,
            message: status.message().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_without_a_tenure_reason_is_a_retryable_transport_failure() {
        // e.g. an h2 GOAWAY surfaced by tonic as RESOURCE_EXHAUSTED: the call may have run.
        let error = Error::from(tonic::Status::resource_exhausted(
            "h2 protocol error: http2 error",
        ));
        assert_eq!(error.reason(), "unavailable");
        assert!(error.is_retryable());
    }

    #[test]
    fn a_tenure_reason_is_kept_and_only_unavailable_is_retried() {
        let mut status =
            tonic::Status::failed_precondition("stale fencing token (expected 8, got 7)");
        status.metadata_mut().insert(
            "tenure-reason",
            "stale_fencing_token".parse().expect("ascii"),
        );
        let error = Error::from(status);
        assert_eq!(error.reason(), "stale_fencing_token");
        assert!(!error.is_retryable());
    }

    #[test]
    fn the_reason_is_shown_once() {
        let mut status = tonic::Status::unauthenticated("unauthenticated: no token");
        status.metadata_mut().insert(
            REASON_HEADER,
            Reason::Unauthenticated.as_str().parse().expect("ascii"),
        );
        assert_eq!(Error::from(status).to_string(), "unauthenticated: no token");
        let mut status = tonic::Status::failed_precondition("lease expired");
        status.metadata_mut().insert(
            REASON_HEADER,
            Reason::LeaseExpired.as_str().parse().expect("ascii"),
        );
        assert_eq!(
            Error::from(status).to_string(),
            "lease_expired: lease expired"
        );
    }
}
