use super::*;
use crate::lease::Mode;

/// One error of each kind, with the reason and code it must map to.
fn samples() -> Vec<(ApiError, &'static str, Code)> {
    vec![
        (
            ApiError::MemberExists("node 2 is already a voter".into()),
            "already_exists",
            Code::AlreadyExists,
        ),
        (
            ApiError::invalid("resource", "empty"),
            "invalid_argument",
            Code::InvalidArgument,
        ),
        (
            Rejection::InvalidMode { mode: Mode::Read }.into(),
            "invalid_mode",
            Code::InvalidArgument,
        ),
        (
            Rejection::TtlOutOfRange {
                ttl_ms: 0,
                min_ms: 1000,
                max_ms: 2000,
            }
            .into(),
            "ttl_out_of_range",
            Code::OutOfRange,
        ),
        (
            Rejection::LifetimeExceeded { max_lifetime_ms: 1 }.into(),
            "lifetime_exceeded",
            Code::FailedPrecondition,
        ),
        (
            Rejection::InsufficientPermissions("x".into()).into(),
            "insufficient_permissions",
            Code::PermissionDenied,
        ),
        (
            Rejection::LeaseNotFound(String::new()).into(),
            "lease_not_found",
            Code::NotFound,
        ),
        (
            Rejection::StaleFencingToken {
                expected: 8,
                got: 7,
            }
            .into(),
            "stale_fencing_token",
            Code::FailedPrecondition,
        ),
        (
            Rejection::LeaseExpired.into(),
            "lease_expired",
            Code::FailedPrecondition,
        ),
        (
            Rejection::AlreadyHeld {
                mode: Mode::Exclusive,
                units: 0,
            }
            .into(),
            "already_held",
            Code::FailedPrecondition,
        ),
        (
            Rejection::ResourceNotFound("r".into()).into(),
            "resource_not_found",
            Code::NotFound,
        ),
        (
            Rejection::AlreadyExists("r".into()).into(),
            "already_exists",
            Code::AlreadyExists,
        ),
        (
            Rejection::NotTransferable("r".into()).into(),
            "not_transferable",
            Code::FailedPrecondition,
        ),
        (
            Rejection::Compacted { oldest: 9 }.into(),
            "compacted",
            Code::OutOfRange,
        ),
        (
            ApiError::Unauthenticated("unknown token".into()),
            "unauthenticated",
            Code::Unauthenticated,
        ),
        (
            ApiError::Unavailable("no leader".into()),
            "unavailable",
            Code::Unavailable,
        ),
        (ApiError::Internal("bug".into()), "internal", Code::Internal),
        (
            ApiError::NoOwner("nobody holds r".into()),
            "no_owner",
            Code::FailedPrecondition,
        ),
        (
            ApiError::OwnerUnavailable("no inbox".into()),
            "owner_unavailable",
            Code::Unavailable,
        ),
        (
            ApiError::OwnerTimeout("no answer".into()),
            "owner_timeout",
            Code::DeadlineExceeded,
        ),
        (
            ApiError::ReplyTooLarge {
                bytes: 2 << 20,
                limit: 1 << 20,
            },
            "reply_too_large",
            Code::ResourceExhausted,
        ),
        (
            ApiError::ConfigMismatch {
                detail: "differs".into(),
                ours: "00".into(),
            },
            "config_mismatch",
            Code::FailedPrecondition,
        ),
        (
            ApiError::RulesNotReached("needs 2".into()),
            "rules_not_reached",
            Code::FailedPrecondition,
        ),
        (
            ApiError::Limit {
                cap: crate::limits::Cap::InFlight,
                detail: "busy".into(),
            },
            "too_many_requests",
            Code::ResourceExhausted,
        ),
        (
            ApiError::Limit {
                cap: crate::limits::Cap::Streams,
                detail: "busy".into(),
            },
            "too_many_streams",
            Code::ResourceExhausted,
        ),
        (
            ApiError::Limit {
                cap: crate::limits::Cap::SlowWatcher,
                detail: "took nothing".into(),
            },
            "slow_watcher",
            Code::ResourceExhausted,
        ),
        (
            Rejection::WaitingRoomFull { max_waiters: 1 }.into(),
            "waiting_room_full",
            Code::ResourceExhausted,
        ),
        (
            Rejection::ResourceBooked { start_wall_ms: 1 }.into(),
            "resource_booked",
            Code::FailedPrecondition,
        ),
        (
            Rejection::BookingOverlaps {
                holder: "h".into(),
                start_wall_ms: 1,
            }
            .into(),
            "resource_booked",
            Code::FailedPrecondition,
        ),
        (
            Rejection::HeldIntoWindow { holder: "h".into() }.into(),
            "resource_unavailable",
            Code::FailedPrecondition,
        ),
        (
            Rejection::BookingsFull { max: 1 }.into(),
            "resource_exhausted",
            Code::ResourceExhausted,
        ),
        (
            Rejection::QuotaExceeded {
                quota: "leases".into(),
                limit: 1,
                principal: "p".into(),
            }
            .into(),
            "resource_exhausted",
            Code::ResourceExhausted,
        ),
        (
            Rejection::BookingNotFound.into(),
            "booking_not_found",
            Code::NotFound,
        ),
        (
            Rejection::SessionNotFound("ses_9".into()).into(),
            "session_not_found",
            Code::NotFound,
        ),
        (
            Rejection::SessionFull { max: 10_000 }.into(),
            "resource_exhausted",
            Code::ResourceExhausted,
        ),
        (
            Rejection::NotBookable("r".into()).into(),
            "not_bookable",
            Code::FailedPrecondition,
        ),
        (
            ApiError::Busy("the leader's queue is full".into()),
            "unavailable",
            Code::Unavailable,
        ),
    ]
}

#[test]
fn every_error_maps_to_its_spec_reason_and_code() {
    for (error, reason, code) in samples() {
        let status = Status::from(error.clone());
        assert_eq!(status.code(), code, "{error:?}");
        assert_eq!(
            status
                .metadata()
                .get(REASON_HEADER)
                .and_then(|v| v.to_str().ok()),
            Some(reason)
        );
        let info = status.get_details_error_info().expect("ErrorInfo detail");
        assert_eq!(info.reason, reason);
        assert_eq!(info.domain, ERROR_DOMAIN);
    }
}

/// The rows of one reasons table of `docs/spec.md` (the section starting at `heading`):
/// reason → the second column.
fn spec_table(heading: &str) -> std::collections::BTreeMap<String, String> {
    spec_columns(heading, 2)
}

/// The rows of one reasons table of `docs/spec.md`: reason → the column `column`.
fn spec_columns(heading: &str, column: usize) -> std::collections::BTreeMap<String, String> {
    let spec = include_str!("../../../docs/spec.md");
    let section = spec
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/spec.md has no {heading}"))
        .1;
    let section = section.split("\n### ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let reason = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            if !reason.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                return None; // the header row
            }
            Some((reason.to_string(), cells.get(column)?.to_string()))
        })
        .collect()
}

use crate::gateway::error::code_name;

#[test]
fn the_spec_lists_every_reason_there_is_and_no_other() {
    let errors = spec_table("### 3.2 Reasons");
    let answers = spec_table("### 3.4 Acquire outcomes that are not errors");
    let listed: std::collections::BTreeSet<&str> = errors
        .keys()
        .chain(answers.keys())
        .map(String::as_str)
        .collect();
    let known: std::collections::BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        listed, known,
        "docs/spec.md §3.2 and §3.4 against Reason::ALL"
    );
    for refusal in [
        crate::lease::Refusal::ResourceUnavailable,
        crate::lease::Refusal::InsufficientUnits,
        crate::lease::Refusal::LockDelay,
        crate::lease::Refusal::ResourceBooked { start_wall_ms: 1 },
        crate::lease::Refusal::WaitTimeout,
        crate::lease::Refusal::WaitCancelled,
    ] {
        let reason = refusal.reason();
        assert!(
            answers.contains_key(reason.as_str()),
            "{reason} not in §3.4"
        );
    }
}

#[test]
fn every_error_has_the_code_the_spec_gives_its_reason() {
    let errors = spec_table("### 3.2 Reasons");
    let samples = samples();
    for (error, reason, code) in &samples {
        let listed = errors
            .get(*reason)
            .unwrap_or_else(|| panic!("{reason} ({error:?}) is not in docs/spec.md §3.2"));
        assert_eq!(listed, &code_name(*code), "the code of {reason}");
    }
    for reason in errors.keys() {
        assert!(
            samples.iter().any(|(_, r, _)| r == reason),
            "no error of this table maps to {reason}"
        );
    }
}

#[test]
fn every_error_has_the_http_status_the_spec_gives_its_reason() {
    let statuses = spec_columns("### 3.2 Reasons", 3);
    for (error, reason, code) in &samples() {
        let listed = &statuses[*reason];
        let gateway = crate::gateway::error::http_status(*code);
        assert_eq!(
            listed,
            gateway.as_str(),
            "the HTTP status of {reason} ({error:?})"
        );
        let (status, body) = crate::gateway::error::body_of(&Status::from(error.clone()));
        assert_eq!(status, gateway);
        assert_eq!(body["reason"], *reason, "{error:?}");
        assert_eq!(body["code"], code_name(*code).as_str(), "{error:?}");
    }
}

#[test]
fn stale_token_message_names_expected_and_got() {
    let status = Status::from(ApiError::from(Rejection::StaleFencingToken {
        expected: 8,
        got: 7,
    }));
    assert_eq!(status.message(), "stale fencing token (expected 8, got 7)");
}

/// Times in messages are in the units people write: spans as `1day`, instants as the
/// RFC 3339 that `cancel-booking --start` takes; a ttl names the bound it missed.
#[test]
fn messages_give_times_in_human_units() {
    let message = |rejection: Rejection| {
        Status::from(ApiError::from(rejection))
            .message()
            .to_string()
    };
    let out_of_range = |ttl_ms, max_ms| {
        message(Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: 1_000,
            max_ms,
        })
    };
    const DAY: u64 = 86_400_000;
    assert_eq!(
        out_of_range(10, DAY),
        "ttl 10ms is shorter than the minimum ttl, 1s"
    );
    assert_eq!(
        out_of_range(2 * DAY, DAY),
        "ttl 2days is longer than this resource allows, 1day (its policy's max_ttl, or max_lifetime if shorter)"
    );
    assert_eq!(
        out_of_range(100 * DAY, 90 * DAY),
        "ttl 100days is longer than any policy allows, 90days"
    );
    assert_eq!(
        message(Rejection::BookingOverlaps {
            holder: "alice".into(),
            start_wall_ms: 1_796_000_000_123,
        }),
        "booking overlaps the booking of alice starting at 2026-11-30T00:53:20.123Z"
    );
    assert_eq!(
        message(Rejection::LifetimeExceeded {
            max_lifetime_ms: 5_400_000
        }),
        "renewal would pass the lease's max_lifetime (1h 30m from acquisition)"
    );
}
