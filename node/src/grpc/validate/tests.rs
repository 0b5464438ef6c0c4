use super::*;

fn acquire_req() -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: "r".into(),
        holder: "h".into(),
        ..Default::default()
    }
}

fn reason(result: Result<AcquireOp, ApiError>) -> &'static str {
    result
        .err()
        .map_or("ok", |e| e.reason_and_code().0.as_str())
}

#[test]
fn ttl_zero_negative_and_huge_get_their_reasons() {
    let with_ttl = |seconds, nanos| pb::AcquireRequest {
        ttl: Some(prost_types::Duration { seconds, nanos }),
        ..acquire_req()
    };
    assert_eq!(reason(acquire(&with_ttl(0, 0))), "ttl_out_of_range");
    assert_eq!(
        reason(acquire(&with_ttl(0, 999_000_000))),
        "ttl_out_of_range"
    );
    assert_eq!(reason(acquire(&with_ttl(-5, 0))), "invalid_argument");
    assert_eq!(reason(acquire(&with_ttl(1, -1))), "invalid_argument");
    assert_eq!(reason(acquire(&with_ttl(i64::MAX, 0))), "ttl_out_of_range");
    assert_eq!(reason(acquire(&with_ttl(30, 0))), "ok");
}

#[test]
fn unknown_enum_values_are_invalid_arguments() {
    assert_eq!(
        reason(acquire(&pb::AcquireRequest {
            mode: 99,
            ..acquire_req()
        })),
        "invalid_argument"
    );
    assert_eq!(
        reason(acquire(&pb::AcquireRequest {
            on_conflict: -1,
            ..acquire_req()
        })),
        "invalid_argument"
    );
    assert!(stale(7).is_err());
}

#[test]
fn metadata_over_16_kib_is_refused() {
    let mut req = acquire_req();
    req.metadata
        .insert("k".into(), "v".repeat(MAX_METADATA_BYTES));
    assert_eq!(reason(acquire(&req)), "invalid_argument");
    req.metadata
        .insert("k".into(), "v".repeat(MAX_METADATA_BYTES - 1));
    assert_eq!(reason(acquire(&req)), "ok");
}

#[test]
fn metadata_with_too_many_entries_or_control_characters_is_refused() {
    let mut req = acquire_req();
    for i in 0..policy::MAX_METADATA_ENTRIES {
        req.metadata.insert(format!("k{i}"), "v".into());
    }
    assert_eq!(reason(acquire(&req)), "ok");
    req.metadata.insert("one-more".into(), "v".into());
    assert_eq!(reason(acquire(&req)), "invalid_argument");
    for bad in ["tab\there", "bell\u{7}", "nul\0", "c1\u{85}"] {
        let mut req = acquire_req();
        req.metadata.insert("k".into(), bad.into());
        assert_eq!(reason(acquire(&req)), "invalid_argument", "{bad:?}");
        let mut req = acquire_req();
        req.metadata.insert(bad.into(), "v".into());
        assert_eq!(
            reason(acquire(&req)),
            "invalid_argument",
            "{bad:?} as a key"
        );
    }
}

#[test]
fn an_absent_default_ttl_fits_under_the_policys_caps() {
    let with = |p: pb::Policy| policy(Some(&p), "", "").expect("a valid policy");
    let mins = |m: i64| {
        Some(prost_types::Duration {
            seconds: m * 60,
            nanos: 0,
        })
    };
    assert_eq!(with(pb::Policy::default()).default_ttl_ms, 3_600_000);
    let capped = with(pb::Policy {
        max_lifetime: mins(10),
        ..Default::default()
    });
    assert_eq!(capped.default_ttl_ms, 600_000);
    let short = with(pb::Policy {
        max_ttl: mins(5),
        ..Default::default()
    });
    assert_eq!(short.default_ttl_ms, 300_000);
    let explicit = policy(
        Some(&pb::Policy {
            default_ttl: mins(20),
            max_lifetime: mins(10),
            ..Default::default()
        }),
        "",
        "",
    );
    assert_eq!(
        explicit.err().map(|e| e.reason_and_code().0.as_str()),
        Some("invalid_argument"),
        "a default_ttl the caps forbid is refused, not clamped"
    );
}

#[test]
fn renew_and_release_require_a_fencing_token() {
    let renew_req = pb::RenewRequest {
        resource: "r".into(),
        holder: "h".into(),
        ..Default::default()
    };
    assert_eq!(
        renew(&renew_req)
            .err()
            .map(|e| e.reason_and_code().0.as_str()),
        Some("invalid_argument")
    );
}
