//! `tenure-jepsen abuse`: HTTP/2 abuse against a real three-node cluster (loopback, auth on)
//! while honest clients run lock cycles. Each phase measures the honest clients' throughput
//! and p99 and every node's resident memory:
//!
//! - `quiet`: honest clients alone, the baseline;
//! - `rapid-reset`: clients without a token open streams and cancel them at once, as fast as
//!   they can, on several connections (CVE-2023-44487), reconnecting whenever a node closes
//!   one;
//! - `idle-streams`: a principal with a valid client token opens 10,000 calls and never sends
//!   their bodies;
//! - `slow-watch`: a principal with a valid client token opens Watch streams over every
//!   resource from revision 0 and never reads them;
//! - `rapid-reset-auth`: the rapid reset with a valid client token;
//! - the connection attacks ([`connections`]): `idle-connections` (silent TCP connections
//!   from 64 addresses), `idle-gateway` (keep-alive connections to the gateway after a
//!   console file), `health-watch` (health Watch streams from one address), `rejoin` (the same
//!   WAIT acquire again and again, each call rejoining one wait);
//! - the noisy neighbour ([`quota`], `tenure-jepsen bench --workloads noisy`): a principal
//!   with the default quotas floods refused acquires with 16 KiB of metadata, fills its
//!   metadata quota and floods acquires it refuses (`quota-flood`), acquires fresh names,
//!   queues 10,000 waiters, watches every resource without reading, and floods `ListLeases`.
//!
//! The attack comes from 127.0.0.2 (and up), addresses that are not a member's, and runs on a thread
//! of its own at nice 19, standing in for a machine of its own:
//! on a 2-core box it would otherwise take CPU from the nodes by being there, whatever the
//! nodes do. The honest clients are 16 principals of their own. The targets: honest
//! throughput at least 80 % of the quiet baseline, honest p99 at most twice the baseline's,
//! no node's memory past twice its quiet size (a quota attack: past its quiet size plus
//! [`QUOTA_RSS_ALLOWANCE`], what the default quotas let one principal keep), and no node's
//! descriptors past [`DESCRIPTOR_BOUND`]. Each phase also reports how much each node's data
//! directory grew.

mod connections;
mod honest;
mod idle_streams;
pub mod quota;
mod rapid_reset;
mod slow_watch;
mod table;
mod wire;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tenure_client::Client;

use crate::bench::cluster::{await_ready, LocalCluster, System};
use honest::{honest, Recorder};
use idle_streams::idle_streams;
use rapid_reset::rapid_reset;
use slow_watch::{slow_watch, unread_watches};
pub use table::table;

/// What a run does.
pub struct AbuseOptions {
    pub tenured: PathBuf,
    pub out_dir: PathBuf,
    /// Length of each phase.
    pub phase: Duration,
    /// Honest clients running lock cycles throughout.
    pub honest: usize,
    /// Connections the rapid-reset attack uses at once.
    pub reset_connections: usize,
    /// Calls the idle-streams attack opens.
    pub idle_streams: usize,
    /// Watch streams the slow-watch attack opens.
    pub slow_watchers: usize,
    /// Connections the idle-connections and idle-gateway attacks keep open.
    pub idle_connections: usize,
    /// WAIT acquires the rejoin attack sends.
    pub rejoins: usize,
    /// The attacks to run, in order (default: all of [`ATTACKS`]).
    pub attacks: Vec<String>,
    /// More flags for every `tenured`.
    pub tenured_args: Vec<String>,
    /// Nodes with auth off: every caller is `anonymous`.
    pub auth_off: bool,
}

/// One phase's figures.
#[derive(Debug, serde::Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub honest_ops_per_s: f64,
    pub honest_p99_ms: f64,
    pub honest_errors: u64,
    /// The most each node held during the phase, in bytes, node 1 first.
    pub rss_max: Vec<u64>,
    /// The most descriptors each node held open during the phase.
    #[serde(default)]
    pub fds_max: Vec<u64>,
    /// How much each node's data directory grew during the phase, in bytes.
    #[serde(default)]
    pub disk_grown: Vec<u64>,
    /// What the attack did.
    pub attack: String,
    /// The most the noisy principal held of each quota during the phase (`used/limit`),
    /// as the leader's state counts it; only what it used.
    pub noisy_peak: String,
}

/// How long a phase goes on after its attack stops, for the nodes to settle.
const SETTLE: Duration = Duration::from_secs(5);
/// The HTTP/2 and connection attacks, in the order a run makes them (the default, with
/// [`DEFAULT_QUOTA_ATTACK`]).
pub const ATTACKS: [&str; 8] = [
    "rapid-reset",
    "rapid-reset-auth",
    "idle-streams",
    "slow-watch",
    "rejoin",
    "idle-connections",
    "idle-gateway",
    "health-watch",
];

/// The quota attack a run makes after [`ATTACKS`] without `--attacks`: writes the leader
/// refuses before proposing them.
pub const DEFAULT_QUOTA_ATTACK: &str = "quota-flood";

/// The most descriptors a node may hold under any attack: its connection caps (gRPC 8,192,
/// gateway 4,096, metrics 64) and the 2,048 it keeps for its own files and members.
pub const DESCRIPTOR_BOUND: u64 = 8192 + 4096 + 64 + 2048;

/// Loopback addresses the connection attacks come from.
const ATTACKING_ADDRESSES: usize = 64;

/// What a node may hold past its quiet size while one principal attacks within the default
/// quotas: its metadata (64 MiB) and exactly-once records (64 MiB) at their quotas, 100,000
/// leases with their resources and histories (≈ 1 KiB each), and what the allocator keeps
/// of the churn.
pub const QUOTA_RSS_ALLOWANCE: u64 = 384 << 20;

fn token(tag: &str) -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::rng().random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{tag}-{hex}")
}

struct Tokens {
    admin: String,
    /// One principal per honest client: `honest-0`, `honest-1`, …
    honest: Vec<String>,
    mallory: String,
    noisy: String,
}

/// Runs `attack` on a thread of its own at nice 19 until `stop`; its description when done.
fn spawn_attack(
    attack: &'static str,
    options: &AbuseOptions,
    (endpoints, gateways): (Vec<String>, Vec<String>),
    tokens: &Tokens,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<String> {
    let (connections, idle, watchers) = (
        options.reset_connections,
        options.idle_streams,
        options.slow_watchers,
    );
    let (idle_connections, rejoins) = (options.idle_connections, options.rejoins);
    let (mallory, noisy, admin) = (
        tokens.mallory.clone(),
        tokens.noisy.clone(),
        tokens.admin.clone(),
    );
    // A principal other than the attacker's, for the calls made beside an attack.
    let other = tokens.honest.first().cloned().unwrap_or_default();
    std::thread::spawn(move || {
        let _ = rustix::process::setpriority_process(None, 19);
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => return format!("no runtime: {e}"),
        };
        runtime.block_on(async move {
            let (a, b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
            match attack {
                "rapid-reset" | "rapid-reset-auth" => {
                    let token = (attack == "rapid-reset-auth").then_some(mallory);
                    let tasks: Vec<_> = (0..connections)
                        .map(|i| {
                            tokio::spawn(rapid_reset(
                                endpoints[i % endpoints.len()].clone(),
                                token.clone(),
                                stop.clone(),
                                (a.clone(), b.clone()),
                            ))
                        })
                        .collect();
                    for task in tasks {
                        let _ = task.await;
                    }
                    format!(
                        "{} streams opened and cancelled{} on {} connections",
                        a.load(Ordering::Relaxed),
                        if token.is_some() {
                            " with a client token"
                        } else {
                            ""
                        },
                        b.load(Ordering::Relaxed)
                    )
                }
                "idle-streams" => {
                    idle_streams(endpoints, idle, mallory, stop, a.clone(), b.clone()).await;
                    format!(
                        "{} calls opened without a body, {} refused or ended by the nodes",
                        a.load(Ordering::Relaxed),
                        b.load(Ordering::Relaxed)
                    )
                }
                "slow-watch" => {
                    slow_watch(endpoints, watchers, mallory, stop, a.clone()).await;
                    format!(
                        "{} Watch streams over every resource from revision 0, never read",
                        a.load(Ordering::Relaxed)
                    )
                }
                "rejoin" => connections::rejoin(&endpoints, rejoins, (mallory, other), stop).await,
                "idle-connections" => {
                    let shape = (idle_connections, ATTACKING_ADDRESSES);
                    connections::idle_connections(&endpoints, shape, other, stop).await
                }
                "idle-gateway" => {
                    let shape = (idle_connections / 4, ATTACKING_ADDRESSES);
                    connections::idle_gateway(&gateways, shape, other, stop).await
                }
                "health-watch" => connections::health_watch(&endpoints, stop).await,
                quota_attack => quota::run(quota_attack, endpoints, (noisy, admin), stop).await,
            }
        })
    })
}

fn write_tokens(dir: &Path, tokens: &Tokens) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("tokens");
    let mut lines = format!(
        "{} ops admin\n{} mallory client\n{} {} client\n{} nodes peer\n",
        tokens.admin,
        tokens.mallory,
        tokens.noisy,
        quota::PRINCIPAL,
        token("peer")
    );
    for (i, honest) in tokens.honest.iter().enumerate() {
        lines.push_str(&format!("{honest} honest-{i} client\n"));
    }
    std::fs::write(&path, lines)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(path)
}

/// Adds what the noisy principal holds now to `peak` (quota → the most used, its limit).
async fn noisy_usage(admin: &Client, peak: &mut std::collections::BTreeMap<String, (u64, u64)>) {
    let Ok(view) = admin
        .with_timeout(Duration::from_secs(1))
        .get_quota(quota::PRINCIPAL)
        .await
    else {
        return;
    };
    for line in view.quotas.into_iter().filter(|line| line.used > 0) {
        let entry = peak.entry(line.quota).or_default();
        *entry = (entry.0.max(line.used), line.limit);
    }
}

/// Runs the phases; the figures of each.
pub async fn run(options: &AbuseOptions) -> Result<Vec<Phase>> {
    std::fs::create_dir_all(&options.out_dir)?;
    let tokens = Tokens {
        admin: token("admin"),
        honest: (0..options.honest).map(|_| token("honest")).collect(),
        mallory: token("mallory"),
        noisy: token("noisy"),
    };
    let token_file = write_tokens(&options.out_dir, &tokens)?;
    let cluster = LocalCluster::start(
        System::TenureHttp,
        &options.out_dir.join("nodes"),
        &options.tenured,
        &std::iter::once(match options.auth_off {
            true => "--insecure".to_string(),
            false => format!("--token-file={}", token_file.display()),
        })
        .chain(options.tenured_args.iter().cloned())
        .collect::<Vec<_>>(),
    )?;
    let endpoints = cluster.endpoints.clone();
    let admin = Client::new(&endpoints)?.with_token(&tokens.admin)?;
    await_ready("a leader", Duration::from_secs(30), || {
        let admin = admin.clone();
        async move {
            let status = admin.node_status(0).await?;
            anyhow::ensure!(status.leader_id != 0, "no leader yet");
            Ok(())
        }
    })
    .await?;
    // The attacks test the node-wide and per-connection caps: mallory's own quotas of watches
    // (1,000 per node; none of every resource) would refuse most of its streams first.
    let generous = ["watches", "all_resource_watches"]
        .into_iter()
        .map(|quota| tenure_client::pb::QuotaChange {
            quota: quota.into(),
            limit: 1_000_000,
            reset: false,
        })
        .collect();
    admin
        .set_quota(tenure_client::pb::SetQuotaRequest {
            principal: "mallory".into(),
            changes: generous,
            request_id: String::new(),
        })
        .await?;
    // The noisy neighbour keeps the default quotas, but for a few watches over everything.
    admin
        .set_quota(tenure_client::pb::SetQuotaRequest {
            principal: quota::PRINCIPAL.into(),
            changes: vec![tenure_client::pb::QuotaChange {
                quota: "all_resource_watches".into(),
                limit: quota::ALL_RESOURCE_WATCHES,
                reset: false,
            }],
            request_id: String::new(),
        })
        .await?;

    // Quiet phases stand between the attacks: the honest clients' own state keeps growing
    // (exactly-once records live 10 minutes), so each attack is measured against the quiet
    // phases on either side of it.
    let mut names: Vec<&'static str> = vec!["quiet"];
    let chosen: Vec<&'static str> = if options.attacks.is_empty() {
        ATTACKS.into_iter().chain([DEFAULT_QUOTA_ATTACK]).collect()
    } else {
        options
            .attacks
            .iter()
            .map(|attack| {
                ATTACKS
                    .into_iter()
                    .chain(quota::ATTACKS)
                    .find(|known| known == attack)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "unknown attack `{attack}` ({}, {})",
                            ATTACKS.join(", "),
                            quota::ATTACKS.join(", ")
                        )
                    })
            })
            .collect::<Result<_>>()?
    };
    for attack in chosen {
        names.extend([attack, "quiet"]);
    }
    let recorder = Arc::new(Recorder::new(names.len()));
    let stop_honest = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for (id, token) in tokens.honest.iter().enumerate() {
        let client = Client::new(&endpoints)?.with_token(token)?;
        workers.push(tokio::spawn(honest(
            client,
            id,
            recorder.clone(),
            stop_honest.clone(),
        )));
    }
    // Warm up before the baseline: the honest clients' resources and their histories fill
    // up to what they keep, so later phases do not count that growth against the attacks.
    tokio::time::sleep(Duration::from_secs(10)).await;
    recorder.latencies.lock().unwrap_or_else(|p| p.into_inner())[0].reset();

    let mut phases = Vec::new();
    for (index, name) in names.iter().enumerate() {
        recorder.phase.store(index, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let targets = (endpoints.clone(), cluster.http_endpoints.clone());
        let attack =
            (*name != "quiet").then(|| spawn_attack(name, options, targets, &tokens, stop.clone()));
        let started = Instant::now();
        let mut peak = std::collections::BTreeMap::<String, (u64, u64)>::new();
        let disk_at_start = cluster.disk_bytes();
        let mut rss_max = vec![0u64; endpoints.len()];
        let mut fds_max = vec![0u64; endpoints.len()];
        let mut disk_max = disk_at_start.clone();
        let mut sample = |rss_max: &mut Vec<u64>| {
            let now = [
                cluster.rss_bytes(),
                cluster.descriptors(),
                cluster.disk_bytes(),
            ];
            for (maxes, values) in [&mut *rss_max, &mut fds_max, &mut disk_max]
                .into_iter()
                .zip(now)
            {
                for (max, value) in maxes.iter_mut().zip(values) {
                    *max = (*max).max(value);
                }
            }
        };
        let mut ticks = 0u64;
        while started.elapsed() < options.phase {
            tokio::time::sleep(Duration::from_millis(250)).await;
            sample(&mut rss_max);
            ticks += 1;
            if ticks.is_multiple_of(4) {
                noisy_usage(&admin, &mut peak).await;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let attack = match attack {
            Some(thread) => {
                let mut joined = tokio::task::spawn_blocking(move || thread.join());
                loop {
                    tokio::select! {
                        done = &mut joined => break done?.unwrap_or_else(|_| "the attack panicked".into()),
                        () = tokio::time::sleep(Duration::from_millis(250)) => sample(&mut rss_max),
                    }
                }
            }
            None => "none".into(),
        };
        // What the attack leaves behind (connections closing, waits cancelled, leases
        // expiring) is its own cost, not the next quiet phase's: the phase goes on until the
        // nodes have settled.
        let settled = Instant::now();
        while settled.elapsed() < SETTLE {
            tokio::time::sleep(Duration::from_millis(250)).await;
            sample(&mut rss_max);
        }
        let elapsed = started.elapsed();
        let (count, p99) = {
            let latencies = recorder.latencies.lock().unwrap_or_else(|p| p.into_inner());
            let histogram = &latencies[index];
            (
                histogram.len(),
                histogram.value_at_quantile(0.99) as f64 / 1000.0,
            )
        };
        let phase = Phase {
            name,
            honest_ops_per_s: count as f64 / elapsed.as_secs_f64(),
            honest_p99_ms: p99,
            honest_errors: recorder.errors[index].load(Ordering::Relaxed),
            rss_max,
            fds_max: fds_max.clone(),
            disk_grown: disk_max
                .iter()
                .zip(&disk_at_start)
                .map(|(max, start)| max.saturating_sub(*start))
                .collect(),
            attack,
            noisy_peak: peak
                .iter()
                .map(|(quota, (used, limit))| format!("{quota} {used}/{limit}"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        tracing::info!(?phase, "phase done");
        phases.push(phase);
    }
    stop_honest.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    drop(cluster);
    let json = serde_json::to_string_pretty(&phases)?;
    std::fs::write(options.out_dir.join("abuse.json"), json).context("writing abuse.json")?;
    Ok(phases)
}
