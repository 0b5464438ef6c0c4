//! Must show 5: bad input gets the SPEC §3 code and reason, never `internal`, and leaves the
//! node up with its state unchanged.
//!
//! Every request goes through raw generated clients (or a raw `tonic::client::Grpc`) over a
//! channel to one node, so no client-library retry can hide an answer. The table is sent to
//! every node: followers validate before they forward, and the leader validates again at apply.
//! Each refusal is checked for its gRPC code, its `google.rpc.ErrorInfo` reason and domain, its
//! `tenure-reason` trailer, what `tenure_client::Error` makes of it, and, where the row says
//! which, the field its message names (SPEC §3.1).
//!
//! The table is [`row::Row`]s, one file per request family: [`leases`] (acquire, renew,
//! release, validate, get), [`registry`] (create and transfer), [`listing`] (lists, history),
//! [`waiting`] (the waiting room, bookings, watch), [`sessions`] (and session renewals on a
//! `KeepAlive` stream), [`many`] (`AcquireMany`); [`wire`] sends what no generated client would.

mod leases;
mod listing;
mod many;
mod registry;
mod row;
mod sessions;
mod waiting;
mod wire;

use std::time::Duration;

use tenure_client::pb;
use tenure_node::error::{ERROR_DOMAIN, REASON_HEADER};
use tenure_node::lease::{Lease, LeaseStatus, Policy};
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::started;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use row::{acquire, Base, Call, Row, BAD, HELD, HOLDER, POOL, POOL_UNITS};

/// Bounds every call and wait so a hung node fails the test instead of stalling it.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Every bad request, each wrong in one way only.
fn table(base: &Base) -> Vec<Row> {
    let mut rows = leases::rows(base);
    rows.extend(registry::rows(base));
    rows.extend(listing::rows(base));
    rows.extend(waiting::rows());
    rows.extend(sessions::rows(base));
    rows.extend(many::rows());
    rows
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

async fn connect(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("valid endpoint")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

async fn send(client: &mut LeasesClient<Channel>, call: Call) -> Result<(), Status> {
    tokio::time::timeout(CALL_TIMEOUT, call.send(client))
        .await
        .expect("the node answered in time")
}

/// The call must have failed with `code` and `reason`, in the ErrorInfo detail and the trailer;
/// returns the refusal.
fn expect_refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, Status>,
    code: Code,
    reason: &str,
) -> Status {
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
    let error = tenure_client::Error::from(status.clone());
    assert_eq!(error.reason_str(), reason, "{what}: client error {error}");
    status
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
    let (cluster, leader) = started(3).await;
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
    // A unit pool for the claims that ask too many units of it.
    tokio::time::timeout(
        CALL_TIMEOUT,
        leader_client.create_resource(pb::CreateResourceRequest {
            name: POOL.into(),
            policy: Some(pb::Policy {
                shared_modes: vec![pb::LeaseMode::Read as i32],
                total_units: POOL_UNITS,
                ..Default::default()
            }),
            ..Default::default()
        }),
    )
    .await
    .expect("the node answered in time")
    .unwrap_or_else(|status| panic!("register {POOL}: {status:?}"));
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
    let rows = table(&Base { held: &held });
    for ((id, client), channel) in clients.iter_mut().zip(&channels) {
        for row in &rows {
            let what = format!("node {id}: {}", row.what);
            let result = send(client, row.call.clone()).await;
            let status = expect_refused(&what, result, row.code, row.reason);
            if let Some(field) = row.field {
                assert!(
                    status.message().contains(field),
                    "{what}: the message names no {field}: {status:?}"
                );
            }
        }
        sessions::keep_alive(channel.clone(), *id, &Base { held: &held }).await;
        wire::oversized(channel.clone(), *id).await;
        wire::undecodable(channel.clone(), *id).await;
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
