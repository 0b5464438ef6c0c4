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
pub mod report;
pub mod scale;
pub mod tenure;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use cluster::{await_ready, LocalCluster, System, NODES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Workload {
    /// One replicated write: a Tenure acquire; an etcd put.
    Acquire,
    /// Acquire + release on distinct resources; etcd: lease grant + put-if-absent txn + revoke.
    Lock,
    /// Many clients, few resources: the waiting room; etcd: the concurrency mutex.
    Contended,
    /// Renew a held lease; etcd: a keepalive on its stream.
    Renew,
    /// Linearizable read of a resource's owner; etcd: a linearizable get.
    Read,
    /// Lock cycles while the leader is killed (kill -9): time to the next successful acquire.
    Failover,
}

impl Workload {
    pub const ALL: [Workload; 6] = [
        Workload::Acquire,
        Workload::Lock,
        Workload::Contended,
        Workload::Renew,
        Workload::Read,
        Workload::Failover,
    ];

    pub fn parse(name: &str) -> Result<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == name.trim())
            .with_context(|| {
                format!(
                    "unknown workload `{name}` (acquire, lock, contended, renew, read, failover)"
                )
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Acquire => "acquire",
            Workload::Lock => "lock",
            Workload::Contended => "contended",
            Workload::Renew => "renew",
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
            (Workload::Renew, System::Tenure) => "Renew",
            (Workload::Renew, System::Etcd) => {
                "LeaseKeepAlive (one request/response on the stream)"
            }
            (Workload::Read, System::Tenure) => "GetResource, linearizable",
            (Workload::Read, System::Etcd) => "Range, linearizable",
        }
    }

    /// Resources the clients share under contention: one per 8 clients.
    fn contended_resources(clients: usize) -> usize {
        clients.div_ceil(8).max(1)
    }
}

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
    /// Microseconds.
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub cpu_s_per_1k: f64,
}

impl serde::Serialize for System {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Failover times of one system, one per kill.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failover {
    pub system: System,
    pub clients: usize,
    pub millis: Vec<f64>,
    pub errors: u64,
}

impl Failover {
    pub fn median_ms(&self) -> f64 {
        let mut sorted = self.millis.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }
}

#[derive(Default, serde::Serialize)]
pub struct Results {
    pub cells: Vec<Cell>,
    pub failovers: Vec<Failover>,
    pub scale: Vec<scale::ScalePoint>,
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
    let _ = std::fs::remove_dir(options.out_dir.join("data"));
    let markdown = report::markdown(options, &results);
    std::fs::write(options.out_dir.join("results.md"), &markdown)?;
    std::fs::write(
        options.out_dir.join("results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    Ok(results)
}

fn check_available(system: System) -> Result<()> {
    match system {
        System::Tenure => Ok(()),
        #[cfg(feature = "etcd")]
        System::Etcd => cluster::etcd_bin().map(|_| ()),
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!(
            "this tenure-jepsen was built without the `etcd` feature; run jepsen/bench.sh (or build with --features etcd)"
        ),
    }
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
        let counts: &[usize] = if workload == Workload::Acquire {
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

/// Client `i`'s endpoints: all of them, starting at `i % n`.
fn rotated(endpoints: &[String], i: usize) -> Vec<String> {
    let n = endpoints.len();
    (0..n).map(|k| endpoints[(i + k) % n].clone()).collect()
}

pub enum Session {
    Tenure(Box<tenure::Session>),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd::Session>),
}

impl Session {
    pub async fn open(
        system: System,
        endpoints: &[String],
        workload: Workload,
        prefix: String,
        resource: String,
    ) -> Result<Session> {
        Ok(match system {
            System::Tenure => Session::Tenure(Box::new(
                tenure::Session::open(endpoints, workload, prefix, resource).await?,
            )),
            #[cfg(feature = "etcd")]
            System::Etcd => Session::Etcd(Box::new(
                etcd::Session::open(endpoints, workload, prefix, resource).await?,
            )),
            #[cfg(not(feature = "etcd"))]
            System::Etcd => bail!("built without the `etcd` feature"),
        })
    }

    pub async fn op(&mut self, n: u64) -> Result<()> {
        match self {
            Session::Tenure(s) => s.op(n).await,
            #[cfg(feature = "etcd")]
            Session::Etcd(s) => s.op(n).await,
        }
    }

    pub async fn close(self) {
        match self {
            Session::Tenure(s) => s.close().await,
            #[cfg(feature = "etcd")]
            Session::Etcd(s) => s.close().await,
        }
    }
}

/// Ready means every running node names one leader (the leader ids each node reported).
fn one_leader(mut leaders: Vec<u64>) -> Result<()> {
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
        System::Tenure => tenure::ready(endpoints, running).await,
        #[cfg(feature = "etcd")]
        System::Etcd => etcd::ready(endpoints, running).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!("built without the `etcd` feature"),
    }
}

async fn term(system: System, endpoints: &[String]) -> Result<u64> {
    match system {
        System::Tenure => tenure::term(endpoints).await,
        #[cfg(feature = "etcd")]
        System::Etcd => etcd::term(endpoints).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!("built without the `etcd` feature"),
    }
}

async fn leader(system: System, endpoints: &[String]) -> Result<u64> {
    match system {
        System::Tenure => tenure::leader(endpoints).await,
        #[cfg(feature = "etcd")]
        System::Etcd => etcd::leader(endpoints).await,
        #[cfg(not(feature = "etcd"))]
        System::Etcd => bail!("built without the `etcd` feature"),
    }
}

/// Opens `clients` sessions concurrently, client `i` on the rotated endpoints.
async fn open_sessions(
    system: System,
    endpoints: &[String],
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
        async move { Session::open(system, &endpoints, workload, prefix, resource).await }
    });
    futures::future::try_join_all(opening).await
}

/// What one client task saw in the measured window.
struct Tally {
    histogram: Histogram<u64>,
    ops: u64,
    errors: u64,
    first_error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 100 s at 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

async fn measure(
    options: &BenchOptions,
    cluster: &LocalCluster,
    workload: Workload,
    clients: usize,
) -> Result<Cell> {
    let system = cluster.system;
    let sessions = open_sessions(system, &cluster.endpoints, workload, clients).await?;
    let start = Instant::now() + options.warmup;
    let end = start + options.duration;
    let mut tasks = JoinSet::new();
    for mut session in sessions {
        tasks.spawn(async move {
            let mut tally = Tally {
                histogram: histogram(),
                ops: 0,
                errors: 0,
                first_error: None,
            };
            let mut n = 0u64;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                n += 1;
                let result = session.op(n).await;
                let finished = Instant::now();
                if began < start || finished > end {
                    continue;
                }
                match result {
                    Ok(()) => {
                        tally.ops += 1;
                        let micros = (finished - began).as_micros() as u64;
                        tally.histogram.saturating_record(micros.max(1));
                    }
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
            session.close().await;
            tally
        });
    }
    tokio::time::sleep_until(start).await;
    let cpu_before = cluster.cpu_time();
    tokio::time::sleep_until(end).await;
    let cpu = cluster.cpu_time().saturating_sub(cpu_before);
    let mut all = histogram();
    let (mut ops, mut errors, mut first_error) = (0, 0, None);
    while let Some(tally) = tasks.join_next().await {
        let tally = tally?;
        all.add(&tally.histogram)?;
        ops += tally.ops;
        errors += tally.errors;
        if first_error.is_none() {
            first_error = tally.first_error;
        }
    }
    let seconds = options.duration.as_secs_f64();
    Ok(Cell {
        system,
        workload,
        clients,
        ops,
        errors,
        first_error,
        seconds,
        ops_per_s: ops as f64 / seconds,
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        p999_us: all.value_at_quantile(0.999),
        cpu_s_per_1k: if ops == 0 {
            f64::NAN
        } else {
            cpu.as_secs_f64() * 1000.0 / ops as f64
        },
    })
}

/// Lock cycles from `failover_clients` clients; `kills` times: kill -9 the leader after two
/// seconds of load, and take the time from the kill to the end of the first successful
/// cycle that *started* after the kill. The killed node is restarted and the cluster is
/// ready again before the next kill.
async fn failover(
    options: &BenchOptions,
    system: System,
    cluster: &mut LocalCluster,
) -> Result<Failover> {
    let mut result = Failover {
        system,
        clients: options.failover_clients,
        millis: Vec::new(),
        errors: 0,
    };
    for _ in 0..options.kills {
        let sessions = open_sessions(
            system,
            &cluster.endpoints,
            Workload::Failover,
            options.failover_clients,
        )
        .await?;
        let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (recovered_tx, mut recovered) = mpsc::unbounded_channel::<Instant>();
        let mut tasks = JoinSet::new();
        for mut session in sessions {
            let killed_at = killed_at.clone();
            let stop = stop.clone();
            let recovered_tx = recovered_tx.clone();
            tasks.spawn(async move {
                let mut errors = 0u64;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let began = Instant::now();
                    let result = session.op(n).await;
                    let kill = *killed_at.lock().unwrap_or_else(|p| p.into_inner());
                    match result {
                        Ok(()) if kill.is_some_and(|k| began >= k) => {
                            let _ = recovered_tx.send(Instant::now());
                        }
                        Ok(()) => {}
                        Err(_) => {
                            errors += 1;
                            // A client whose node is gone must not spin.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                session.close().await;
                errors
            });
        }
        drop(recovered_tx);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let victim = leader(system, &cluster.endpoints).await?;
        let kill = Instant::now();
        *killed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(kill);
        cluster.procs.kill9(victim)?;
        let first = tokio::time::timeout(Duration::from_secs(60), recovered.recv()).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(errors) = tasks.join_next().await {
            result.errors += errors?;
        }
        match first {
            Ok(Some(at)) => result.millis.push((at - kill).as_secs_f64() * 1000.0),
            _ => bail!(
                "{}: no lock cycle succeeded within 60 s of killing the leader",
                system.name()
            ),
        }
        cluster.procs.restart(victim)?;
        await_ready(system.name(), Duration::from_secs(60), || {
            ready(system, &cluster.endpoints, &[true; NODES as usize])
        })
        .await?;
    }
    Ok(result)
}
