//! `tenure-jepsen bench`: the same workloads against a local three-node Tenure cluster and a
//! local three-node etcd cluster, one after the other on the same machine, and a Markdown
//! table side by side with ratios. See docs/benchmarks.md.
//!
//! Every cell runs `clients` tasks in a closed loop, each with its own client (its own
//! connections to all three endpoints, starting at endpoint `i % 3`). Ops that start after
//! the warm-up and finish before the end count; their latencies go into one histogram. CPU
//! is the user + system time of the three server processes over the measured window.

pub mod cluster;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod http;
pub mod report;
pub mod scale;
pub mod sessions;
pub mod tenure;

mod failover;
mod measure;
mod session;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use cluster::{await_ready, LocalCluster, System, NODES};
use failover::failover;
pub use failover::Failover;
use measure::measure;
use session::{check_available, one_leader, rotated, term};
pub use session::{ready, Session};
pub use workload::Workload;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub systems: Vec<System>,
    pub workloads: Vec<Workload>,
    pub clients: Vec<usize>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Leader kills in the failover workload.
    pub kills: usize,
    /// Clients running lock cycles during the failover workload.
    pub failover_clients: usize,
    /// Active-lease counts for the scale run (Tenure only); empty: no scale run.
    pub scale: Vec<usize>,
    /// How long after its load each scale size reads RSS again (zero: it does not).
    pub scale_hold: Duration,
    /// The sessions scale run (Tenure only); None: not run.
    pub sessions: Option<sessions::SessionsOptions>,
    pub out_dir: PathBuf,
    pub tenured: PathBuf,
    /// Extra flags for every `tenured` (the defaults are what the tables measure).
    pub tenured_args: Vec<String>,
}

/// One measured cell of the table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    pub system: System,
    pub workload: Workload,
    pub clients: usize,
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub seconds: f64,
    pub ops_per_s: f64,
    /// Throughput in each minute of the measured window (the last may be part of one): how
    /// a long run ages.
    pub per_minute_ops_per_s: Vec<f64>,
    /// Microseconds.
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub cpu_s_per_1k: f64,
    /// Context switches of the three server processes' threads per op: each is a hand-off
    /// between threads or a wait on the network or the disk.
    pub switches_per_op: f64,
}

impl serde::Serialize for System {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[derive(Default, serde::Serialize)]
pub struct Results {
    pub cells: Vec<Cell>,
    pub failovers: Vec<Failover>,
    pub scale: Vec<scale::ScalePoint>,
    pub sessions: Option<sessions::SessionsPoint>,
    /// Elections nobody provoked: term changes during the throughput workloads (none are
    /// killed there), per system.
    pub unprovoked_elections: Vec<(System, u64)>,
}

/// Runs everything `options` asks for and writes `results.md` and `results.json` into the
/// output directory. The clusters' data lives under `<out>/data` and is removed at the end.
pub async fn run(options: &BenchOptions) -> Result<Results> {
    std::fs::create_dir_all(&options.out_dir)?;
    let mut results = Results::default();
    for &system in &options.systems {
        check_available(system)?;
    }
    for &system in &options.systems {
        let data = options.out_dir.join("data").join(system.name());
        let measured = bench_system(options, system, &data, &mut results).await;
        let _ = std::fs::remove_dir_all(&data);
        measured?;
    }
    if !options.scale.is_empty() {
        let data = options.out_dir.join("data").join("scale");
        let measured = scale::run(options, &data).await;
        let _ = std::fs::remove_dir_all(&data);
        results.scale = measured?;
    }
    if let Some(run) = &options.sessions {
        let data = options.out_dir.join("data").join("sessions");
        let measured = sessions::run(options, run, &data).await;
        let _ = std::fs::remove_dir_all(&data);
        let point = measured?;
        eprintln!("bench: sessions {point:?}");
        results.sessions = Some(point);
    }
    let _ = std::fs::remove_dir(options.out_dir.join("data"));
    let markdown = report::markdown(options, &results);
    std::fs::write(options.out_dir.join("results.md"), &markdown)?;
    std::fs::write(
        options.out_dir.join("results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    Ok(results)
}

async fn bench_system(
    options: &BenchOptions,
    system: System,
    data: &Path,
    results: &mut Results,
) -> Result<()> {
    let mut cluster = LocalCluster::start(system, data, &options.tenured, &options.tenured_args)?;
    let took = await_ready(system.name(), Duration::from_secs(30), || {
        ready(system, &cluster.endpoints, &[true; NODES as usize])
    })
    .await?;
    eprintln!("bench: {} cluster ready in {took:?}", system.name());
    if system.is_tenure() {
        tenure::unbounded_anonymous(&cluster.endpoints).await?;
    }
    let first_term = term(system, &cluster.endpoints).await?;
    let mut counted = false;
    for &workload in &options.workloads {
        if workload == Workload::Failover {
            if !counted {
                let elections = term(system, &cluster.endpoints).await? - first_term;
                results.unprovoked_elections.push((system, elections));
                counted = true;
            }
            let failover = failover(options, system, &mut cluster).await?;
            eprintln!(
                "bench: {} failover: {:?} ms (median {:.0})",
                system.name(),
                failover.millis,
                failover.median_ms()
            );
            results.failovers.push(failover);
            continue;
        }
        // Beside the gateway, acquire is measured at every client count too: what the
        // gateway adds under load.
        let beside_gateway =
            workload == Workload::Acquire && options.systems.contains(&System::TenureHttp);
        let counts: &[usize] = if workload.single_client() && !beside_gateway {
            &[1]
        } else {
            &options.clients
        };
        for &clients in counts {
            let cell = measure(options, &cluster, workload, clients).await?;
            eprintln!(
                "bench: {:>6} {:<9} {:>3} clients: {:>8.0} ops/s  p50 {:.2} ms  p99 {:.2} ms  {} errors",
                system.name(),
                workload.name(),
                clients,
                cell.ops_per_s,
                cell.p50_us as f64 / 1000.0,
                cell.p99_us as f64 / 1000.0,
                cell.errors
            );
            results.cells.push(cell);
        }
    }
    if !counted {
        let elections = term(system, &cluster.endpoints).await? - first_term;
        results.unprovoked_elections.push((system, elections));
    }
    Ok(())
}
