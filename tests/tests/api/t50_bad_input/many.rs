//! `AcquireMany` (SPEC §4.25), each request wrong in one way only: its holder, its claims
//! (none, too many, one named twice, a bad name or mode in any place), its ttl, wait,
//! metadata, request id and session.

use tenure_client::pb;
use tonic::Code;

use super::row::{bad_names, long, ttl, Row, BAD, HOLDER, MIB};

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
        rows.push(Row::invalid(
            format!("acquire_many: holder with {what}"),
            pb::AcquireManyRequest {
                holder: name.clone(),
                ..many()
            },
        ));
        // The bad name second: every claim is checked, not only the first.
        rows.push(Row::invalid(
            format!("acquire_many: second resource with {what}"),
            pb::AcquireManyRequest {
                claims: vec![claim(BAD), claim(&name)],
                ..many()
            },
        ));
    }
    for (what, claims) in [
        ("no claims", vec![]),
        (
            "65 claims",
            (0..65).map(|k| claim(&format!("t50/many-{k}"))).collect(),
        ),
        (
            "a resource named twice",
            vec![claim(BAD), claim("t50/bad-2"), claim(BAD)],
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
        ),
    ] {
        rows.push(Row::invalid(
            format!("acquire_many: {what}"),
            pb::AcquireManyRequest { claims, ..many() },
        ));
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
            None => row,
        });
    }
    rows.push(Row::invalid(
        "acquire_many: an unknown OnConflict",
        pb::AcquireManyRequest {
            on_conflict: 7,
            ..many()
        },
    ));
    rows.push(Row::invalid(
        "acquire_many: wait_timeout past 90 days",
        pb::AcquireManyRequest {
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: ttl(91 * 24 * 3_600, 0),
            ..many()
        },
    ));
    rows.push(Row::invalid(
        "acquire_many: metadata of 1 MiB",
        pb::AcquireManyRequest {
            metadata: [("k".to_string(), long(MIB))].into(),
            ..many()
        },
    ));
    rows.push(Row::invalid(
        "acquire_many: request_id of 129 bytes",
        pb::AcquireManyRequest {
            request_id: long(129),
            ..many()
        },
    ));
    rows.push(Row::invalid(
        "acquire_many: session_id not ses_<n>",
        pb::AcquireManyRequest {
            session_id: "ses_x".into(),
            ttl: None,
            ..many()
        },
    ));
    rows.push(Row::invalid(
        "acquire_many: session_id with a ttl of its own",
        pb::AcquireManyRequest {
            session_id: "ses_1".into(),
            ..many()
        },
    ));
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
