//! `Acquire`, `Renew`, `Release`, `Validate` and `GetResource`: names, ttls, enums, metadata,
//! keys and missing fields, each wrong in one way only.

use tenure_client::pb;
use tonic::Code;

use super::row::{bad_ids, bad_names, long, ttl, Base, Row, DAY_SECONDS, MIB};

pub fn rows(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.extend(names(base));
    rows.extend(ttls(base));
    rows.extend(enums(base));
    rows.extend(sizes_and_keys(base));
    rows.extend(missing(base));
    rows.extend(names_elsewhere(base));
    rows
}

/// Names: resource and holder alike, on acquire.
fn names(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, name) in bad_names() {
        rows.push(Row::invalid(
            format!("acquire: resource with {what}"),
            pb::AcquireRequest {
                resource: name.clone(),
                ..base.acquire()
            },
        ));
        rows.push(Row::invalid(
            format!("acquire: holder with {what}"),
            pb::AcquireRequest {
                holder: name,
                ..base.acquire()
            },
        ));
    }
    rows
}

/// ttl: malformed or negative is invalid_argument; below 1 s or above the ceiling (or the
/// ad-hoc policy's max_ttl, checked at apply) is ttl_out_of_range.
fn ttls(base: &Base) -> Vec<Row> {
    const INVALID: (Code, &str) = (Code::InvalidArgument, "invalid_argument");
    const RANGE: (Code, &str) = (Code::OutOfRange, "ttl_out_of_range");
    let ttls = [
        ("ttl 0", ttl(0, 0), RANGE),
        ("ttl 1 ns", ttl(0, 1), RANGE),
        ("ttl 999 ms", ttl(0, 999_999_999), RANGE),
        ("ttl -5 s", ttl(-5, 0), INVALID),
        ("ttl -1 ns", ttl(0, -1), INVALID),
        ("ttl 1 s - 1 ns", ttl(1, -1), INVALID),
        ("ttl i64::MIN s", ttl(i64::MIN, 0), INVALID),
        ("ttl nanos = 1e9", ttl(1, 1_000_000_000), INVALID),
        (
            "ttl 25 h (over the ad-hoc max_ttl)",
            ttl(25 * 60 * 60, 0),
            RANGE,
        ),
        ("ttl 90 days + 1 s", ttl(90 * DAY_SECONDS + 1, 0), RANGE),
        (
            "ttl 90 days + 1 ms",
            ttl(90 * DAY_SECONDS, 1_000_000),
            RANGE,
        ),
        ("ttl 10 years", ttl(3650 * DAY_SECONDS, 0), RANGE),
        ("ttl i64::MAX s", ttl(i64::MAX, 0), RANGE),
        (
            "ttl i64::MAX s + 999999999 ns",
            ttl(i64::MAX, 999_999_999),
            RANGE,
        ),
    ];
    let mut rows = Vec::new();
    for (what, value, (code, reason)) in ttls {
        rows.push(
            Row::invalid(
                format!("acquire: {what}"),
                pb::AcquireRequest {
                    ttl: value,
                    ..base.acquire()
                },
            )
            .gets(code, reason),
        );
        rows.push(
            Row::invalid(
                format!("renew: {what}"),
                pb::RenewRequest {
                    ttl: value,
                    ..base.renew()
                },
            )
            .gets(code, reason),
        );
    }
    rows
}

/// Enums: unknown values, and a mode the ad-hoc policy does not allow.
fn enums(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    for value in [99, -1, 4, i32::MAX] {
        rows.push(Row::invalid(
            format!("acquire: mode = {value}"),
            pb::AcquireRequest {
                mode: value,
                ..base.acquire()
            },
        ));
        rows.push(Row::invalid(
            format!("acquire: on_conflict = {value}"),
            pb::AcquireRequest {
                on_conflict: value,
                ..base.acquire()
            },
        ));
        rows.push(Row::invalid(
            format!("get_resource: consistency = {value}"),
            pb::GetResourceRequest {
                consistency: value,
                ..base.get()
            },
        ));
        rows.push(Row::invalid(
            format!("validate: consistency = {value}"),
            pb::ValidateRequest {
                consistency: value,
                ..base.validate()
            },
        ));
    }
    rows.push(
        Row::invalid(
            "acquire: mode READ on an exclusive-only (ad-hoc) resource",
            pb::AcquireRequest {
                mode: pb::LeaseMode::Read as i32,
                ..base.acquire()
            },
        )
        .gets(Code::InvalidArgument, "invalid_mode"),
    );
    rows
}

/// Metadata over 16 KiB of keys and values (but well under the transport limit), and keys over
/// 128 bytes or with control characters.
fn sizes_and_keys(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, entries) in [
        (
            "one value of 16 KiB (+1 byte of key)",
            vec![("k".to_string(), "v".repeat(16 * 1024))],
        ),
        (
            "17 entries of 1 KiB",
            (0..17)
                .map(|i| (format!("k{i:02}"), "v".repeat(1024 - 3)))
                .collect(),
        ),
        (
            "one key of 17 KiB",
            vec![("k".repeat(17 * 1024), String::new())],
        ),
        ("a value of 1 MiB", vec![("k".to_string(), "v".repeat(MIB))]),
    ] {
        rows.push(Row::invalid(
            format!("acquire: metadata with {what}"),
            pb::AcquireRequest {
                metadata: entries.into_iter().collect(),
                ..base.acquire()
            },
        ));
    }

    rows.push(Row::invalid(
        "acquire: idempotency_key of 129 bytes",
        pb::AcquireRequest {
            idempotency_key: long(129),
            ..base.acquire()
        },
    ));
    for (what, request_id) in bad_ids("id\u{7}") {
        rows.push(Row::invalid(
            format!("acquire: request_id with {what}"),
            pb::AcquireRequest {
                request_id: request_id.clone(),
                ..base.acquire()
            },
        ));
        rows.push(Row::invalid(
            format!("renew: request_id with {what}"),
            pb::RenewRequest {
                request_id: request_id.clone(),
                ..base.renew()
            },
        ));
        rows.push(Row::invalid(
            format!("release: request_id with {what}"),
            pb::ReleaseRequest {
                request_id,
                ..base.release()
            },
        ));
    }
    for (what, lease_id) in bad_ids("lse_\u{1b}") {
        rows.push(Row::invalid(
            format!("renew: lease_id with {what}"),
            pb::RenewRequest {
                lease_id: lease_id.clone(),
                ..base.renew()
            },
        ));
        rows.push(Row::invalid(
            format!("release: lease_id with {what}"),
            pb::ReleaseRequest {
                lease_id: lease_id.clone(),
                ..base.release()
            },
        ));
        rows.push(Row::invalid(
            format!("validate: lease_id with {what}"),
            pb::ValidateRequest {
                lease_id,
                ..base.validate()
            },
        ));
    }
    rows
}

/// Missing fields.
fn missing(base: &Base) -> Vec<Row> {
    vec![
        Row::invalid(
            "renew: no fencing_token",
            pb::RenewRequest {
                fencing_token: 0,
                ..base.renew()
            },
        ),
        Row::invalid(
            "release: no fencing_token",
            pb::ReleaseRequest {
                fencing_token: 0,
                ..base.release()
            },
        ),
        Row::invalid(
            "validate: neither lease_id nor fencing_token",
            pb::ValidateRequest {
                lease_id: String::new(),
                fencing_token: 0,
                ..base.validate()
            },
        ),
        Row::invalid("renew: empty request", pb::RenewRequest::default()),
        Row::invalid("release: empty request", pb::ReleaseRequest::default()),
        Row::invalid("acquire: empty request", pb::AcquireRequest::default()),
    ]
}

/// Bad names on the other methods.
fn names_elsewhere(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, name) in bad_names() {
        rows.push(Row::invalid(
            format!("renew: holder with {what}"),
            pb::RenewRequest {
                holder: name.clone(),
                ..base.renew()
            },
        ));
        rows.push(Row::invalid(
            format!("release: resource with {what}"),
            pb::ReleaseRequest {
                resource: name.clone(),
                ..base.release()
            },
        ));
        rows.push(Row::invalid(
            format!("get_resource: name with {what}"),
            pb::GetResourceRequest {
                name: name.clone(),
                ..base.get()
            },
        ));
        rows.push(Row::invalid(
            format!("validate: resource with {what}"),
            pb::ValidateRequest {
                resource: name,
                ..base.validate()
            },
        ));
    }
    rows
}
