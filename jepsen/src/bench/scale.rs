//! Tenure at 1k, 100k, 1M active leases: each size on a fresh cluster, loaded with long-ttl
//! leases, then: RSS per node, the newest snapshot's size and build time, renew throughput
//! of a fixed set of 64 leases against the full store, and the time from restarting every
//! node (kill -9, start again) until the cluster serves again. With `--scale-hold`, RSS once
//! more, that long after the load, when the load's exactly-once records are past their window.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use tenure_client::{pb, prost_duration, Client};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::cluster::{await_ready, LocalCluster, System, NODES};
use super::{measure, BenchOptions, Workload};

/// Leases loaded per acquire wave: each loader task acquires its share in a closed loop.
const LOADERS: usize = 64;
const LOAD_TTL: Duration = Duration::from_secs(6 * 3600);

#[derive(Clone, Debug, serde::Serialize)]
pub struct ScalePoint {
    pub leases: usize,
    pub load_seconds: f64,
    pub rss_bytes: Vec<u64>,
    pub snapshot_bytes: u64,
    pub snapshot_build_ms: f64,
    pub snapshot_index: u64,
    pub renew_ops_per_s: f64,
    pub renew_p50_us: u64,
    pub renew_p99_us: u64,
    pub restart_to_serving_ms: f64,
    pub rss_after_restart_bytes: Vec<u64>,
    /// RSS per node `--scale-hold` after the load ended, past the exactly-once window, with
    /// renews applied meanwhile (empty without `--scale-hold`).
    pub rss_after_hold_bytes: Vec<u64>,
}

pub async fn run(options: &BenchOptions, data: &Path) -> Result<Vec<ScalePoint>> {
    let mut points = Vec::new();
    for &leases in &options.scale {
        let point = one_size(options, data, leases).await;
        let _ = std::fs::remove_dir_all(data);
        let point = point?;
        eprintln!("bench: scale {point:?}");
        points.push(point);
    }
    Ok(points)
}

async fn one_size(options: &BenchOptions, data: &Path, leases: usize) -> Result<ScalePoint> {
    let mut cluster = started_tenure(options, data).await?;
    let load_seconds = load(&cluster.endpoints, leases).await?;
    let loaded_at = Instant::now();
    // Let followers apply what the leader acknowledged before reading their memory, and let
    // a snapshot the load started finish: renew throughput is that of the store, not of the
    // store while it writes a snapshot on one of the two cores (that cost is the build time).
    await_applied(&cluster.endpoints).await?;
    await_no_snapshot_building(&cluster.endpoints).await?;
    let rss_bytes = cluster.rss_bytes();
    let renew = measure(options, &cluster, Workload::Renew, 64).await?;
    let (snapshot_bytes, snapshot_build_ms, snapshot_index) = newest_snapshot(&cluster).await?;
    let rss_after_hold_bytes = if options.scale_hold.is_zero() {
        Vec::new()
    } else {
        // Renews are entries: applying them forgets what is older than the window, and the
        // allocator gives back what that emptied while it keeps working.
        tokio::time::sleep_until(loaded_at + options.scale_hold).await;
        measure(options, &cluster, Workload::Renew, 64).await?;
        await_applied(&cluster.endpoints).await?;
        await_no_snapshot_building(&cluster.endpoints).await?;
        cluster.rss_bytes()
    };

    for id in 1..=NODES {
        cluster.procs.kill9(id)?;
    }
    let restarted = Instant::now();
    for id in 1..=NODES {
        cluster.procs.restart(id)?;
    }
    await_ready("tenure", Duration::from_secs(300), || {
        super::ready(System::Tenure, &cluster.endpoints, &[true; NODES as usize])
    })
    .await?;
    let restart_to_serving_ms = restarted.elapsed().as_secs_f64() * 1000.0;
    let active = Client::new(&cluster.endpoints)?
        .node_status(0)
        .await?
        .active_leases;
    if (active as usize) < leases {
        bail!("after the restart the store holds {active} leases, not {leases}");
    }
    Ok(ScalePoint {
        leases,
        load_seconds,
        rss_bytes,
        snapshot_bytes,
        snapshot_build_ms,
        snapshot_index,
        renew_ops_per_s: renew.ops_per_s,
        renew_p50_us: renew.p50_us,
        renew_p99_us: renew.p99_us,
        restart_to_serving_ms,
        rss_after_restart_bytes: cluster.rss_bytes(),
        rss_after_hold_bytes,
    })
}

/// A fresh three-node Tenure cluster under `data`, ready to serve.
pub(super) async fn started_tenure(options: &BenchOptions, data: &Path) -> Result<LocalCluster> {
    let cluster = LocalCluster::start(
        System::Tenure,
        data,
        &options.tenured,
        &options.tenured_args,
    )?;
    await_ready("tenure", Duration::from_secs(30), || {
        super::ready(System::Tenure, &cluster.endpoints, &[true; NODES as usize])
    })
    .await?;
    super::tenure::unbounded_anonymous(&cluster.endpoints).await?;
    Ok(cluster)
}

/// Acquires `leases` distinct resources (`scale/N`) with a long ttl from 64 clients.
async fn load(endpoints: &[String], leases: usize) -> Result<f64> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for i in 0..LOADERS {
        let client = Client::new(super::rotated(endpoints, i))?;
        let next = next.clone();
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= leases as u64 {
                    return anyhow::Ok(());
                }
                let response = client
                    .acquire(pb::AcquireRequest {
                        resource: format!("scale/{n}"),
                        holder: format!("loader-{i}"),
                        ttl: Some(prost_duration(LOAD_TTL)),
                        ..Default::default()
                    })
                    .await?;
                if !response.granted {
                    bail!("scale/{n} not granted: {}", response.reason);
                }
            }
        });
    }
    let mut last_report = Instant::now();
    while let Some(done) = tasks.join_next().await {
        done??;
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "bench: loaded {} of {leases}",
                next.load(Ordering::Relaxed).min(leases as u64)
            );
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Waits until every node has applied the leader's commit index of when it was called.
async fn await_applied(endpoints: &[String]) -> Result<()> {
    let client = Client::new(endpoints)?;
    let leader = super::tenure::leader(endpoints).await?;
    let commit = client.node_status(leader as usize - 1).await?.commit_index;
    await_ready("followers", Duration::from_secs(120), || {
        let client = client.clone();
        async move {
            for i in 0..endpoints.len() {
                let applied = client.node_status(i).await?.applied_index;
                if applied < commit {
                    bail!("node {} applied {applied} < {commit}", i + 1);
                }
            }
            Ok(())
        }
    })
    .await?;
    Ok(())
}

/// Waits until no node is building a snapshot.
async fn await_no_snapshot_building(endpoints: &[String]) -> Result<()> {
    let client = Client::new(endpoints)?;
    await_ready("snapshots", Duration::from_secs(300), || {
        let client = client.clone();
        async move {
            for i in 0..endpoints.len() {
                let storage = client.node_status(i).await?.storage.unwrap_or_default();
                if storage.snapshot_building {
                    bail!("node {} is building a snapshot", i + 1);
                }
            }
            Ok(())
        }
    })
    .await?;
    Ok(())
}

/// The newest snapshot any node built: its size, build time and index.
async fn newest_snapshot(cluster: &LocalCluster) -> Result<(u64, f64, u64)> {
    let client = Client::new(&cluster.endpoints)?;
    let mut best = (0, 0.0, 0);
    for i in 0..cluster.endpoints.len() {
        let storage = client.node_status(i).await?.storage.unwrap_or_default();
        if storage.last_snapshot_index >= best.2 && storage.last_snapshot_build_micros > 0 {
            best = (
                storage.last_snapshot_bytes,
                storage.last_snapshot_build_micros as f64 / 1000.0,
                storage.last_snapshot_index,
            );
        }
    }
    Ok(best)
}
