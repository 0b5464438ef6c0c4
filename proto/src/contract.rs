//! What the wire says besides the messages: the reasons of SPEC §3, the names of the headers
//! that carry them, the name rule and the limits both ends of a call must agree on. Defined
//! once here, for the node, the clients and the fault harness; `docs/spec.md` lists the same
//! reasons, and a test of the node holds the two alike.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Resource, holder and principal names: at most this many bytes (spec §4.13).
pub const MAX_NAME_BYTES: usize = 128;

/// The name rule as an `invalid_argument` states it.
pub const NAME_RULE: &str = "1-128 bytes of [A-Za-z0-9_.:/-]";

/// Whether `name` is a valid resource, holder or principal name (spec §1, §4.13): 1–128 bytes
/// of `[A-Za-z0-9_.:/-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'))
}

/// How long a waiting acquire stays queued when the call does not say (spec §2.3, `Acquire`).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest payload a forward carries, and the largest reply an owner may give (spec §4.9).
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// How long a forward waits for the owner's reply when the call does not say (spec §4.9).
pub const DEFAULT_FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The `google.rpc.ErrorInfo` domain of every error a node sends.
pub const ERROR_DOMAIN: &str = "tenure.v1";

/// The trailer that repeats an error's reason, for clients that do not decode status details.
pub const REASON_HEADER: &str = "tenure-reason";

/// The reply header naming the leader's address, for clients that go to it directly.
pub const LEADER_HEADER: &str = "tenure-leader";

macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A machine-readable reason (SPEC §3): of an error (`ErrorInfo.reason` and the
        /// `tenure-reason` trailer), or of an acquire that was answered but not granted
        /// (`AcquireResponse.reason`, SPEC §3.4).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[$doc])* $variant,)*
        }

        impl Reason {
            /// Every reason, in the order of the spec's tables.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The reason as the wire spells it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)*
                }
            }
        }
    };
}

reasons! {
    /// A malformed or out-of-bounds field; the message names the field and the bound.
    InvalidArgument = "invalid_argument",
    /// A mode the resource's policy does not allow.
    InvalidMode = "invalid_mode",
    /// A ttl outside the policy's range.
    TtlOutOfRange = "ttl_out_of_range",
    /// A renew past the lease's `max_lifetime`.
    LifetimeExceeded = "lifetime_exceeded",
    /// No known token.
    Unauthenticated = "unauthenticated",
    /// A known caller that may not do this.
    InsufficientPermissions = "insufficient_permissions",
    /// An unregistered resource where registration is required.
    ResourceNotFound = "resource_not_found",
    /// No live lease matches.
    LeaseNotFound = "lease_not_found",
    /// No booking matches.
    BookingNotFound = "booking_not_found",
    /// No live session matches (it was closed, it expired, or it never existed).
    SessionNotFound = "session_not_found",
    /// Registered already, or a member with that id or address exists.
    AlreadyExists = "already_exists",
    /// The token is not the lease's current one.
    StaleFencingToken = "stale_fencing_token",
    /// The lease was reclaimed: its holder has lost it.
    LeaseExpired = "lease_expired",
    /// The policy does not allow transfers.
    NotTransferable = "not_transferable",
    /// The resource takes no bookings.
    NotBookable = "not_bookable",
    /// The holder holds the resource in another mode or with other units.
    AlreadyHeld = "already_held",
    /// Another holder's booking is in the way.
    ResourceBooked = "resource_booked",
    /// Held in a way the request cannot share (an acquire's answer; an error for a booking).
    ResourceUnavailable = "resource_unavailable",
    /// The waiting room is full.
    WaitingRoomFull = "waiting_room_full",
    /// A quota, the exactly-once table or a resource's bookings are full.
    ResourceExhausted = "resource_exhausted",
    /// Too many requests in flight on the node or of the principal.
    TooManyRequests = "too_many_requests",
    /// Too many long-lived calls open on the node.
    TooManyStreams = "too_many_streams",
    /// A watcher that took no message in time was cut off.
    SlowWatcher = "slow_watcher",
    /// The events asked for are no longer retained.
    Compacted = "compacted",
    /// `Forward`: nobody owns the resource.
    NoOwner = "no_owner",
    /// `Forward`: no inbox took the request; nothing was processed.
    OwnerUnavailable = "owner_unavailable",
    /// `Forward`: the owner did not answer in time; the outcome is unknown.
    OwnerTimeout = "owner_timeout",
    /// `Forward`: the owner's reply is too large.
    ReplyTooLarge = "reply_too_large",
    /// A peer whose configuration differs.
    ConfigMismatch = "config_mismatch",
    /// The request needs a rules version the cluster has not reached (not every member
    /// supports it yet).
    RulesNotReached = "rules_not_reached",
    /// No leader or quorum in time, or a full queue: retry with the same `request_id`.
    Unavailable = "unavailable",
    /// A bug; never bad input.
    Internal = "internal",
    /// Not granted: the unit pool cannot cover the request now.
    InsufficientUnits = "insufficient_units",
    /// Not granted: a reclaim closed the resource for its lock delay.
    LockDelay = "lock_delay",
    /// Not granted: a waiting acquire timed out.
    WaitTimeout = "wait_timeout",
    /// Not granted: a waiting acquire was cancelled.
    WaitCancelled = "wait_cancelled",
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason this release does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownReason(pub String);

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown reason {:?}", self.0)
    }
}

impl std::error::Error for UnknownReason {}

impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(s: &str) -> Result<Reason, UnknownReason> {
        Reason::ALL
            .iter()
            .copied()
            .find(|reason| reason.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Reason> for &str {
    fn eq(&self, other: &Reason) -> bool {
        *self == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_spec_charset_and_length() {
        assert!(valid_name("world/eu-1:shard_7.a"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("ünïcode"));
        assert!(valid_name(&"a".repeat(MAX_NAME_BYTES)));
        assert!(!valid_name(&"a".repeat(MAX_NAME_BYTES + 1)));
        assert_eq!(MAX_NAME_BYTES, 128);
        assert!(NAME_RULE.starts_with(&format!("1-{MAX_NAME_BYTES} bytes")));
    }

    #[test]
    fn every_reason_reads_back_from_its_name_and_names_are_distinct() {
        let mut names = std::collections::BTreeSet::new();
        for reason in Reason::ALL {
            assert_eq!(reason.as_str().parse::<Reason>(), Ok(*reason));
            assert!(names.insert(reason.as_str()), "{reason} twice");
            assert!(reason
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(
            "no_such_reason".parse::<Reason>(),
            Err(UnknownReason("no_such_reason".into()))
        );
    }
}
