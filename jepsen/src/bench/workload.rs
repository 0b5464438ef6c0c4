//! The workloads a cell measures, and what each system does for one op.

use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::cluster::System;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Workload {
    /// One replicated write: a Tenure acquire; an etcd put.
    Acquire,
    /// Acquire + release on distinct resources; etcd: lease grant + put-if-absent txn + revoke.
    Lock,
    /// Many clients, few resources: the waiting room; etcd: the concurrency mutex.
    Contended,
    /// Two clients take turns on one resource: the holder releases while the other waits in
    /// the queue; the latency is from the release sent to the waiter's grant received. etcd:
    /// Unlock while the other's Lock waits.
    Handoff,
    /// Renew a held lease on the client's KeepAlive stream; etcd: a keepalive on its stream.
    Renew,
    /// Renew a held lease with a unary call (Tenure only; etcd renews on its stream either
    /// way): what the stream saves.
    RenewUnary,
    /// Linearizable read of a resource's owner; etcd: a linearizable get.
    Read,
    /// Lock cycles while the leader is killed (kill -9): time to the next successful acquire.
    Failover,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::Acquire,
        Workload::Lock,
        Workload::Contended,
        Workload::Handoff,
        Workload::Renew,
        Workload::RenewUnary,
        Workload::Read,
        Workload::Failover,
    ];

    pub fn parse(name: &str) -> Result<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == name.trim())
            .with_context(|| {
                format!(
                    "unknown workload `{name}` (acquire, lock, contended, handoff, renew, renew-unary, read, failover)"
                )
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Acquire => "acquire",
            Workload::Lock => "lock",
            Workload::Contended => "contended",
            Workload::Handoff => "handoff",
            Workload::Renew => "renew",
            Workload::RenewUnary => "renew-unary",
            Workload::Read => "read",
            Workload::Failover => "failover",
        }
    }

    /// What each system does for one op.
    pub fn describe(self, system: System) -> &'static str {
        match (self, system) {
            (Workload::Acquire, System::Tenure) => "Acquire (one new lease)",
            (Workload::Acquire, System::Etcd) => "Put",
            (Workload::Lock | Workload::Failover, System::Tenure) => "Acquire + Release",
            (Workload::Lock | Workload::Failover, System::Etcd) => {
                "LeaseGrant + Txn(put if absent, bound to the lease) + LeaseRevoke"
            }
            (Workload::Contended, System::Tenure) => "Acquire(on_conflict=WAIT) + Release",
            (Workload::Contended, System::Etcd) => {
                "Lock (concurrency mutex on a session lease) + Unlock"
            }
            (Workload::Handoff, System::Tenure) => {
                "Release while the other's Acquire(on_conflict=WAIT) waits: release sent → waiter granted"
            }
            (Workload::Handoff, System::Etcd) => {
                "Unlock while the other's Lock waits: unlock sent → waiter's Lock returned"
            }
            (Workload::Renew, System::Tenure) => "KeepAlive (one renewal on the client's stream)",
            (Workload::RenewUnary, System::Tenure) => "Renew (one unary call)",
            (Workload::Renew | Workload::RenewUnary, System::Etcd) => {
                "LeaseKeepAlive (one request/response on the stream)"
            }
            (Workload::Read, System::Tenure) => "GetResource, linearizable",
            (Workload::Read, System::Etcd) => "Range, linearizable",
            (Workload::Acquire, System::TenureHttp) => {
                "POST /v1/resources/{name}:acquire (one new lease, JSON over HTTP/1.1)"
            }
            (Workload::Read, System::TenureHttp) => {
                "GET /v1/resources/{name}, linearizable (JSON over HTTP/1.1)"
            }
            (_, System::TenureHttp) => "not measured through the gateway",
        }
    }

    /// How long a handoff's waiter waits before the holder releases: a waiter of a live
    /// service has waited a while. etcd's waiter watches from a past revision, and etcd
    /// catches such a watch up on a 100 ms loop: a release within the first 100 ms measured
    /// that loop, not the handoff (≈ 60 ms).
    pub(super) const HANDOFF_SETTLE: Duration = Duration::from_millis(150);

    /// Workloads measured with one client (one pair for `Handoff`) only: their targets are
    /// latencies of a lone caller.
    pub fn single_client(self) -> bool {
        matches!(self, Workload::Acquire | Workload::Handoff)
    }

    /// Resources the clients share under contention: one per 8 clients.
    pub(super) fn contended_resources(clients: usize) -> usize {
        clients.div_ceil(8).max(1)
    }
}

/// One handoff, the same for both systems: until `queued` says the other client's `waiter`
/// waits in the queue, then [`Workload::HANDOFF_SETTLE`] more, then `release` is sent; the
/// waiter's answer and the time from sending the release to it.
pub(super) async fn time_handoff<T, E, Q, F, R, RE>(
    waiter: JoinHandle<std::result::Result<T, E>>,
    mut queued: Q,
    release: R,
) -> Result<(T, Duration)>
where
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
    Q: FnMut() -> F,
    F: Future<Output = Result<bool>>,
    R: Future<Output = std::result::Result<(), RE>> + Send + 'static,
    RE: std::error::Error + Send + Sync + 'static,
{
    while !queued().await? {
        if waiter.is_finished() {
            bail!("the waiter was answered before the holder released");
        }
    }
    tokio::time::sleep(Workload::HANDOFF_SETTLE).await;
    let began = Instant::now();
    let release = tokio::spawn(release);
    let next = waiter.await??;
    let handoff = began.elapsed();
    release.await??;
    Ok((next, handoff))
}
