//! The one table that maps every error a client can see to a gRPC status with the SPEC §3
//! reason: in a `google.rpc.ErrorInfo` detail and in the `tenure-reason` trailer.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::lease::Rejection;
pub use tenure_proto::contract::{Reason, ERROR_DOMAIN, REASON_HEADER};

/// How long a caller refused for a full leader queue should wait before retrying.
pub const BUSY_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Errors of the API layer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The state machine (or its pre-check at the API) refused the command.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// No token, or one the node does not know.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// No leader or no quorum answered in time. Safe to retry with the same `request_id`.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The leader is taking no more writes for now (its queue is full): nothing was done;
    /// retry after [`BUSY_RETRY_AFTER`] with the same `request_id`.
    #[error("unavailable: {0}")]
    Busy(String),
    /// A bug. Never for bad input.
    #[error("internal error: {0}")]
    Internal(String),
    /// Forward: nobody holds the resource exclusively with a live (unexpired) lease.
    #[error("no owner: {0}")]
    NoOwner(String),
    /// Forward: no inbox of the owner took the request, or the owner rejected it every time.
    /// Nothing was processed: safe to retry.
    #[error("owner unavailable: {0}")]
    OwnerUnavailable(String),
    /// Forward: the owner took the request and did not answer in time. Its outcome is unknown;
    /// it is never sent again.
    #[error("owner timeout: {0}")]
    OwnerTimeout(String),
    /// Forward: the owner answered with more than the reply limit.
    #[error("the owner's reply of {bytes} bytes exceeds the limit of {limit} bytes")]
    ReplyTooLarge { bytes: u64, limit: usize },
    /// A node-wide cap (`crate::limits`) is reached: retry later, or on another node.
    #[error("{detail}")]
    Limit {
        cap: crate::limits::Cap,
        detail: String,
    },
    /// A peer whose configuration digest differs from this node's (`crate::agreement`):
    /// the refusal carries this node's digest back to the peer.
    #[error("{detail}")]
    ConfigMismatch { detail: String, ours: String },
    /// Cluster administration: the member or address is taken (a lease-level conflict is a
    /// [`Rejection::AlreadyExists`]).
    #[error("{0}")]
    MemberExists(String),
    /// The request needs rules the cluster has not reached (`crate::rules`): nothing was
    /// proposed.
    #[error("{0}")]
    RulesNotReached(String),
}

impl ApiError {
    /// A stream whose token a reload of the token file revoked.
    pub fn revoked() -> Self {
        ApiError::Unauthenticated("the token was revoked".into())
    }

    pub fn invalid(field: &str, problem: impl Into<String>) -> Self {
        ApiError::Rejected(Rejection::invalid(field, problem))
    }

    /// The SPEC §3 reason and the gRPC code that fits it.
    pub fn reason_and_code(&self) -> (Reason, Code) {
        match self {
            ApiError::Rejected(rejection) => {
                let code = match rejection {
                    Rejection::InvalidArgument { .. } | Rejection::InvalidMode { .. } => {
                        Code::InvalidArgument
                    }
                    Rejection::TtlOutOfRange { .. } | Rejection::Compacted { .. } => {
                        Code::OutOfRange
                    }
                    Rejection::InsufficientPermissions(_) => Code::PermissionDenied,
                    Rejection::LeaseNotFound(_)
                    | Rejection::ResourceNotFound(_)
                    | Rejection::BookingNotFound
                    | Rejection::SessionNotFound(_) => Code::NotFound,
                    Rejection::WaitingRoomFull { .. }
                    | Rejection::BookingsFull { .. }
                    | Rejection::QuotaExceeded { .. }
                    | Rejection::SessionFull { .. } => Code::ResourceExhausted,
                    Rejection::AlreadyExists(_) => Code::AlreadyExists,
                    Rejection::LifetimeExceeded { .. }
                    | Rejection::StaleFencingToken { .. }
                    | Rejection::LeaseExpired
                    | Rejection::NotTransferable(_)
                    | Rejection::NotBookable(_)
                    | Rejection::AlreadyHeld { .. }
                    | Rejection::ResourceBooked { .. }
                    | Rejection::BookingOverlaps { .. }
                    | Rejection::HeldIntoWindow { .. } => Code::FailedPrecondition,
                };
                (rejection.reason(), code)
            }
            ApiError::Unauthenticated(_) => (Reason::Unauthenticated, Code::Unauthenticated),
            ApiError::Unavailable(_) | ApiError::Busy(_) => {
                (Reason::Unavailable, Code::Unavailable)
            }
            ApiError::Internal(_) => (Reason::Internal, Code::Internal),
            ApiError::NoOwner(_) => (Reason::NoOwner, Code::FailedPrecondition),
            ApiError::OwnerUnavailable(_) => (Reason::OwnerUnavailable, Code::Unavailable),
            ApiError::OwnerTimeout(_) => (Reason::OwnerTimeout, Code::DeadlineExceeded),
            ApiError::ReplyTooLarge { .. } => (Reason::ReplyTooLarge, Code::ResourceExhausted),
            ApiError::MemberExists(_) => (Reason::AlreadyExists, Code::AlreadyExists),
            ApiError::Limit { cap, .. } => (cap.reason(), Code::ResourceExhausted),
            ApiError::ConfigMismatch { .. } => (Reason::ConfigMismatch, Code::FailedPrecondition),
            ApiError::RulesNotReached(_) => (Reason::RulesNotReached, Code::FailedPrecondition),
        }
    }
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Status {
        let (reason, code) = error.reason_and_code();
        let mut metadata = std::collections::HashMap::new();
        if let ApiError::Rejected(Rejection::Compacted { oldest }) = &error {
            // A watcher resumes from here: events before it are gone (SPEC §4.12).
            metadata.insert("oldest_revision".to_string(), oldest.to_string());
        }
        if let ApiError::Rejected(Rejection::QuotaExceeded { quota, limit, .. }) = &error {
            // Which quota, so a client can tell its own limit from a node's.
            metadata.insert("quota".to_string(), quota.clone());
            metadata.insert("limit".to_string(), limit.to_string());
        }
        if let ApiError::Busy(_) = &error {
            metadata.insert(
                "retry_after_ms".to_string(),
                BUSY_RETRY_AFTER.as_millis().to_string(),
            );
        }
        let mut details = ErrorDetails::with_error_info(reason.as_str(), ERROR_DOMAIN, metadata);
        if let ApiError::Busy(_) = &error {
            details.set_retry_info(Some(BUSY_RETRY_AFTER));
        }
        let mut status = Status::with_error_details(code, error.to_string(), details);
        status
            .metadata_mut()
            .insert(REASON_HEADER, MetadataValue::from_static(reason.as_str()));
        if let ApiError::ConfigMismatch { ours, .. } = &error {
            if let Ok(value) = ours.parse() {
                status
                    .metadata_mut()
                    .insert(crate::agreement::DIGEST_HEADER, value);
            }
        }
        status
    }
}

#[cfg(test)]
mod tests;
