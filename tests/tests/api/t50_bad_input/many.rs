//! `AcquireMany` (SPEC §4.25), each request wrong in one way only: its holder, its claims
//! (none, too many, one named twice, a bad name, mode or units in any place), its ttl, wait,
//! metadata, request id and session. Each refusal names the field (SPEC §3.1).

use tenure_client::pb;
use tonic::Code;

use super::row::{bad_ids, bad_names, long, ttl, Row, BAD, HOLDER, MIB, POOL, POOL_UNITS};
use super::sessions::bad_session_ids;

fn claim(resource: &str) -> pb::ResourceClaim {
    pb::ResourceClaim {
        resource: resource.into(),
        ..Default::default()
    }
}

/// Right in every way: two free resources, FAIL.
fn many() -> pb::AcquireManyRequest {
    pb::AcquireManyRequest {
        holder: HOLDER.into(),
        claims: vec![claim(BAD), claim("t50/bad-2")],
        ttl: ttl(600, 0),
        ..Default::default()
    }
}

pub fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, name) in bad_names() {
        rows.push(
            Row::invalid(
                format!("acquire_many: holder with {what}"),
                pb::AcquireManyRequest {
                    holder: name.clone(),
                    ..many()
                },
            )
            .naming("holder"),
        );
        // The bad name second: every claim is checked, not only the first.
        rows.push(
            Row::invalid(
                format!("acquire_many: second resource with {what}"),
                pb::AcquireManyRequest {
                    claims: vec![claim(BAD), claim(&name)],
                    ..many()
                },
            )
            .naming("claims"),
        );
    }
    let shared = |units| pb::ResourceClaim {
        mode: pb::LeaseMode::Read as i32,
        units,
        ..claim(POOL)
    };
    for (what, claims, field) in [
        ("no claims", vec![], "claims"),
        (
            "65 claims",
            (0..65).map(|k| claim(&format!("t50/many-{k}"))).collect(),
            "claims",
        ),
        (
            "a resource named twice",
            vec![claim(BAD), claim("t50/bad-2"), claim(BAD)],
            "claims",
        ),
        (
            "an unknown LeaseMode",
            vec![
                claim(BAD),
                pb::ResourceClaim {
                    mode: 99,
                    ..claim("t50/bad-2")
                },
            ],
            "claims",
        ),
        // Units above the pool's total_units (checked at apply, SPEC §2.3 `Acquire`).
        (
            "units one above total_units",
            vec![claim(BAD), shared(POOL_UNITS + 1)],
            "units",
        ),
        ("units u64::MAX", vec![shared(u64::MAX)], "units"),
    ] {
        rows.push(
            Row::invalid(
                format!("acquire_many: {what}"),
                pb::AcquireManyRequest { claims, ..many() },
            )
            .naming(field),
        );
    }
    const RANGE: (Code, &str) = (Code::OutOfRange, "ttl_out_of_range");
    for (what, value, expected) in [
        ("ttl 999 ms", ttl(0, 999_999_999), Some(RANGE)),
        ("ttl i64::MAX s", ttl(i64::MAX, 0), Some(RANGE)),
        ("ttl -5 s", ttl(-5, 0), None),
    ] {
        let row = Row::invalid(
            format!("acquire_many: {what}"),
            pb::AcquireManyRequest {
                ttl: value,
                ..many()
            },
        );
        rows.push(match expected {
            Some((code, reason)) => row.gets(code, reason),
            None => row.naming("ttl"),
        });
    }
    let wait = |wait_timeout| pb::AcquireManyRequest {
        on_conflict: pb::OnConflict::Wait as i32,
        wait_timeout,
        ..many()
    };
    let mut more: Vec<(String, pb::AcquireManyRequest, &'static str)> = vec![
        (
            "an unknown OnConflict".into(),
            pb::AcquireManyRequest {
                on_conflict: 7,
                ..many()
            },
            "on_conflict",
        ),
        (
            "wait_timeout past 90 days".into(),
            wait(ttl(91 * 24 * 3_600, 0)),
            "wait_timeout",
        ),
        (
            "a negative wait_timeout".into(),
            wait(ttl(-1, 0)),
            "wait_timeout",
        ),
        (
            "metadata of 1 MiB".into(),
            pb::AcquireManyRequest {
                metadata: [("k".to_string(), long(MIB))].into(),
                ..many()
            },
            "metadata",
        ),
        (
            "metadata of 65 entries".into(),
            pb::AcquireManyRequest {
                metadata: (0..65).map(|k| (format!("k{k}"), "v".into())).collect(),
                ..many()
            },
            "metadata",
        ),
        (
            "session_id with a ttl of its own".into(),
            pb::AcquireManyRequest {
                session_id: "ses_1".into(),
                ..many()
            },
            "ttl",
        ),
    ];
    for (what, id) in bad_ids("id\u{7}") {
        more.push((
            format!("request_id with {what}"),
            pb::AcquireManyRequest {
                request_id: id,
                ..many()
            },
            "request_id",
        ));
    }
    for (what, id) in bad_session_ids() {
        more.push((
            format!("session_id {what}"),
            pb::AcquireManyRequest {
                session_id: id,
                ttl: None,
                ..many()
            },
            "session_id",
        ));
    }
    for (what, request, field) in more {
        rows.push(Row::invalid(format!("acquire_many: {what}"), request).naming(field));
    }
    rows.push(
        Row::invalid(
            "acquire_many: on an unknown session",
            pb::AcquireManyRequest {
                session_id: "ses_999999999".into(),
                ttl: None,
                ..many()
            },
        )
        .gets(Code::NotFound, "session_not_found"),
    );
    rows
}
