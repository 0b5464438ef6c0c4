//! Must show 5: bad input gets the SPEC §3 code and reason, never `internal`, and leaves the
//! node up with its state unchanged.
//!
//! Every request goes through raw generated clients (or a raw `tonic::client::Grpc`) over a
//! channel to one node, so no client-library retry can hide an answer. The table is sent to
//! every node: followers validate before they forward, and the leader validates again at apply.
//! Each refusal is checked for its gRPC code, its `google.rpc.ErrorInfo` reason and domain, its
//! `tenure-reason` trailer, and what `tenure_client::Error` makes of it.

use std::collections::HashMap;
use std::time::Duration;

use tenure_client::pb;
use tenure_node::error::{ERROR_DOMAIN, REASON_HEADER};
use tenure_node::lease::{Lease, LeaseStatus, Policy};
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::in_process::InProcessCluster;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// Bounds every call and wait so a hung node fails the test instead of stalling it.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Acquired before the barrage; must come out of it untouched.
const HELD: &str = "t50/held";
const HOLDER: &str = "t50-holder";
/// The resource the bad acquires aim at.
const BAD: &str = "t50/bad";
const MIB: usize = 1024 * 1024;
const DAY_SECONDS: i64 = 24 * 60 * 60;

/// One row: what is wrong, the request, the code and the SPEC §3 reason it must get.
type Case = (String, Call, Code, &'static str);

#[derive(Clone, Debug)]
enum Call {
    GetResource(pb::GetResourceRequest),
    Acquire(pb::AcquireRequest),
    Renew(pb::RenewRequest),
    Release(pb::ReleaseRequest),
    Validate(pb::ValidateRequest),
    CreateResource(pb::CreateResourceRequest),
    ListResources(pb::ListResourcesRequest),
    Transfer(pb::TransferRequest),
    ListLeases(pb::ListLeasesRequest),
    History(pb::HistoryRequest),
    CancelWait(pb::CancelWaitRequest),
    Book(pb::BookRequest),
    CancelBooking(pb::CancelBookingRequest),
    Watch(pb::WatchRequest),
}

/// `AcquireRequest` with `bytes` where the real message has `string` (same tags), so the test
/// can put bytes on the wire that are not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawAcquireRequest {
    #[prost(bytes = "vec", tag = "1")]
    resource: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    holder: Vec<u8>,
    #[prost(message, optional, tag = "3")]
    ttl: Option<prost_types::Duration>,
    #[prost(map = "string, bytes", tag = "6")]
    metadata: HashMap<String, Vec<u8>>,
    #[prost(bytes = "vec", tag = "10")]
    request_id: Vec<u8>,
}

/// `AcquireRequest.resource` (a string, length-delimited) sent as a varint: a broken field.
#[derive(Clone, PartialEq, prost::Message)]
struct WrongWireType {
    #[prost(uint64, tag = "1")]
    resource: u64,
}

/// The parts of a node's applied state that the barrage must not touch. (Fields derived from
/// the lease clock — `remaining`, the wall-clock estimate of the expiry — move with every
/// `Tick` and are left out.)
#[derive(Debug, PartialEq)]
struct AppliedView {
    live_leases: usize,
    held: Vec<(Lease, LeaseStatus)>,
    held_revision: u64,
    held_policy: Policy,
    held_ad_hoc: bool,
    bad: Vec<Lease>,
}

fn applied_view(cluster: &InProcessCluster, id: u64) -> AppliedView {
    let applied = cluster.node(id).sm.read();
    let held = applied.state.resource_view(HELD);
    let bad = applied.state.resource_view(BAD);
    AppliedView {
        live_leases: applied.state.live_leases(),
        held: held
            .leases
            .into_iter()
            .map(|view| (view.lease, view.status))
            .collect(),
        held_revision: held.revision,
        held_policy: held.policy,
        held_ad_hoc: held.ad_hoc,
        bad: bad.leases.into_iter().map(|view| view.lease).collect(),
    }
}

/// Waits until node `id` has applied `index`.
async fn wait_applied(cluster: &InProcessCluster, id: u64, index: u64) {
    let mut applied = cluster.node(id).sm.subscribe();
    tokio::time::timeout(CALL_TIMEOUT, applied.wait_for(|i| *i >= index))
        .await
        .unwrap_or_else(|_| panic!("node {id} did not apply index {index} in time"))
        .unwrap_or_else(|_| panic!("node {id} stopped before applying index {index}"));
}

fn ttl(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn acquire(resource: &str, holder: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: holder.into(),
        ttl: ttl(600, 0),
        ..Default::default()
    }
}

fn long(bytes: usize) -> String {
    "a".repeat(bytes)
}

/// Names outside 1-128 bytes of `[A-Za-z0-9_.:/-]`.
fn bad_names() -> Vec<(&'static str, String)> {
    vec![
        ("empty", String::new()),
        ("129 bytes", long(129)),
        ("a space", "has space".into()),
        ("unicode", "r\u{e9}sum\u{e9}".into()),
        (
            "non-Latin unicode",
            "\u{440}\u{435}\u{441}\u{443}\u{440}\u{441}".into(),
        ),
        ("a control character", "a\nb".into()),
        ("a NUL", "a\0b".into()),
    ]
}

async fn connect(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("valid endpoint")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

async fn send(client: &mut LeasesClient<Channel>, call: Call) -> Result<(), Status> {
    let answer = async {
        match call {
            Call::GetResource(r) => client.get_resource(r).await.map(drop),
            Call::Acquire(r) => client.acquire(r).await.map(drop),
            Call::Renew(r) => client.renew(r).await.map(drop),
            Call::Release(r) => client.release(r).await.map(drop),
            Call::Validate(r) => client.validate(r).await.map(drop),
            Call::CreateResource(r) => client.create_resource(r).await.map(drop),
            Call::ListResources(r) => client.list_resources(r).await.map(drop),
            Call::Transfer(r) => client.transfer(r).await.map(drop),
            Call::ListLeases(r) => client.list_leases(r).await.map(drop),
            Call::History(r) => client.history(r).await.map(drop),
            Call::CancelWait(r) => client.cancel_wait(r).await.map(drop),
            Call::Book(r) => client.book(r).await.map(drop),
            Call::CancelBooking(r) => client.cancel_booking(r).await.map(drop),
            // Arguments are checked before the stream opens.
            Call::Watch(r) => client.watch(r).await.map(drop),
        }
    };
    tokio::time::timeout(CALL_TIMEOUT, answer)
        .await
        .expect("the node answered in time")
}

/// The call must have failed with `code` and `reason`, in the ErrorInfo detail and the trailer.
fn expect_refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, Status>,
    code: Code,
    reason: &str,
) {
    let status = match result {
        Ok(reply) => panic!("{what}: accepted ({reply:?}); expected {code:?} / {reason}"),
        Err(status) => status,
    };
    assert_ne!(
        status.code(),
        Code::Internal,
        "{what}: INTERNAL for bad input: {status:?}"
    );
    assert_eq!(status.code(), code, "{what}: wrong code: {status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("{what}: no google.rpc.ErrorInfo detail: {status:?}"));
    assert_eq!(info.reason, reason, "{what}: ErrorInfo reason: {status:?}");
    assert_eq!(info.domain, ERROR_DOMAIN, "{what}: ErrorInfo domain");
    assert_eq!(
        status
            .metadata()
            .get(REASON_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some(reason),
        "{what}: {REASON_HEADER} trailer: {status:?}"
    );
    let error = tenure_client::Error::from(status);
    assert_eq!(error.reason_str(), reason, "{what}: client error {error}");
}

/// Every bad request, each wrong in one way only. Renew and release aim at the held lease with
/// everything else right, so a check that let one through would change it.
fn table(held: &pb::Lease) -> Vec<Case> {
    let bad_acquire = || acquire(BAD, HOLDER);
    let renew = || pb::RenewRequest {
        resource: HELD.into(),
        lease_id: held.lease_id.clone(),
        holder: HOLDER.into(),
        fencing_token: held.fencing_token,
        ttl: ttl(600, 0),
        request_id: String::new(),
    };
    let release = || pb::ReleaseRequest {
        resource: HELD.into(),
        lease_id: held.lease_id.clone(),
        holder: HOLDER.into(),
        fencing_token: held.fencing_token,
        request_id: String::new(),
    };
    let validate = || pb::ValidateRequest {
        resource: HELD.into(),
        lease_id: held.lease_id.clone(),
        fencing_token: held.fencing_token,
        ..Default::default()
    };
    let get = || pb::GetResourceRequest {
        name: HELD.into(),
        consistency: 0,
    };
    let metadata = |entries: Vec<(String, String)>| pb::AcquireRequest {
        metadata: entries.into_iter().collect(),
        ..bad_acquire()
    };

    const INVALID: Code = Code::InvalidArgument;
    const RANGE: Code = Code::OutOfRange;
    let mut cases: Vec<Case> = Vec::new();

    // Names: resource and holder alike, on acquire.
    let bad_names = bad_names();
    for (what, name) in &bad_names {
        cases.push((
            format!("acquire: resource with {what}"),
            Call::Acquire(pb::AcquireRequest {
                resource: name.clone(),
                ..bad_acquire()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("acquire: holder with {what}"),
            Call::Acquire(pb::AcquireRequest {
                holder: name.clone(),
                ..bad_acquire()
            }),
            INVALID,
            "invalid_argument",
        ));
    }

    // ttl: malformed or negative is invalid_argument; below 1 s or above the ceiling (or the
    // ad-hoc policy's max_ttl, checked at apply) is ttl_out_of_range.
    let ttls: Vec<(&str, Option<prost_types::Duration>, Code, &'static str)> = vec![
        ("ttl 0", ttl(0, 0), RANGE, "ttl_out_of_range"),
        ("ttl 1 ns", ttl(0, 1), RANGE, "ttl_out_of_range"),
        ("ttl 999 ms", ttl(0, 999_999_999), RANGE, "ttl_out_of_range"),
        ("ttl -5 s", ttl(-5, 0), INVALID, "invalid_argument"),
        ("ttl -1 ns", ttl(0, -1), INVALID, "invalid_argument"),
        ("ttl 1 s - 1 ns", ttl(1, -1), INVALID, "invalid_argument"),
        (
            "ttl i64::MIN s",
            ttl(i64::MIN, 0),
            INVALID,
            "invalid_argument",
        ),
        (
            "ttl nanos = 1e9",
            ttl(1, 1_000_000_000),
            INVALID,
            "invalid_argument",
        ),
        (
            "ttl 25 h (over the ad-hoc max_ttl)",
            ttl(25 * 60 * 60, 0),
            RANGE,
            "ttl_out_of_range",
        ),
        (
            "ttl 90 days + 1 s",
            ttl(90 * DAY_SECONDS + 1, 0),
            RANGE,
            "ttl_out_of_range",
        ),
        (
            "ttl 90 days + 1 ms",
            ttl(90 * DAY_SECONDS, 1_000_000),
            RANGE,
            "ttl_out_of_range",
        ),
        (
            "ttl 10 years",
            ttl(3650 * DAY_SECONDS, 0),
            RANGE,
            "ttl_out_of_range",
        ),
        (
            "ttl i64::MAX s",
            ttl(i64::MAX, 0),
            RANGE,
            "ttl_out_of_range",
        ),
        (
            "ttl i64::MAX s + 999999999 ns",
            ttl(i64::MAX, 999_999_999),
            RANGE,
            "ttl_out_of_range",
        ),
    ];
    for (what, value, code, reason) in ttls {
        cases.push((
            format!("acquire: {what}"),
            Call::Acquire(pb::AcquireRequest {
                ttl: value,
                ..bad_acquire()
            }),
            code,
            reason,
        ));
        cases.push((
            format!("renew: {what}"),
            Call::Renew(pb::RenewRequest {
                ttl: value,
                ..renew()
            }),
            code,
            reason,
        ));
    }

    // Enums: unknown values, and a mode the ad-hoc policy does not allow.
    for value in [99, -1, 4, i32::MAX] {
        cases.push((
            format!("acquire: mode = {value}"),
            Call::Acquire(pb::AcquireRequest {
                mode: value,
                ..bad_acquire()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("acquire: on_conflict = {value}"),
            Call::Acquire(pb::AcquireRequest {
                on_conflict: value,
                ..bad_acquire()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("get_resource: consistency = {value}"),
            Call::GetResource(pb::GetResourceRequest {
                consistency: value,
                ..get()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("validate: consistency = {value}"),
            Call::Validate(pb::ValidateRequest {
                consistency: value,
                ..validate()
            }),
            INVALID,
            "invalid_argument",
        ));
    }
    cases.push((
        "acquire: mode READ on an exclusive-only (ad-hoc) resource".into(),
        Call::Acquire(pb::AcquireRequest {
            mode: pb::LeaseMode::Read as i32,
            ..bad_acquire()
        }),
        INVALID,
        "invalid_mode",
    ));

    // Metadata over 16 KiB of keys and values (but well under the transport limit).
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
        cases.push((
            format!("acquire: metadata with {what}"),
            Call::Acquire(metadata(entries)),
            INVALID,
            "invalid_argument",
        ));
    }

    // Keys over 128 bytes, or with control characters.
    cases.push((
        "acquire: idempotency_key of 129 bytes".into(),
        Call::Acquire(pb::AcquireRequest {
            idempotency_key: long(129),
            ..bad_acquire()
        }),
        INVALID,
        "invalid_argument",
    ));
    for (what, request_id) in [
        ("129 bytes", long(129)),
        ("a control character", "id\u{7}".into()),
    ] {
        cases.push((
            format!("acquire: request_id with {what}"),
            Call::Acquire(pb::AcquireRequest {
                request_id: request_id.clone(),
                ..bad_acquire()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("renew: request_id with {what}"),
            Call::Renew(pb::RenewRequest {
                request_id: request_id.clone(),
                ..renew()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("release: request_id with {what}"),
            Call::Release(pb::ReleaseRequest {
                request_id,
                ..release()
            }),
            INVALID,
            "invalid_argument",
        ));
    }
    for (what, lease_id) in [
        ("129 bytes", long(129)),
        ("a control character", "lse_\u{1b}".into()),
    ] {
        cases.push((
            format!("renew: lease_id with {what}"),
            Call::Renew(pb::RenewRequest {
                lease_id: lease_id.clone(),
                ..renew()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("release: lease_id with {what}"),
            Call::Release(pb::ReleaseRequest {
                lease_id: lease_id.clone(),
                ..release()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("validate: lease_id with {what}"),
            Call::Validate(pb::ValidateRequest {
                lease_id,
                ..validate()
            }),
            INVALID,
            "invalid_argument",
        ));
    }

    // Missing fields.
    cases.push((
        "renew: no fencing_token".into(),
        Call::Renew(pb::RenewRequest {
            fencing_token: 0,
            ..renew()
        }),
        INVALID,
        "invalid_argument",
    ));
    cases.push((
        "release: no fencing_token".into(),
        Call::Release(pb::ReleaseRequest {
            fencing_token: 0,
            ..release()
        }),
        INVALID,
        "invalid_argument",
    ));
    cases.push((
        "validate: neither lease_id nor fencing_token".into(),
        Call::Validate(pb::ValidateRequest {
            lease_id: String::new(),
            fencing_token: 0,
            ..validate()
        }),
        INVALID,
        "invalid_argument",
    ));
    cases.push((
        "renew: empty request".into(),
        Call::Renew(pb::RenewRequest::default()),
        INVALID,
        "invalid_argument",
    ));
    cases.push((
        "release: empty request".into(),
        Call::Release(pb::ReleaseRequest::default()),
        INVALID,
        "invalid_argument",
    ));
    cases.push((
        "acquire: empty request".into(),
        Call::Acquire(pb::AcquireRequest::default()),
        INVALID,
        "invalid_argument",
    ));

    // Bad names on the other methods.
    for (what, name) in &bad_names {
        cases.push((
            format!("renew: holder with {what}"),
            Call::Renew(pb::RenewRequest {
                holder: name.clone(),
                ..renew()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("release: resource with {what}"),
            Call::Release(pb::ReleaseRequest {
                resource: name.clone(),
                ..release()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("get_resource: name with {what}"),
            Call::GetResource(pb::GetResourceRequest {
                name: name.clone(),
                ..get()
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("validate: resource with {what}"),
            Call::Validate(pb::ValidateRequest {
                resource: name.clone(),
                ..validate()
            }),
            INVALID,
            "invalid_argument",
        ));
    }
    cases.extend(registry_rows(held));
    cases.extend(listing_rows(held));
    cases.extend(waiting_rows());
    cases
}

/// `CreateResource` and `Transfer`: every field, each wrong in one way only. Two rows pass
/// validation and are refused at apply (a taken name; the held ad-hoc lease is not
/// transferable), so they also go through a follower's forwarding to the leader.
/// The waiting room, bookings and watch (SPEC §4.7, §4.8, §4.12).
fn waiting_rows() -> Vec<Case> {
    const INVALID: Code = Code::InvalidArgument;
    let wait = |wait_timeout| pb::AcquireRequest {
        on_conflict: pb::OnConflict::Wait as i32,
        wait_timeout,
        ..acquire(BAD, HOLDER)
    };
    let book = || pb::BookRequest {
        resource: BAD.into(),
        holder: HOLDER.into(),
        start: Some(prost_types::Timestamp {
            seconds: 4_000_000_000,
            nanos: 0,
        }),
        duration: ttl(60, 0),
        request_id: String::new(),
    };
    let mut cases: Vec<Case> = vec![
        (
            "acquire: negative wait_timeout".into(),
            Call::Acquire(wait(ttl(-1, 0))),
            INVALID,
            "invalid_argument",
        ),
        (
            "acquire: wait_timeout over 90 days".into(),
            Call::Acquire(wait(ttl(91 * DAY_SECONDS, 0))),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: no start".into(),
            Call::Book(pb::BookRequest {
                start: None,
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: start before 1970".into(),
            Call::Book(pb::BookRequest {
                start: Some(prost_types::Timestamp {
                    seconds: -5,
                    nanos: 0,
                }),
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: nanos out of range".into(),
            Call::Book(pb::BookRequest {
                start: Some(prost_types::Timestamp {
                    seconds: 4_000_000_000,
                    nanos: 1_000_000_000,
                }),
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: no duration".into(),
            Call::Book(pb::BookRequest {
                duration: None,
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: duration under 1 s".into(),
            Call::Book(pb::BookRequest {
                duration: ttl(0, 999_000_000),
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: duration over 90 days".into(),
            Call::Book(pb::BookRequest {
                duration: ttl(91 * DAY_SECONDS, 0),
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "book: start more than 366 days ahead".into(),
            Call::Book(pb::BookRequest {
                start: Some(prost_types::Timestamp {
                    seconds: 40_000_000_000,
                    nanos: 0,
                }),
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "cancel_booking: no such booking".into(),
            Call::CancelBooking(pb::CancelBookingRequest {
                resource: BAD.into(),
                holder: HOLDER.into(),
                start: Some(prost_types::Timestamp {
                    seconds: 4_000_000_000,
                    nanos: 0,
                }),
                request_id: String::new(),
            }),
            Code::NotFound,
            "booking_not_found",
        ),
        (
            "watch: both resource and prefix".into(),
            Call::Watch(pb::WatchRequest {
                resource: BAD.into(),
                prefix: "t50/".into(),
                ..Default::default()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "watch: live_only with a start_revision".into(),
            Call::Watch(pb::WatchRequest {
                resource: BAD.into(),
                start_revision: 5,
                live_only: true,
                ..Default::default()
            }),
            INVALID,
            "invalid_argument",
        ),
        (
            "watch: unknown event type".into(),
            Call::Watch(pb::WatchRequest {
                resource: BAD.into(),
                events: vec![99],
                ..Default::default()
            }),
            INVALID,
            "invalid_argument",
        ),
    ];
    for (what, name) in bad_names() {
        cases.push((
            format!("cancel_wait: resource {what}"),
            Call::CancelWait(pb::CancelWaitRequest {
                resource: name.clone(),
                holder: HOLDER.into(),
                request_id: String::new(),
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("cancel_wait: holder {what}"),
            Call::CancelWait(pb::CancelWaitRequest {
                resource: BAD.into(),
                holder: name.clone(),
                request_id: String::new(),
            }),
            INVALID,
            "invalid_argument",
        ));
        cases.push((
            format!("book: resource {what}"),
            Call::Book(pb::BookRequest {
                resource: name.clone(),
                ..book()
            }),
            INVALID,
            "invalid_argument",
        ));
        // An empty resource and prefix is a watch of everything.
        if !name.is_empty() {
            cases.push((
                format!("watch: resource {what}"),
                Call::Watch(pb::WatchRequest {
                    resource: name.clone(),
                    ..Default::default()
                }),
                INVALID,
                "invalid_argument",
            ));
            cases.push((
                format!("watch: prefix {what}"),
                Call::Watch(pb::WatchRequest {
                    prefix: name.clone(),
                    ..Default::default()
                }),
                INVALID,
                "invalid_argument",
            ));
        }
    }
    cases
}

fn registry_rows(held: &pb::Lease) -> Vec<Case> {
    const INVALID: Code = Code::InvalidArgument;
    let create = |policy: pb::Policy| pb::CreateResourceRequest {
        name: "t50/registered".into(),
        policy: Some(policy),
        ..Default::default()
    };
    let duration = |seconds: i64, nanos: i32| Some(prost_types::Duration { seconds, nanos });
    let mut cases: Vec<Case> = Vec::new();
    let mut invalid =
        |what: String, call: Call| cases.push((what, call, INVALID, "invalid_argument"));

    for (what, name) in bad_names().into_iter().filter(|(what, _)| *what != "empty") {
        invalid(
            format!("create_resource: name with {what}"),
            Call::CreateResource(pb::CreateResourceRequest {
                name,
                ..create(pb::Policy::default())
            }),
        );
    }
    let bad_labels = [
        ("a control character", "kind\u{7}".to_string()),
        ("a newline", "a\nb".to_string()),
        ("257 bytes", long(257)),
    ];
    for (what, label) in &bad_labels {
        invalid(
            format!("create_resource: kind with {what}"),
            Call::CreateResource(pb::CreateResourceRequest {
                kind: label.clone(),
                ..create(pb::Policy::default())
            }),
        );
        invalid(
            format!("create_resource: display_name with {what}"),
            Call::CreateResource(pb::CreateResourceRequest {
                display_name: label.clone(),
                ..create(pb::Policy::default())
            }),
        );
        invalid(
            format!("create_resource: policy.kind with {what}"),
            Call::CreateResource(create(pb::Policy {
                kind: label.clone(),
                ..Default::default()
            })),
        );
        invalid(
            format!("create_resource: policy.display_name with {what}"),
            Call::CreateResource(create(pb::Policy {
                display_name: label.clone(),
                ..Default::default()
            })),
        );
    }

    // Durations: malformed, negative, below the minimum, past the 90-day ceiling, or
    // incoherent with the other fields.
    type Set = fn(&mut pb::Policy, Option<prost_types::Duration>);
    let fields: [(&str, Set); 5] = [
        ("default_ttl", |p, d| p.default_ttl = d),
        ("max_ttl", |p, d| p.max_ttl = d),
        ("max_lifetime", |p, d| p.max_lifetime = d),
        ("renewal_grace", |p, d| p.renewal_grace = d),
        ("lock_delay", |p, d| p.lock_delay = d),
    ];
    let malformed = [
        ("-1 s", duration(-1, 0)),
        ("-1 ns", duration(0, -1)),
        ("nanos = 1e9", duration(1, 1_000_000_000)),
        ("i64::MIN s", duration(i64::MIN, 0)),
        ("90 days + 1 s", duration(90 * DAY_SECONDS + 1, 0)),
        ("i64::MAX s", duration(i64::MAX, 999_999_999)),
    ];
    for (field, set) in fields {
        for (what, value) in &malformed {
            let mut policy = pb::Policy::default();
            set(&mut policy, *value);
            invalid(
                format!("create_resource: policy.{field} {what}"),
                Call::CreateResource(create(policy)),
            );
        }
    }
    let incoherent: Vec<(&str, pb::Policy)> = vec![
        (
            "default_ttl 0",
            pb::Policy {
                default_ttl: duration(0, 0),
                ..Default::default()
            },
        ),
        (
            "default_ttl 999 ms",
            pb::Policy {
                default_ttl: duration(0, 999_000_000),
                ..Default::default()
            },
        ),
        (
            "max_ttl 0",
            pb::Policy {
                max_ttl: duration(0, 0),
                ..Default::default()
            },
        ),
        (
            "max_lifetime 500 ms",
            pb::Policy {
                max_lifetime: duration(0, 500_000_000),
                ..Default::default()
            },
        ),
        (
            "default_ttl 2 h above max_ttl 1 h",
            pb::Policy {
                default_ttl: duration(7_200, 0),
                max_ttl: duration(3_600, 0),
                ..Default::default()
            },
        ),
        (
            "default_ttl 20 min above max_lifetime 10 min",
            pb::Policy {
                default_ttl: duration(1_200, 0),
                max_lifetime: duration(600, 0),
                ..Default::default()
            },
        ),
    ];
    for (what, policy) in incoherent {
        invalid(
            format!("create_resource: policy with {what}"),
            Call::CreateResource(create(policy)),
        );
    }

    // Modes, limits, FSM requirements.
    let modes: [(&str, Vec<i32>); 6] = [
        ("EXCLUSIVE", vec![pb::LeaseMode::Exclusive as i32]),
        (
            "UNSPECIFIED (= exclusive)",
            vec![pb::LeaseMode::Unspecified as i32],
        ),
        ("unknown 99", vec![99]),
        ("unknown -1", vec![-1]),
        ("READ and unknown 4", vec![pb::LeaseMode::Read as i32, 4]),
        (
            "WRITE and EXCLUSIVE",
            vec![pb::LeaseMode::Write as i32, pb::LeaseMode::Exclusive as i32],
        ),
    ];
    for (what, shared_modes) in modes {
        invalid(
            format!("create_resource: policy.shared_modes with {what}"),
            Call::CreateResource(create(pb::Policy {
                shared_modes,
                ..Default::default()
            })),
        );
    }
    for max_waiters in [1_000_001, u32::MAX] {
        invalid(
            format!("create_resource: policy.max_waiters {max_waiters}"),
            Call::CreateResource(create(pb::Policy {
                max_waiters,
                ..Default::default()
            })),
        );
    }
    for max_metadata_bytes in [16 * 1024 + 1, u32::MAX] {
        invalid(
            format!("create_resource: policy.max_metadata_bytes {max_metadata_bytes}"),
            Call::CreateResource(create(pb::Policy {
                max_metadata_bytes,
                ..Default::default()
            })),
        );
    }
    let pair = |machine: &str, transition: &str| pb::FsmRequirement {
        machine: machine.into(),
        transition: transition.into(),
    };
    let requirements: Vec<(&str, Vec<pb::FsmRequirement>)> = vec![
        ("an empty machine", vec![pair("", "ship")]),
        ("an empty transition", vec![pair("order", "")]),
        ("both empty", vec![pb::FsmRequirement::default()]),
        ("a control character", vec![pair("order\n", "ship")]),
        ("a machine of 257 bytes", vec![pair(&long(257), "ship")]),
        ("a transition of 257 bytes", vec![pair("order", &long(257))]),
        (
            "65 pairs",
            (0..65).map(|i| pair("order", &format!("t{i}"))).collect(),
        ),
    ];
    for (what, fsm_requirements) in requirements {
        invalid(
            format!("create_resource: policy.fsm_requirements with {what}"),
            Call::CreateResource(create(pb::Policy {
                fsm_requirements,
                ..Default::default()
            })),
        );
    }
    for (what, request_id) in [
        ("129 bytes", long(129)),
        ("a control character", "id\u{7}".into()),
    ] {
        invalid(
            format!("create_resource: request_id with {what}"),
            Call::CreateResource(pb::CreateResourceRequest {
                request_id,
                ..create(pb::Policy::default())
            }),
        );
    }

    // Transfer of the held lease, everything else right.
    let transfer = || pb::TransferRequest {
        resource: HELD.into(),
        lease_id: held.lease_id.clone(),
        holder: HOLDER.into(),
        fencing_token: held.fencing_token,
        to_holder: "t50-next".into(),
        to_principal: String::new(),
        request_id: String::new(),
    };
    for (what, name) in bad_names() {
        invalid(
            format!("transfer: resource with {what}"),
            Call::Transfer(pb::TransferRequest {
                resource: name.clone(),
                ..transfer()
            }),
        );
        invalid(
            format!("transfer: holder with {what}"),
            Call::Transfer(pb::TransferRequest {
                holder: name.clone(),
                ..transfer()
            }),
        );
        invalid(
            format!("transfer: to_holder with {what}"),
            Call::Transfer(pb::TransferRequest {
                to_holder: name,
                ..transfer()
            }),
        );
    }
    for (what, lease_id) in [
        ("129 bytes", long(129)),
        ("a control character", "lse_\u{1b}".into()),
    ] {
        invalid(
            format!("transfer: lease_id with {what}"),
            Call::Transfer(pb::TransferRequest {
                lease_id,
                ..transfer()
            }),
        );
    }
    invalid(
        "transfer: no fencing_token".into(),
        Call::Transfer(pb::TransferRequest {
            fencing_token: 0,
            ..transfer()
        }),
    );
    for (what, to_principal) in &bad_labels {
        invalid(
            format!("transfer: to_principal with {what}"),
            Call::Transfer(pb::TransferRequest {
                to_principal: to_principal.clone(),
                ..transfer()
            }),
        );
    }
    invalid(
        "transfer: request_id of 129 bytes".into(),
        Call::Transfer(pb::TransferRequest {
            request_id: long(129),
            ..transfer()
        }),
    );
    invalid(
        "transfer: empty request".into(),
        Call::Transfer(pb::TransferRequest::default()),
    );

    // Valid requests the state machine refuses, changing nothing.
    cases.push((
        "create_resource: the name of a held ad-hoc resource".into(),
        Call::CreateResource(pb::CreateResourceRequest {
            name: HELD.into(),
            ..Default::default()
        }),
        Code::AlreadyExists,
        "already_exists",
    ));
    cases.push((
        "transfer: an ad-hoc lease (not transferable)".into(),
        Call::Transfer(transfer()),
        Code::FailedPrecondition,
        "not_transferable",
    ));
    cases
}

/// `ListResources`, `ListLeases`, `History`, and `Validate`'s FSM pair.
fn listing_rows(held: &pb::Lease) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut invalid = |what: String, call: Call| {
        cases.push((what, call, Code::InvalidArgument, "invalid_argument"))
    };
    let bad_page_sizes = [1_001, u32::MAX];
    let bad_consistency = [99, -1];

    let resources = pb::ListResourcesRequest::default;
    for (what, prefix) in bad_names().into_iter().filter(|(what, _)| *what != "empty") {
        invalid(
            format!("list_resources: prefix with {what}"),
            Call::ListResources(pb::ListResourcesRequest {
                prefix,
                ..resources()
            }),
        );
    }
    for page_size in bad_page_sizes {
        invalid(
            format!("list_resources: page_size {page_size}"),
            Call::ListResources(pb::ListResourcesRequest {
                page_size,
                ..resources()
            }),
        );
    }
    for page_token in ["has space", "t50|held", "\u{7}"]
        .map(String::from)
        .into_iter()
        .chain([long(129)])
    {
        invalid(
            format!("list_resources: page_token {:.20?}", page_token),
            Call::ListResources(pb::ListResourcesRequest {
                page_token,
                ..resources()
            }),
        );
    }
    for consistency in bad_consistency {
        invalid(
            format!("list_resources: consistency = {consistency}"),
            Call::ListResources(pb::ListResourcesRequest {
                consistency,
                ..resources()
            }),
        );
    }

    let leases = || pb::ListLeasesRequest {
        holder: HOLDER.into(),
        ..Default::default()
    };
    invalid(
        "list_leases: neither holder nor principal".into(),
        Call::ListLeases(pb::ListLeasesRequest::default()),
    );
    for (what, holder) in bad_names().into_iter().filter(|(what, _)| *what != "empty") {
        invalid(
            format!("list_leases: holder with {what}"),
            Call::ListLeases(pb::ListLeasesRequest { holder, ..leases() }),
        );
    }
    for (what, principal) in [
        ("a control character", "p\u{7}".to_string()),
        ("257 bytes", long(257)),
    ] {
        invalid(
            format!("list_leases: principal with {what}"),
            Call::ListLeases(pb::ListLeasesRequest {
                holder: String::new(),
                principal,
                ..leases()
            }),
        );
    }
    for page_size in bad_page_sizes {
        invalid(
            format!("list_leases: page_size {page_size}"),
            Call::ListLeases(pb::ListLeasesRequest {
                page_size,
                ..leases()
            }),
        );
    }
    for page_token in ["nopipe", "a b|c", "t50/held|", "|lse_1_0", "a|b|c"] {
        invalid(
            format!("list_leases: page_token {page_token:?}"),
            Call::ListLeases(pb::ListLeasesRequest {
                page_token: page_token.into(),
                ..leases()
            }),
        );
    }
    for consistency in bad_consistency {
        invalid(
            format!("list_leases: consistency = {consistency}"),
            Call::ListLeases(pb::ListLeasesRequest {
                consistency,
                ..leases()
            }),
        );
    }

    let history = || pb::HistoryRequest {
        resource: HELD.into(),
        ..Default::default()
    };
    for (what, resource) in bad_names() {
        invalid(
            format!("history: resource with {what}"),
            Call::History(pb::HistoryRequest {
                resource,
                ..history()
            }),
        );
    }
    for page_size in bad_page_sizes {
        invalid(
            format!("history: page_size {page_size}"),
            Call::History(pb::HistoryRequest {
                page_size,
                ..history()
            }),
        );
    }
    for order in [3, 99, -1] {
        invalid(
            format!("history: order = {order}"),
            Call::History(pb::HistoryRequest { order, ..history() }),
        );
    }
    for events in [
        vec![0],
        vec![99],
        vec![-1],
        vec![pb::EventType::Acquired as i32, 13],
    ] {
        invalid(
            format!("history: events {events:?}"),
            Call::History(pb::HistoryRequest {
                events,
                ..history()
            }),
        );
    }
    for page_token in [
        "x",
        "1",
        "1.x",
        "x.1",
        "-1.0",
        "1.4294967296",
        "1.2.3",
        "18446744073709551616.0",
    ] {
        invalid(
            format!("history: page_token {page_token:?}"),
            Call::History(pb::HistoryRequest {
                page_token: page_token.into(),
                ..history()
            }),
        );
    }
    for consistency in bad_consistency {
        invalid(
            format!("history: consistency = {consistency}"),
            Call::History(pb::HistoryRequest {
                consistency,
                ..history()
            }),
        );
    }

    let validate = || pb::ValidateRequest {
        resource: HELD.into(),
        lease_id: held.lease_id.clone(),
        fencing_token: held.fencing_token,
        ..Default::default()
    };
    let fsm: [(&str, String, String); 5] = [
        (
            "fsm_machine without fsm_transition",
            "order".into(),
            String::new(),
        ),
        (
            "fsm_transition without fsm_machine",
            String::new(),
            "ship".into(),
        ),
        (
            "fsm_machine with a control character",
            "order\u{7}".into(),
            "ship".into(),
        ),
        ("fsm_machine of 257 bytes", long(257), "ship".into()),
        ("fsm_transition of 257 bytes", "order".into(), long(257)),
    ];
    for (what, fsm_machine, fsm_transition) in fsm {
        invalid(
            format!("validate: {what}"),
            Call::Validate(pb::ValidateRequest {
                fsm_machine,
                fsm_transition,
                ..validate()
            }),
        );
    }
    cases
}

/// Messages over the 4 MiB transport limit: refused by the transport, RESOURCE_EXHAUSTED.
async fn oversized(channel: Channel, node: u64) {
    // The client's own limit must not refuse them first.
    let mut client = LeasesClient::new(channel).max_encoding_message_size(64 * MIB);
    for (what, bytes) in [("10 MiB", 10 * MIB), ("4.5 MiB", 4 * MIB + MIB / 2)] {
        let request = pb::AcquireRequest {
            metadata: [("k".to_string(), "v".repeat(bytes))].into_iter().collect(),
            ..acquire(BAD, HOLDER)
        };
        let result = send(&mut client, Call::Acquire(request)).await;
        expect_refused(
            &format!("node {node}: acquire with a metadata value of {what}"),
            result,
            Code::ResourceExhausted,
            "resource_exhausted",
        );
    }
    let result = send(
        &mut client,
        Call::GetResource(pb::GetResourceRequest {
            name: long(5 * MIB),
            consistency: 0,
        }),
    )
    .await;
    expect_refused(
        &format!("node {node}: get_resource with a 5 MiB name"),
        result,
        Code::ResourceExhausted,
        "resource_exhausted",
    );
}

/// Bytes that do not decode as an `AcquireRequest`: INVALID_ARGUMENT, never INTERNAL.
async fn undecodable(channel: Channel, node: u64) {
    const ACQUIRE: &str = "/tenure.v1.Leases/Acquire";
    let valid = || RawAcquireRequest {
        resource: BAD.into(),
        holder: HOLDER.into(),
        ttl: ttl(600, 0),
        metadata: HashMap::new(),
        request_id: Vec::new(),
    };
    let bad_utf8: Vec<(&str, RawAcquireRequest)> = vec![
        (
            "resource 0xff 0xfe",
            RawAcquireRequest {
                resource: vec![0xff, 0xfe],
                ..valid()
            },
        ),
        (
            "holder with a truncated sequence",
            RawAcquireRequest {
                holder: vec![b'h', 0xc3],
                ..valid()
            },
        ),
        (
            "resource and holder overlong '/'",
            RawAcquireRequest {
                resource: vec![0xc0, 0xaf],
                holder: vec![0xc0, 0xaf],
                ..valid()
            },
        ),
        (
            "holder with a lone surrogate",
            RawAcquireRequest {
                holder: vec![0xed, 0xa0, 0x80],
                ..valid()
            },
        ),
        (
            "a metadata value 0x80",
            RawAcquireRequest {
                metadata: [("k".to_string(), vec![0x80])].into_iter().collect(),
                ..valid()
            },
        ),
        (
            "request_id 0xfe",
            RawAcquireRequest {
                request_id: vec![0xfe],
                ..valid()
            },
        ),
    ];
    for (what, message) in bad_utf8 {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        let answer = async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            let codec =
                tonic_prost::ProstCodec::<RawAcquireRequest, pb::AcquireResponse>::default();
            grpc.unary(
                tonic::Request::new(message),
                PathAndQuery::from_static(ACQUIRE),
                codec,
            )
            .await
        };
        let result = tokio::time::timeout(CALL_TIMEOUT, answer)
            .await
            .expect("the node answered in time");
        expect_refused(
            &format!("node {node}: acquire with bad UTF-8 in {what}"),
            result,
            Code::InvalidArgument,
            "invalid_argument",
        );
    }

    let mut grpc = tonic::client::Grpc::new(channel);
    let answer = async {
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<WrongWireType, pb::AcquireResponse>::default();
        grpc.unary(
            tonic::Request::new(WrongWireType { resource: 7 }),
            PathAndQuery::from_static(ACQUIRE),
            codec,
        )
        .await
    };
    let result = tokio::time::timeout(CALL_TIMEOUT, answer)
        .await
        .expect("the node answered in time");
    expect_refused(
        &format!("node {node}: acquire with resource sent as a varint"),
        result,
        Code::InvalidArgument,
        "invalid_argument",
    );
}

/// A linearizable `GetResource` of the held resource, without the fields that move with the
/// lease clock.
async fn held_resource(client: &mut LeasesClient<Channel>) -> pb::Resource {
    let reply = tokio::time::timeout(
        CALL_TIMEOUT,
        client.get_resource(pb::GetResourceRequest {
            name: HELD.into(),
            consistency: 0,
        }),
    )
    .await
    .expect("the node answered in time")
    .unwrap_or_else(|status| panic!("get_resource {HELD}: {status:?}"));
    let mut resource = reply.into_inner().resource.expect("a resource");
    for lease in &mut resource.leases {
        lease.remaining = None;
        lease.expires_at = None;
    }
    resource
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_its_reason_and_changes_nothing() -> anyhow::Result<()> {
    let cluster = InProcessCluster::start(3, Default::default()).await?;
    let leader = cluster.leader(Duration::from_secs(10)).await?;
    let ids: Vec<u64> = cluster.addrs.keys().copied().collect();
    let mut channels = Vec::new();
    let mut clients = Vec::new();
    for id in &ids {
        let channel = connect(&cluster.addrs[id]).await;
        clients.push((*id, LeasesClient::new(channel.clone())));
        channels.push(channel);
    }

    // A lease held before the barrage.
    let leader_client = &mut clients
        .iter_mut()
        .find(|(id, _)| *id == leader)
        .expect("the leader's client")
        .1;
    let granted = send_acquire(leader_client, acquire(HELD, HOLDER)).await;
    let held = granted.lease.expect("the granted lease");
    assert_ne!(held.fencing_token, 0);
    for id in &ids {
        wait_applied(&cluster, *id, held.fencing_token).await;
    }
    let mut before = Vec::new();
    for (id, client) in &mut clients {
        let view = applied_view(&cluster, *id);
        assert_eq!(view.live_leases, 1, "node {id}: {view:?}");
        assert_eq!(view.held.len(), 1, "node {id}: {view:?}");
        before.push((*id, view, held_resource(client).await));
    }

    // The barrage, at every node.
    let cases = table(&held);
    for ((id, client), channel) in clients.iter_mut().zip(&channels) {
        for (what, call, code, reason) in &cases {
            let result = send(client, call.clone()).await;
            expect_refused(&format!("node {id}: {what}"), result, *code, reason);
        }
        oversized(channel.clone(), *id).await;
        undecodable(channel.clone(), *id).await;
    }

    // Every node is up and its state is what it was.
    let index = cluster.applied_index(leader);
    for id in &ids {
        wait_applied(&cluster, *id, index).await;
    }
    for ((id, client), (_, view_before, resource_before)) in clients.iter_mut().zip(&before) {
        assert_eq!(&applied_view(&cluster, *id), view_before, "node {id}");
        assert_eq!(&held_resource(client).await, resource_before, "node {id}");
    }

    // The held lease is still the live tenure, and a normal acquire works at every node.
    for (id, client) in &mut clients {
        let contended = send_acquire(client, acquire(HELD, "t50-other")).await;
        assert!(!contended.granted, "node {id}: {contended:?}");
        assert_eq!(contended.reason, "resource_unavailable", "node {id}");
        assert_eq!(
            contended
                .holders
                .iter()
                .map(|l| (l.lease_id.as_str(), l.fencing_token))
                .collect::<Vec<_>>(),
            vec![(held.lease_id.as_str(), held.fencing_token)],
            "node {id}"
        );
        let fresh = send_acquire(client, acquire(&format!("t50/after-{id}"), HOLDER)).await;
        assert!(fresh.granted, "node {id}: {fresh:?}");
        assert!(
            fresh
                .lease
                .is_some_and(|l| l.fencing_token > held.fencing_token),
            "node {id}"
        );
    }

    cluster.shutdown().await;
    Ok(())
}

async fn send_acquire(
    client: &mut LeasesClient<Channel>,
    request: pb::AcquireRequest,
) -> pb::AcquireResponse {
    let what = format!("acquire {} by {}", request.resource, request.holder);
    tokio::time::timeout(CALL_TIMEOUT, client.acquire(request))
        .await
        .expect("the node answered in time")
        .unwrap_or_else(|status| panic!("{what}: {status:?}"))
        .into_inner()
}
