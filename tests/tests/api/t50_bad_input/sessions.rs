//! Sessions (SPEC §4.24): `CreateSession`, `RenewSession`, `CloseSession`, `GetSession`,
//! `ListSessions`, an `Acquire` on a session, and a session renewal on the `KeepAlive` stream,
//! each wrong in one way only. An `invalid_argument` names its field (SPEC §3.1).

use tenure_client::pb;
use tenure_proto::v1::leases_client::LeasesClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Code;

use super::row::{bad_ids, bad_labels, bad_names, bad_nonempty_names, long, ttl, Base, Row, MIB};
use super::CALL_TIMEOUT;

/// A well-formed id of a session the cluster does not know.
const UNKNOWN: &str = "ses_999999999";

/// Session ids no `CreateSession` answers.
pub fn bad_session_ids() -> Vec<(&'static str, String)> {
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
        rows.push(
            Row::invalid(
                format!("create_session: holder with {what}"),
                pb::CreateSessionRequest {
                    holder: name,
                    ..create()
                },
            )
            .naming("holder"),
        );
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
            None => row.naming("ttl"),
        });
    }
    for (what, metadata) in [
        ("metadata of 1 MiB", [("k".to_string(), long(MIB))]),
        (
            "metadata key with a control character",
            [("k\u{1}".to_string(), "v".to_string())],
        ),
    ] {
        rows.push(
            Row::invalid(
                format!("create_session: {what}"),
                pb::CreateSessionRequest {
                    metadata: metadata.into(),
                    ..create()
                },
            )
            .naming("metadata"),
        );
    }
    // Request ids: on a well-formed session id, so that only the request id is wrong.
    for (what, request_id) in bad_ids("id\u{7}") {
        rows.push(
            Row::invalid(
                format!("create_session: request_id with {what}"),
                pb::CreateSessionRequest {
                    request_id: request_id.clone(),
                    ..create()
                },
            )
            .naming("request_id"),
        );
        rows.push(
            Row::invalid(
                format!("renew_session: request_id with {what}"),
                pb::RenewSessionRequest {
                    session_id: UNKNOWN.into(),
                    request_id: request_id.clone(),
                },
            )
            .naming("request_id"),
        );
        rows.push(
            Row::invalid(
                format!("close_session: request_id with {what}"),
                pb::CloseSessionRequest {
                    session_id: UNKNOWN.into(),
                    request_id,
                },
            )
            .naming("request_id"),
        );
    }
    let mut ids = bad_session_ids();
    ids.push(("empty", String::new()));
    for (what, id) in ids {
        for row in [
            Row::invalid(
                format!("renew_session: session_id {what}"),
                pb::RenewSessionRequest {
                    session_id: id.clone(),
                    request_id: String::new(),
                },
            ),
            Row::invalid(
                format!("close_session: session_id {what}"),
                pb::CloseSessionRequest {
                    session_id: id.clone(),
                    request_id: String::new(),
                },
            ),
            Row::invalid(
                format!("get_session: session_id {what}"),
                pb::GetSessionRequest {
                    session_id: id.clone(),
                    consistency: 0,
                },
            ),
        ] {
            rows.push(row.naming("session_id"));
        }
    }
    for (what, id) in bad_session_ids() {
        rows.push(
            Row::invalid(
                format!("acquire: session_id {what}"),
                pb::AcquireRequest {
                    session_id: id.clone(),
                    ttl: None,
                    ..base.acquire()
                },
            )
            .naming("session_id"),
        );
        rows.push(
            Row::invalid(
                format!("list_sessions: page_token {what}"),
                pb::ListSessionsRequest {
                    page_token: id,
                    ..Default::default()
                },
            )
            .naming("page_token"),
        );
    }
    // A session the cluster does not know: NOT_FOUND, never a lease.
    for id in [UNKNOWN, "ses_1"] {
        for row in [
            Row::invalid(
                format!("acquire: on unknown session {id}"),
                pb::AcquireRequest {
                    session_id: id.into(),
                    ttl: None,
                    ..base.acquire()
                },
            ),
            Row::invalid(
                format!("renew_session: unknown {id}"),
                pb::RenewSessionRequest {
                    session_id: id.into(),
                    request_id: String::new(),
                },
            ),
            Row::invalid(
                format!("close_session: unknown {id}"),
                pb::CloseSessionRequest {
                    session_id: id.into(),
                    request_id: String::new(),
                },
            ),
            Row::invalid(
                format!("get_session: unknown {id}"),
                pb::GetSessionRequest {
                    session_id: id.into(),
                    consistency: 0,
                },
            ),
        ] {
            rows.push(row.gets(Code::NotFound, "session_not_found"));
        }
    }
    rows.push(
        Row::invalid(
            "acquire: session_id with a ttl of its own",
            pb::AcquireRequest {
                session_id: "ses_1".into(),
                ..base.acquire()
            },
        )
        .naming("ttl"),
    );
    for (what, name) in bad_nonempty_names() {
        rows.push(
            Row::invalid(
                format!("list_sessions: holder with {what}"),
                pb::ListSessionsRequest {
                    holder: name,
                    ..Default::default()
                },
            )
            .naming("holder"),
        );
    }
    for (what, label) in bad_labels() {
        rows.push(
            Row::invalid(
                format!("list_sessions: principal with {what}"),
                pb::ListSessionsRequest {
                    principal: label,
                    ..Default::default()
                },
            )
            .naming("principal"),
        );
    }
    for (what, request, field) in [
        (
            "page_size 1001",
            pb::ListSessionsRequest {
                page_size: 1001,
                ..Default::default()
            },
            "page_size",
        ),
        (
            "consistency 99",
            pb::ListSessionsRequest {
                consistency: 99,
                ..Default::default()
            },
            "consistency",
        ),
    ] {
        rows.push(Row::invalid(format!("list_sessions: {what}"), request).naming(field));
    }
    rows.push(
        Row::invalid(
            "get_session: consistency -1",
            pb::GetSessionRequest {
                session_id: "ses_1".into(),
                consistency: -1,
            },
        )
        .naming("consistency"),
    );
    rows
}

/// A `KeepAlive` message and the refusal it must get on the stream.
struct Refused {
    what: String,
    request: pb::KeepAliveRequest,
    code: Code,
    reason: &'static str,
    /// The field the refusal's message must name, where the case checks it.
    field: Option<&'static str>,
}

/// Session renewals on a `KeepAlive` stream (SPEC §2.3), each wrong in one way only: each is
/// refused on the stream, as its own answer with the reason and code a `RenewSession` would
/// get, and the stream stays open for the next; it ends cleanly when the caller's side does.
pub async fn keep_alive(channel: Channel, node: u64, base: &Base<'_>) {
    let session = |session_id: &str| pb::KeepAliveRequest {
        seq: 0,
        renew: None,
        session_id: session_id.into(),
    };
    let invalid = |what: String, request, field| Refused {
        what,
        request,
        code: Code::InvalidArgument,
        reason: "invalid_argument",
        field,
    };
    let mut cases: Vec<Refused> = bad_session_ids()
        .into_iter()
        .map(|(what, id)| {
            invalid(
                format!("session_id {what}"),
                session(&id),
                Some("session_id"),
            )
        })
        .collect();
    cases.push(Refused {
        what: format!("unknown session {UNKNOWN}"),
        request: session(UNKNOWN),
        code: Code::NotFound,
        reason: "session_not_found",
        field: None,
    });
    // Were either half taken, the held lease would be renewed or the unknown session refused
    // `session_not_found`.
    cases.push(invalid(
        "both a lease renewal and a session_id".into(),
        pb::KeepAliveRequest {
            renew: Some(base.renew()),
            ..session(UNKNOWN)
        },
        None,
    ));
    let (requests, outgoing) = mpsc::channel(cases.len());
    let mut answers = tokio::time::timeout(
        CALL_TIMEOUT,
        LeasesClient::new(channel).keep_alive(ReceiverStream::new(outgoing)),
    )
    .await
    .expect("the node answered in time")
    .unwrap_or_else(|status| panic!("node {node}: keep_alive opens: {status:?}"))
    .into_inner();
    for (seq, case) in cases.into_iter().enumerate() {
        let Refused {
            what,
            request,
            code,
            reason,
            field,
        } = case;
        let what = format!("node {node}: keep_alive: {what}");
        let seq = seq as u64 + 1;
        requests
            .send(pb::KeepAliveRequest { seq, ..request })
            .await
            .expect("the stream takes it");
        let answer = tokio::time::timeout(CALL_TIMEOUT, answers.message())
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer in time"))
            .unwrap_or_else(|status| panic!("{what}: the stream ended: {status:?}"))
            .unwrap_or_else(|| panic!("{what}: the stream ended"));
        assert_eq!(answer.seq, seq, "{what}: {answer:?}");
        assert!(
            answer.lease.is_none() && answer.session.is_none(),
            "{what}: renewed: {answer:?}"
        );
        let refusal = answer
            .refusal
            .unwrap_or_else(|| panic!("{what}: neither renewed nor refused"));
        assert_eq!(
            (Code::from_i32(refusal.code), refusal.reason.as_str()),
            (code, reason),
            "{what}: {}",
            refusal.message
        );
        if let Some(field) = field {
            assert!(
                refusal.message.contains(field),
                "{what}: the message names no {field}: {}",
                refusal.message
            );
        }
    }
    drop(requests);
    let end = tokio::time::timeout(CALL_TIMEOUT, answers.message())
        .await
        .expect("the stream ends in time");
    assert!(
        matches!(end, Ok(None)),
        "node {node}: keep_alive ends cleanly: {end:?}"
    );
}
