//! Sessions (SPEC §4.24): `CreateSession`, `RenewSession`, `CloseSession`, `GetSession`,
//! `ListSessions`, and an `Acquire` on a session, each wrong in one way only.

use tenure_client::pb;
use tonic::Code;

use super::row::{bad_labels, bad_names, bad_nonempty_names, long, ttl, Base, Row, MIB};

/// Session ids no `CreateSession` answers.
fn bad_session_ids() -> Vec<(&'static str, String)> {
    vec![
        ("no number", "ses_".into()),
        ("a leading zero", "ses_01".into()),
        ("zero", "ses_0".into()),
        ("a sign", "ses_-1".into()),
        ("letters", "ses_abc".into()),
        ("a lease id", "lse_1_0".into()),
        ("a number alone", "12".into()),
        ("past u64", "ses_18446744073709551616".into()),
        ("129 bytes", format!("ses_{}", "1".repeat(125))),
        ("a control character", "ses_1\n".into()),
    ]
}

fn create() -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        holder: "t50-session".into(),
        ttl: ttl(600, 0),
        ..Default::default()
    }
}

pub fn rows(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, name) in bad_names() {
        rows.push(Row::invalid(
            format!("create_session: holder with {what}"),
            pb::CreateSessionRequest {
                holder: name,
                ..create()
            },
        ));
    }
    const RANGE: (Code, &str) = (Code::OutOfRange, "ttl_out_of_range");
    for (what, value, expected) in [
        ("ttl 999 ms", ttl(0, 999_999_999), Some(RANGE)),
        (
            "ttl 25 h (over the ad-hoc max_ttl)",
            ttl(25 * 3_600, 0),
            Some(RANGE),
        ),
        ("ttl i64::MAX s", ttl(i64::MAX, 0), Some(RANGE)),
        ("ttl -5 s", ttl(-5, 0), None),
        ("ttl nanos = 1e9", ttl(1, 1_000_000_000), None),
    ] {
        let row = Row::invalid(
            format!("create_session: {what}"),
            pb::CreateSessionRequest {
                ttl: value,
                ..create()
            },
        );
        rows.push(match expected {
            Some((code, reason)) => row.gets(code, reason),
            None => row,
        });
    }
    rows.push(Row::invalid(
        "create_session: metadata of 1 MiB",
        pb::CreateSessionRequest {
            metadata: [("k".to_string(), long(MIB))].into(),
            ..create()
        },
    ));
    rows.push(Row::invalid(
        "create_session: metadata key with a control character",
        pb::CreateSessionRequest {
            metadata: [("k\u{1}".to_string(), "v".to_string())].into(),
            ..create()
        },
    ));
    rows.push(Row::invalid(
        "create_session: request_id of 129 bytes",
        pb::CreateSessionRequest {
            request_id: long(129),
            ..create()
        },
    ));
    let mut ids = bad_session_ids();
    ids.push(("empty", String::new()));
    for (what, id) in ids {
        rows.push(Row::invalid(
            format!("renew_session: session_id {what}"),
            pb::RenewSessionRequest {
                session_id: id.clone(),
                request_id: String::new(),
            },
        ));
        rows.push(Row::invalid(
            format!("close_session: session_id {what}"),
            pb::CloseSessionRequest {
                session_id: id.clone(),
                request_id: String::new(),
            },
        ));
        rows.push(Row::invalid(
            format!("get_session: session_id {what}"),
            pb::GetSessionRequest {
                session_id: id.clone(),
                consistency: 0,
            },
        ));
    }
    for (what, id) in bad_session_ids() {
        rows.push(Row::invalid(
            format!("acquire: session_id {what}"),
            pb::AcquireRequest {
                session_id: id.clone(),
                ttl: None,
                ..base.acquire()
            },
        ));
        rows.push(Row::invalid(
            format!("list_sessions: page_token {what}"),
            pb::ListSessionsRequest {
                page_token: id,
                ..Default::default()
            },
        ));
    }
    // A session the cluster does not know: NOT_FOUND, never a lease.
    for id in ["ses_999999999", "ses_1"] {
        rows.push(
            Row::invalid(
                format!("acquire: on unknown session {id}"),
                pb::AcquireRequest {
                    session_id: id.into(),
                    ttl: None,
                    ..base.acquire()
                },
            )
            .gets(Code::NotFound, "session_not_found"),
        );
        rows.push(
            Row::invalid(
                format!("renew_session: unknown {id}"),
                pb::RenewSessionRequest {
                    session_id: id.into(),
                    request_id: String::new(),
                },
            )
            .gets(Code::NotFound, "session_not_found"),
        );
        rows.push(
            Row::invalid(
                format!("get_session: unknown {id}"),
                pb::GetSessionRequest {
                    session_id: id.into(),
                    consistency: 0,
                },
            )
            .gets(Code::NotFound, "session_not_found"),
        );
    }
    rows.push(Row::invalid(
        "acquire: session_id with a ttl of its own",
        pb::AcquireRequest {
            session_id: "ses_1".into(),
            ..base.acquire()
        },
    ));
    for (what, name) in bad_nonempty_names() {
        rows.push(Row::invalid(
            format!("list_sessions: holder with {what}"),
            pb::ListSessionsRequest {
                holder: name,
                ..Default::default()
            },
        ));
    }
    for (what, label) in bad_labels() {
        rows.push(Row::invalid(
            format!("list_sessions: principal with {what}"),
            pb::ListSessionsRequest {
                principal: label,
                ..Default::default()
            },
        ));
    }
    for (what, request) in [
        (
            "page_size 1001",
            pb::ListSessionsRequest {
                page_size: 1001,
                ..Default::default()
            },
        ),
        (
            "consistency 99",
            pb::ListSessionsRequest {
                consistency: 99,
                ..Default::default()
            },
        ),
    ] {
        rows.push(Row::invalid(format!("list_sessions: {what}"), request));
    }
    rows.push(Row::invalid(
        "get_session: consistency -1",
        pb::GetSessionRequest {
            session_id: "ses_1".into(),
            consistency: -1,
        },
    ));
    rows
}
