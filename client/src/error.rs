//! Client errors: a gRPC status with Tenure's reason, or a local problem.

use tonic::Code;
use tonic_types::StatusExt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster answered with an error; `reason` is the SPEC §3 reason.
    #[error("{reason}: {message}")]
    Status {
        code: Code,
        reason: String,
        message: String,
    },
    /// A bad endpoint or argument on this side.
    #[error("{0}")]
    Local(String),
}

impl Error {
    /// The machine-readable reason (`stale_fencing_token`, `unavailable`, …).
    pub fn reason(&self) -> &str {
        match self {
            Error::Status { reason, .. } => reason,
            Error::Local(_) => "local",
        }
    }

    /// Whether retrying the same request (same `request_id`) elsewhere may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Status { code, reason, .. }
            if *code == Code::Unavailable || reason == "unavailable" || (*code == Code::Unknown && reason.is_empty()))
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
                    .get("tenure-reason")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| match status.code() {
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
                    "unavailable".into()
                }
                Code::ResourceExhausted => "resource_exhausted".into(),
                _ => String::new(),
            });
        Error::Status {
            code: status.code(),
            reason,
            message: status.message().to_string(),
        }
    }
}
