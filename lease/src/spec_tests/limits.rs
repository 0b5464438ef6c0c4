//! SPEC §4.13's limits and defaults, and `CreateResource` (SPEC §2).

use super::*;
use crate::policy::{
    DAY_MS, DEFAULT_MAX_WAITERS, HOUR_MS, MAX_METADATA_BYTES, MAX_TTL_CEILING_MS, MINUTE_MS,
    MIN_TTL_MS, SECOND_MS,
};
use crate::types::LeaseStatus;

#[test]
fn s4_13_the_ad_hoc_policy_is_60s_default_ttl_24h_max_no_grace_exclusive_not_transferable() {
    let policy = Policy::ad_hoc();
    assert_eq!(
        (
            policy.default_ttl_ms,
            policy.max_ttl_ms,
            policy.renewal_grace_ms,
            policy.max_lifetime_ms
        ),
        (60 * SECOND_MS, DAY_MS, 0, 0)
    );
    assert!(!policy.transferable && policy.shared_modes.is_empty());

    let mut log = Log::new();
    let view = log.state.resource_view("adhoc");
    assert!(view.ad_hoc);
    assert_eq!(view.policy, Policy::ad_hoc());
    let a = granted(&log.acquire(ALICE, acq("adhoc", "a")));
    assert_eq!((a.lease.ttl_ms, a.lease.expires_at_ms), (60_000, 60_000));
    assert_eq!(
        rejection(&log.acquire(ALICE, shared("other", "a", Mode::Read, 0))),
        Rejection::InvalidMode { mode: Mode::Read }
    );
    assert_eq!(
        rejection(&log.transfer(ALICE, transfer_of(&a, "b", None))).reason(),
        "not_transferable"
    );
    let too_long = log.acquire(ALICE, acq_ttl("other", "a", DAY_MS + 1));
    assert_eq!(
        rejection(&too_long),
        Rejection::TtlOutOfRange {
            ttl_ms: DAY_MS + 1,
            min_ms: MIN_TTL_MS,
            max_ms: DAY_MS
        }
    );
    assert_eq!(rejection(&too_long).reason(), "ttl_out_of_range");
    granted(&log.acquire(ALICE, acq_ttl("other", "a", DAY_MS)));
    // No grace: reclaimed at expiry.
    log.elapse(60_000);
    log.tick();
    assert!(log.holders("adhoc").is_empty());
}

#[test]
fn s4_13_ad_hoc_leases_have_no_lifetime_cap() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", DAY_MS)));
    for _ in 0..3 {
        log.elapse(DAY_MS - HOUR_MS);
        lease(&log.renew(ALICE, renew_of(&a, None)));
    }
    assert!(log.now_ms() > 2 * DAY_MS);
    assert_eq!(log.holders("r"), held(&[("a", 1)]));
}

#[test]
fn s4_13_registered_defaults_are_1h_ttl_24h_max_and_60s_grace() {
    let defaults = Policy::registered();
    assert_eq!(
        (
            defaults.default_ttl_ms,
            defaults.max_ttl_ms,
            defaults.renewal_grace_ms
        ),
        (HOUR_MS, DAY_MS, MINUTE_MS)
    );
    assert_eq!(defaults.max_waiters, DEFAULT_MAX_WAITERS);
    assert_eq!(DEFAULT_MAX_WAITERS, 10_000);
    assert_eq!(defaults.max_metadata_bytes as usize, MAX_METADATA_BYTES);
    // (A CreateResource without a policy registers exactly these: the node's validation test.)
    let mut log = Log::new();
    log.register("r", defaults);
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    assert_eq!(a.lease.ttl_ms, HOUR_MS);
    log.elapse(HOUR_MS + MINUTE_MS - 1);
    log.tick();
    assert_eq!(
        log.state.resource_view("r").leases[0].status,
        LeaseStatus::Grace
    );
    log.elapse(1);
    log.tick();
    assert!(log.holders("r").is_empty());
}

#[test]
fn s4_13_the_minimum_ttl_is_one_second() {
    let mut log = Log::new();
    assert_eq!(
        rejection(&log.acquire(ALICE, acq_ttl("r", "a", 999))),
        Rejection::TtlOutOfRange {
            ttl_ms: 999,
            min_ms: 1_000,
            max_ms: DAY_MS
        }
    );
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 1_000)));
    let refusal = rejection(&log.renew(ALICE, renew_of(&a, Some(999))));
    assert_eq!(refusal.reason(), "ttl_out_of_range");
}

#[test]
fn s4_13_metadata_over_16_kib_is_refused() {
    let mut log = Log::new();
    let with_metadata = |holder: &str, value_bytes: usize| AcquireOp {
        metadata: [("k".to_string(), "v".repeat(value_bytes))].into(),
        ..acq(holder, holder)
    };
    let over = log.acquire(ALICE, with_metadata("a", MAX_METADATA_BYTES));
    assert_eq!(invalid_field(&over), "metadata");
    granted(&log.acquire(ALICE, with_metadata("b", MAX_METADATA_BYTES - 1)));
    // A policy may lower the bound.
    log.register(
        "small",
        Policy {
            max_metadata_bytes: 10,
            ..Policy::registered()
        },
    );
    let meta = |value: &str| AcquireOp {
        metadata: [("key".to_string(), value.to_string())].into(),
        ..acq("small", "a")
    };
    assert_eq!(
        invalid_field(&log.acquire(ALICE, meta("12345678"))),
        "metadata"
    );
    granted(&log.acquire(ALICE, meta("1234567")));
}

#[test]
fn s4_13_ttl_and_lifetime_are_capped_at_90_days() {
    assert_eq!(MAX_TTL_CEILING_MS, 90 * DAY_MS);
    let bad = |policy: Policy| {
        let mut log = Log::new();
        invalid_field(&log.propose(ROOT, create(Some("r"), policy)))
    };
    let base = Policy::registered();
    let over = MAX_TTL_CEILING_MS + 1;
    assert_eq!(
        bad(Policy {
            max_ttl_ms: over,
            ..base.clone()
        }),
        "policy.max_ttl"
    );
    assert_eq!(
        bad(Policy {
            max_lifetime_ms: over,
            ..base.clone()
        }),
        "policy.max_lifetime"
    );
    assert_eq!(
        bad(Policy {
            renewal_grace_ms: over,
            ..base.clone()
        }),
        "policy.renewal_grace"
    );
    assert_eq!(
        bad(Policy {
            lock_delay_ms: over,
            ..base.clone()
        }),
        "policy.lock_delay"
    );
    let mut log = Log::new();
    log.register(
        "long",
        Policy {
            max_ttl_ms: MAX_TTL_CEILING_MS,
            ..base
        },
    );
    granted(&log.acquire(ALICE, acq_ttl("long", "a", MAX_TTL_CEILING_MS)));
}

#[test]
fn s4_13_a_default_ttl_above_what_the_policy_lets_a_lease_hold_is_refused() {
    // A default ttl longer than max_lifetime would make every acquire without a ttl fail.
    let mut log = Log::new();
    let reply = log.propose(
        ROOT,
        create(
            Some("r"),
            Policy {
                max_lifetime_ms: 10 * MINUTE_MS,
                ..Policy::registered()
            },
        ),
    );
    assert_eq!(invalid_field(&reply), "policy.default_ttl");
    let reply = log.propose(
        ROOT,
        create(
            Some("r"),
            Policy {
                max_ttl_ms: 10 * MINUTE_MS,
                ..Policy::registered()
            },
        ),
    );
    assert_eq!(invalid_field(&reply), "policy.default_ttl");
    log.register(
        "r",
        Policy {
            max_lifetime_ms: 10 * MINUTE_MS,
            default_ttl_ms: 10 * MINUTE_MS,
            ..Policy::registered()
        },
    );
    granted(&log.acquire(ALICE, acq("r", "a")));
}

#[test]
fn s2_create_resource_by_a_non_admin_is_insufficient_permissions() {
    let mut log = Log::new();
    let refusal = rejection(&log.propose(ALICE, create(Some("r"), Policy::registered())));
    assert!(
        matches!(refusal, Rejection::InsufficientPermissions(_)),
        "{refusal:?}"
    );
    assert!(log.state.resource_view("r").ad_hoc, "nothing registered");
    assert!(log.events("r").is_empty());
}

#[test]
fn s2_create_resource_with_a_taken_name_is_already_exists() {
    let mut log = Log::new();
    log.register("r", Policy::registered());
    let taken = Rejection::AlreadyExists("r".into());
    assert_eq!(
        rejection(&log.propose(ROOT, create(Some("r"), Policy::registered()))),
        taken
    );
    assert_eq!(taken.reason(), "already_exists");
    // Existence is checked before permission (SPEC §3).
    assert_eq!(
        rejection(&log.propose(ALICE, create(Some("r"), Policy::registered()))),
        taken
    );
    // An ad-hoc name with a live lease is taken too.
    granted(&log.acquire(ALICE, acq("held", "a")));
    assert_eq!(
        rejection(&log.propose(ROOT, create(Some("held"), Policy::registered()))),
        Rejection::AlreadyExists("held".into())
    );
}

#[test]
fn s2_an_ad_hoc_name_with_no_live_lease_may_be_registered() {
    let mut log = Log::new();
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    lease(&log.release(ALICE, release_of(&a)));
    log.register("r", transferable());
    let view = log.state.resource_view("r");
    assert!(!view.ad_hoc && view.policy.transferable);
    assert_eq!(log.events("r").len(), 3, "its history is kept");
}

#[test]
fn s2_create_resource_with_no_name_generates_res_index() {
    let mut log = Log::new();
    log.tick();
    let Reply::Resource(view) = log.propose(ROOT, create(None, Policy::registered())) else {
        panic!("registered");
    };
    assert_eq!(view.name, "res_2");
    assert!(!view.ad_hoc);
    assert_eq!(view.revision, 2);
    // A name someone already took by hand gets a suffix.
    log.register("res_4", Policy::registered());
    let Reply::Resource(view) = log.propose(ROOT, create(None, Policy::registered())) else {
        panic!("registered");
    };
    assert_eq!(view.name, "res_4_1");
}

/// However many shared holders a resource has, a reply that lists them stays far below the
/// 4 MiB transport limit: views list the first ~1 MiB and count the rest, a refusal names at
/// most 100 holders.
#[test]
fn s2_replies_listing_many_holders_stay_under_the_transport_limit() {
    let mut log = Log::new();
    log.register("crowd", shared_policy(&[Mode::Read], 0));
    let metadata: std::collections::BTreeMap<String, String> =
        [("k".to_string(), "v".repeat(16_000))].into();
    for n in 0..300 {
        let op = AcquireOp {
            metadata: metadata.clone(),
            ..shared("crowd", &format!("h{n}"), Mode::Read, 1)
        };
        granted(&log.acquire(ALICE, op));
    }
    let view = log.state.resource_view("crowd");
    assert_eq!(view.lease_count, 300);
    let shown_bytes: usize = view
        .leases
        .iter()
        .map(|v| v.lease.metadata["k"].len())
        .sum();
    assert!(
        view.leases.len() < 300 && shown_bytes <= 1024 * 1024 + 16_000,
        "{shown_bytes}"
    );
    assert_eq!(
        view.leases[0].lease.holder, "h0",
        "the first in grant order"
    );

    let (refusal, holders) = refused(&log.acquire(ALICE, acq("crowd", "exclusive-h")));
    assert_eq!(refusal, Refusal::ResourceUnavailable);
    assert!(holders.len() <= 100 && holders.len() == view.leases.len().min(100));
}

/// SPEC §4.16: metadata holds at most 64 entries and no control characters, checked by apply
/// too (an entry is judged the same on every node, whatever its proposer checked).
#[test]
fn s4_13_metadata_with_too_many_entries_or_control_characters_is_refused() {
    let mut log = Log::new();
    let with = |holder: &str, metadata: &[(&str, &str)]| AcquireOp {
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..acq(holder, holder)
    };
    let many: Vec<(String, String)> = (0..65).map(|i| (format!("k{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        invalid_field(&log.acquire(ALICE, with("a", &many))),
        "metadata"
    );
    granted(&log.acquire(ALICE, with("b", &many[..64])));
    for (k, v) in [("k", "line\nbreak"), ("esc\u{1b}", "v"), ("k", "del\u{7f}")] {
        assert_eq!(
            invalid_field(&log.acquire(ALICE, with("c", &[(k, v)]))),
            "metadata"
        );
    }
    granted(&log.acquire(ALICE, with("d", &[("emoji", "🙂 ok")])));
}

/// SPEC §4.15: `max_holders` caps the live leases of a shared resource without a unit pool;
/// past it an acquire is refused `resource_unavailable` (or waits), and room made by a
/// release admits the next waiter.
#[test]
fn s4_13_max_holders_caps_a_shared_resource_without_a_pool() {
    let mut log = Log::new();
    log.register(
        "feed",
        Policy {
            max_holders: 2,
            ..shared_policy(&[Mode::Read], 0)
        },
    );
    let a = granted(&log.acquire(ALICE, shared("feed", "a", Mode::Read, 1)));
    granted(&log.acquire(ALICE, shared("feed", "b", Mode::Read, 1)));
    let (refusal, holders) = refused(&log.acquire(ALICE, shared("feed", "c", Mode::Read, 1)));
    assert_eq!((refusal, holders.len()), (Refusal::ResourceUnavailable, 2));
    let waits = AcquireOp {
        wait_ms: Some(60_000),
        ..shared("feed", "c", Mode::Read, 1)
    };
    log.acquire(ALICE, waits);
    lease(&log.release(ALICE, release_of(&a)));
    let holders: Vec<String> = log.holders("feed").into_iter().map(|(h, _)| h).collect();
    assert_eq!(holders, ["b", "c"]);
    let bad = Policy {
        max_holders: crate::policy::MAX_HOLDERS_CEILING + 1,
        ..Policy::registered()
    };
    assert_eq!(
        bad.check().map_err(|r| r.reason().as_str()),
        Err("invalid_argument")
    );
}

#[test]
fn s4_13_an_acquire_ttl_outside_one_second_to_max_ttl_is_out_of_range() {
    let mut log = Log::new();
    for ttl_ms in [0, 500, 999, DAY_MS + 1, u64::MAX] {
        assert_eq!(
            rejection(&log.acquire(ALICE, acq_ttl("world", "alice", ttl_ms))),
            Rejection::TtlOutOfRange {
                ttl_ms,
                min_ms: 1_000,
                max_ms: DAY_MS
            }
        );
    }
    assert!(log.state.resource_view("world").leases.is_empty());
    assert_eq!(
        granted(&log.acquire(ALICE, acq_ttl("a", "alice", 1_000)))
            .lease
            .ttl_ms,
        1_000
    );
    assert_eq!(
        granted(&log.acquire(ALICE, acq_ttl("b", "alice", DAY_MS)))
            .lease
            .ttl_ms,
        DAY_MS
    );
}
