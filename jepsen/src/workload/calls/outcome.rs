//! What a call's error proves: a refusal for a quota, a definite failure, or nothing.

use tenure_client::{Error, Reason};

use crate::history::Outcome;

/// Reasons that prove a call did not take effect.
const DEFINITE_FAILURES: &[Reason] = &[
    Reason::InvalidArgument,
    Reason::InvalidMode,
    Reason::TtlOutOfRange,
    Reason::LifetimeExceeded,
    Reason::InsufficientPermissions,
    Reason::LeaseNotFound,
    Reason::StaleFencingToken,
    Reason::LeaseExpired,
    Reason::AlreadyHeld,
    Reason::NotTransferable,
    Reason::ResourceExhausted,
    Reason::WaitingRoomFull,
    // Decided on apply, and a retried acquire or close gets its first answer back. A retried
    // `RenewSession` (not exactly-once) may be told so after an earlier attempt renewed: the
    // checkers then just miss that renewal, which only makes them more lenient.
    Reason::SessionNotFound,
    // Refused before it is proposed: the cluster's rules do not have it yet (spec §4.26).
    Reason::RulesNotReached,
];

/// The quota and limit of a refusal for a quota: `resource_exhausted` with the message
/// "principal P is at its QUOTA quota (LIMIT)" (the node's `Rejection::QuotaExceeded`; the
/// client keeps the reason and the message, not the error details that carry them too).
fn quota_refusal(error: &Error) -> Option<(String, u64)> {
    let Error::Status {
        reason, message, ..
    } = error
    else {
        return None;
    };
    if Reason::ResourceExhausted != reason.as_str() {
        return None;
    }
    let (_, rest) = message.rsplit_once(" is at its ")?;
    let (quota, limit) = rest.split_once(" quota (")?;
    let limit = limit.strip_suffix(')')?.parse().ok()?;
    let named = !quota.is_empty() && quota.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    named.then(|| (quota.to_owned(), limit))
}

pub(super) fn classify(error: &Error) -> Outcome {
    if let Some((quota, limit)) = quota_refusal(error) {
        Outcome::QuotaExceeded { quota, limit }
    } else if error
        .reason()
        .is_some_and(|reason| DEFINITE_FAILURES.contains(&reason))
    {
        Outcome::Fail {
            reason: error.reason_str().to_string(),
        }
    } else {
        Outcome::Unknown {
            error: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(reason: &str, message: &str) -> Error {
        Error::Status {
            code: tonic::Code::ResourceExhausted,
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_refusal_for_a_quota_is_its_own_outcome_with_the_quota_and_its_limit() {
        let refused = status(
            "resource_exhausted",
            "principal jepsen-client is at its leases quota (6)",
        );
        assert_eq!(
            classify(&refused),
            Outcome::QuotaExceeded {
                quota: "leases".into(),
                limit: 6
            }
        );
        let waiters = status(
            "resource_exhausted",
            "principal jepsen-client is at its waiters quota (2)",
        );
        assert_eq!(quota_refusal(&waiters), Some(("waiters".into(), 2)));
    }

    #[test]
    fn other_refusals_keep_their_reason() {
        let bookings = status("resource_exhausted", "the resource already has 3 bookings");
        assert_eq!(
            classify(&bookings),
            Outcome::Fail {
                reason: "resource_exhausted".into()
            }
        );
        let busy = status(
            "too_many_requests",
            "principal p is at its leases quota (6)",
        );
        assert!(matches!(classify(&busy), Outcome::Unknown { .. }));
        assert_eq!(
            classify(&Error::Local("gave up".into())),
            Outcome::Unknown {
                error: "gave up".into()
            }
        );
    }
}
