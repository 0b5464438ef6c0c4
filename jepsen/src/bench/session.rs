//! One client of either system behind one type, and the calls that ask each system in its own
//! way: is it available, is it ready, its term, its leader.

use std::time::Duration;

use anyhow::{bail, Result};

use super::cluster::System;
#[cfg(feature = "etcd")]
use super::etcd;
use super::{http, tenure, Workload};

pub(super) fn check_available(system: System) -> Result<()> {
    match system {
        System::Tenure | System::TenureHttp => Ok(()),
        #[cfg(feature = "etcd")]
        System::Etcd => super::cluster::etcd_bin().map(|_| ()),
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!(
            "this tenure-jepsen was built without the `etcd` feature; run jepsen/bench.sh (or build with --features etcd)"
        ),
    }
}

/// Client `i`'s endpoints: all of them, starting at `i % n`.
pub(super) fn rotated(endpoints: &[String], i: usize) -> Vec<String> {
    let n = endpoints.len();
    (0..n).map(|k| endpoints[(i + k) % n].clone()).collect()
}

pub enum Session {
    Tenure(Box<tenure::Session>),
    Http(Box<http::Session>),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd::Session>),
}

impl Session {
    /// A session on `endpoints` (gRPC) and, for `tenure-http`, the gateways `http` (in the
    /// same order).
    pub async fn open(
        system: System,
        (endpoints, http): (&[String], &[String]),
        workload: Workload,
        prefix: String,
        resource: String,
    ) -> Result<Session> {
        Ok(match system {
            System::Tenure => Session::Tenure(Box::new(
                tenure::Session::open(endpoints, workload, prefix, resource).await?,
            )),
            System::TenureHttp => Session::Http(Box::new(
                http::Session::open(endpoints, http, workload, prefix, resource).await?,
            )),
            #[cfg(feature = "etcd")]
            System::Etcd => Session::Etcd(Box::new(
                etcd::Session::open(endpoints, workload, prefix, resource).await?,
            )),
            #[cfg(not(feature = "etcd"))]
            System::Etcd => bail!("built without the `etcd` feature"),
        })
    }

    /// One op. `Some(latency)` when the op times a part of itself (a handoff: from the
    /// release to the waiter's grant, not its setup); `None`: the whole call is the latency.
    pub async fn op(&mut self, n: u64) -> Result<Option<Duration>> {
        match self {
            Session::Tenure(s) => s.op(n).await,
            Session::Http(s) => s.op(n).await,
            #[cfg(feature = "etcd")]
            Session::Etcd(s) => s.op(n).await,
        }
    }

    pub async fn close(self) {
        match self {
            Session::Tenure(s) => s.close().await,
            Session::Http(s) => s.close().await,
            #[cfg(feature = "etcd")]
            Session::Etcd(s) => s.close().await,
        }
    }
}

/// Ready means every running node names one leader (the leader ids each node reported).
pub(super) fn one_leader(mut leaders: Vec<u64>) -> Result<()> {
    leaders.sort_unstable();
    leaders.dedup();
    match leaders.as_slice() {
        [_] => Ok(()),
        [] => bail!("no running node"),
        many => bail!("the nodes name different leaders: {many:?}"),
    }
}

pub async fn ready(system: System, endpoints: &[String], running: &[bool]) -> Result<()> {
    match system {
        System::Tenure | System::TenureHttp => tenure::ready(endpoints, running).await,
        #[cfg(feature = "etcd")]
        System::Etcd => etcd::ready(endpoints, running).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!("built without the `etcd` feature"),
    }
}

pub(super) async fn term(system: System, endpoints: &[String]) -> Result<u64> {
    match system {
        System::Tenure | System::TenureHttp => tenure::term(endpoints).await,
        #[cfg(feature = "etcd")]
        System::Etcd => etcd::term(endpoints).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!("built without the `etcd` feature"),
    }
}

pub(super) async fn leader(system: System, endpoints: &[String]) -> Result<u64> {
    match system {
        System::Tenure | System::TenureHttp => tenure::leader(endpoints).await,
        #[cfg(feature = "etcd")]
        System::Etcd => etcd::leader(endpoints).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!("built without the `etcd` feature"),
    }
}

/// Opens `clients` sessions concurrently, client `i` on the rotated endpoints.
pub(super) async fn open_sessions(
    system: System,
    (endpoints, http): (&[String], &[String]),
    workload: Workload,
    clients: usize,
) -> Result<Vec<Session>> {
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let shared = Workload::contended_resources(clients);
    let opening = (0..clients).map(|i| {
        let prefix = format!("{}/{run}/c{i}", workload.name());
        let resource = match workload {
            Workload::Contended => format!("{}/{run}/r{}", workload.name(), i % shared),
            _ => format!("{}/{run}/own{i}", workload.name()),
        };
        let endpoints = rotated(endpoints, i);
        let http = match http.is_empty() {
            true => Vec::new(),
            false => rotated(http, i),
        };
        async move { Session::open(system, (&endpoints, &http), workload, prefix, resource).await }
    });
    futures::future::try_join_all(opening).await
}
