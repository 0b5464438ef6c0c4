//! What the state machine refuses: [`Rejection`], each with its SPEC §3 reason and a message
//! for people.

use serde::{Deserialize, Serialize};
use tenure_proto::contract::Reason;

use super::types::Mode;

/// A command the state machine refused; each maps to one SPEC §3 reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    #[error("invalid {field}: {problem}")]
    InvalidArgument { field: String, problem: String },
    #[error("mode {mode:?} is not allowed by the resource's policy")]
    InvalidMode { mode: Mode },
    #[error("{}", ttl_out_of_range(*ttl_ms, *min_ms, *max_ms))]
    TtlOutOfRange {
        ttl_ms: u64,
        min_ms: u64,
        max_ms: u64,
    },
    #[error("renewal would pass the lease's max_lifetime ({} from acquisition)", span(*max_lifetime_ms))]
    LifetimeExceeded { max_lifetime_ms: u64 },
    #[error("{0}")]
    InsufficientPermissions(String),
    #[error("lease not found{0}")]
    LeaseNotFound(String),
    #[error("stale fencing token (expected {expected}, got {got})")]
    StaleFencingToken { expected: u64, got: u64 },
    #[error("lease expired: it is past its expiry and renewal grace, or was reclaimed")]
    LeaseExpired,
    #[error("holder already holds this resource in mode {mode:?} with {units} units")]
    AlreadyHeld { mode: Mode, units: u64 },
    #[error("resource {0} is not registered (this cluster requires registration)")]
    ResourceNotFound(String),
    #[error("resource {0} already exists")]
    AlreadyExists(String),
    #[error("the policy of resource {0} does not allow transfers")]
    NotTransferable(String),
    #[error("history before revision {oldest} is no longer retained")]
    Compacted { oldest: u64 },
    #[error("the waiting room is full ({max_waiters} waiters)")]
    WaitingRoomFull { max_waiters: u32 },
    #[error("the lease would extend into another holder's booking starting at {}", wall(*start_wall_ms))]
    ResourceBooked { start_wall_ms: u64 },
    #[error("booking overlaps the booking of {holder} starting at {}", wall(*start_wall_ms))]
    BookingOverlaps { holder: String, start_wall_ms: u64 },
    #[error("holder {holder} holds the resource into the window")]
    HeldIntoWindow { holder: String },
    #[error("the resource already has {max} bookings")]
    BookingsFull { max: usize },
    #[error("booking not found")]
    BookingNotFound,
    #[error("resource {0} may not be booked (its policy's bookable is off; ad-hoc resources only with tenured --ad-hoc-bookable)")]
    NotBookable(String),
    #[error("principal {principal} is at its {quota} quota ({limit})")]
    QuotaExceeded {
        quota: String,
        limit: u64,
        principal: String,
    },
    #[error("session not found: {0}")]
    SessionNotFound(String),
    #[error("the session already carries {max} leases and waits, the most one session may")]
    SessionFull { max: u64 },
}

/// A span of lease time for people: `1h 30m`, `2days`; from 30 days on in days (`90days`),
/// where humantime would count months of 30.44 days.
fn span(ms: u64) -> String {
    const DAY_MS: u64 = 86_400_000;
    let human = |ms| humantime::format_duration(std::time::Duration::from_millis(ms));
    match (ms / DAY_MS, ms % DAY_MS) {
        (days @ 30.., 0) => format!("{days}days"),
        (days @ 30.., rest) => format!("{days}days {}", human(rest)),
        _ => human(ms).to_string(),
    }
}

/// A wall-clock instant as `cancel-booking --start` takes it: RFC 3339, UTC, milliseconds.
fn wall(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// Which bound a ttl missed, in the units a person wrote it in: the minimum, or the most
/// this resource's policy allows (never more than the ceiling of every policy).
fn ttl_out_of_range(ttl_ms: u64, min_ms: u64, max_ms: u64) -> String {
    let ttl = span(ttl_ms);
    if ttl_ms < min_ms {
        format!(
            "ttl {ttl} is shorter than the minimum ttl, {}",
            span(min_ms)
        )
    } else if max_ms >= super::policy::MAX_TTL_CEILING_MS {
        format!(
            "ttl {ttl} is longer than any policy allows, {}",
            span(max_ms)
        )
    } else {
        format!(
            "ttl {ttl} is longer than this resource allows, {} (its policy's max_ttl, or max_lifetime if shorter)",
            span(max_ms)
        )
    }
}

impl Rejection {
    pub fn invalid(field: &str, problem: impl Into<String>) -> Self {
        Rejection::InvalidArgument {
            field: field.to_string(),
            problem: problem.into(),
        }
    }

    /// A `request_id` the principal already used with another request (SPEC §4.18).
    pub fn request_id_reused() -> Self {
        Rejection::invalid("request_id", "already used with a different request")
    }

    /// The SPEC §3 reason.
    pub fn reason(&self) -> Reason {
        match self {
            Rejection::InvalidArgument { .. } => Reason::InvalidArgument,
            Rejection::InvalidMode { .. } => Reason::InvalidMode,
            Rejection::TtlOutOfRange { .. } => Reason::TtlOutOfRange,
            Rejection::LifetimeExceeded { .. } => Reason::LifetimeExceeded,
            Rejection::InsufficientPermissions(_) => Reason::InsufficientPermissions,
            Rejection::LeaseNotFound(_) => Reason::LeaseNotFound,
            Rejection::StaleFencingToken { .. } => Reason::StaleFencingToken,
            Rejection::LeaseExpired => Reason::LeaseExpired,
            Rejection::AlreadyHeld { .. } => Reason::AlreadyHeld,
            Rejection::ResourceNotFound(_) => Reason::ResourceNotFound,
            Rejection::AlreadyExists(_) => Reason::AlreadyExists,
            Rejection::NotTransferable(_) => Reason::NotTransferable,
            Rejection::Compacted { .. } => Reason::Compacted,
            Rejection::WaitingRoomFull { .. } => Reason::WaitingRoomFull,
            Rejection::ResourceBooked { .. } => Reason::ResourceBooked,
            Rejection::BookingOverlaps { .. } => Reason::ResourceBooked,
            Rejection::BookingNotFound => Reason::BookingNotFound,
            Rejection::NotBookable(_) => Reason::NotBookable,
            Rejection::BookingsFull { .. } | Rejection::QuotaExceeded { .. } => {
                Reason::ResourceExhausted
            }
            Rejection::HeldIntoWindow { .. } => Reason::ResourceUnavailable,
            Rejection::SessionNotFound(_) => Reason::SessionNotFound,
            Rejection::SessionFull { .. } => Reason::ResourceExhausted,
        }
    }
}
