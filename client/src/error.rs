//! Client errors: a gRPC status with Tenure's reason, or a local problem.

use tenure_proto::contract::{Reason, REASON_HEADER};
use tonic::Code;
use tonic_types::StatusExt;

/// Why a call failed: the cluster's answer, or a problem on this side before any was sent.
///
/// Act on [`Error::reason`] (SPEC §3.2 lists every reason) and on [`Error::is_retryable`]; the
/// gRPC code and the message are for people.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster answered with an error. Shown as `reason: message`, the reason once (a
    /// node's message may begin with it already).
    #[error("{reason}: {}", message.strip_prefix(reason.as_str()).and_then(|m| m.strip_prefix(": ")).unwrap_or(message))]
    Status {
        /// The gRPC status code.
        code: Code,
        /// The reason as the node spelled it (SPEC §3.2), or `unavailable` when no node gave
        /// one: the transport failed, and the call may or may not have taken effect. Kept as
        /// text so that a reason of a newer server survives; [`Error::reason`] types it.
        reason: String,
        /// The node's explanation, for people: it names the field, the bound or the holder.
        message: String,
    },
    /// The cluster answered without granting, and retrying cannot change that (a campaign
    /// whose wait was cancelled: `wait_cancelled`).
    #[error("not granted: {reason}")]
    NotGranted {
        /// The acquire's reason, as the node spelled it.
        reason: String,
    },
    /// A bad endpoint or argument on this side; nothing was sent.
    #[error("{0}")]
    Local(String),
}

impl Error {
    /// The reason (`stale_fencing_token`, `unavailable`, …) as a [`Reason`]. `None` for a
    /// [`Error::Local`] error, and for a reason this release does not know (a newer server's):
    /// treat that as a refusal, and [`Error::reason_str`] still has it as sent.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Error::Status { reason, .. } | Error::NotGranted { reason } => reason.parse().ok(),
            Error::Local(_) => None,
        }
    }

    /// The reason as sent, known to this release or not; `local` for a [`Error::Local`] error.
    pub fn reason_str(&self) -> &str {
        match self {
            Error::Status { reason, .. } | Error::NotGranted { reason } => reason,
            Error::Local(_) => "local",
        }
    }

    /// Whether retrying the same request (same `request_id`) elsewhere may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Status { code, reason, .. } if *code == Code::Unavailable || Reason::Unavailable == reason.as_str())
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

    /// A status as a node sends it: the reason in the `tenure-reason` trailer.
    fn answered(mut status: tonic::Status, reason: &str) -> Error {
        status
            .metadata_mut()
            .insert(REASON_HEADER, reason.parse().expect("ascii"));
        Error::from(status)
    }

    #[test]
    fn a_status_without_a_tenure_reason_is_a_retryable_transport_failure() {
        // e.g. an h2 GOAWAY surfaced by tonic as RESOURCE_EXHAUSTED: the call may have run.
        let error = Error::from(tonic::Status::resource_exhausted(
            "h2 protocol error: http2 error",
        ));
        assert_eq!(error.reason(), Some(Reason::Unavailable));
        assert!(error.is_retryable());
    }

    #[test]
    fn a_tenure_reason_is_kept_and_only_unavailable_is_retried() {
        let error = answered(
            tonic::Status::failed_precondition("stale fencing token (expected 8, got 7)"),
            Reason::StaleFencingToken.as_str(),
        );
        assert_eq!(error.reason(), Some(Reason::StaleFencingToken));
        assert_eq!(error.reason_str(), "stale_fencing_token");
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_reason_of_a_newer_server_is_kept_as_sent_and_not_retried() {
        let error = answered(
            tonic::Status::failed_precondition("the moon is full"),
            "moon_full",
        );
        assert_eq!(error.reason(), None);
        assert_eq!(error.reason_str(), "moon_full");
        assert_eq!(error.to_string(), "moon_full: the moon is full");
        assert!(!error.is_retryable());
        let local = Error::Local("no endpoints given".into());
        assert_eq!((local.reason(), local.reason_str()), (None, "local"));
    }

    #[test]
    fn the_reason_is_shown_once() {
        let error = answered(
            tonic::Status::unauthenticated("unauthenticated: no token"),
            Reason::Unauthenticated.as_str(),
        );
        assert_eq!(error.to_string(), "unauthenticated: no token");
        let error = answered(
            tonic::Status::failed_precondition("lease expired"),
            Reason::LeaseExpired.as_str(),
        );
        assert_eq!(error.to_string(), "lease_expired: lease expired");
    }
}
