//! `tenure-jepsen`: break a real Tenure cluster and check every history.
//!
//! ```text
//! tenure-jepsen test --nodes 3 --time-limit 60s --nemesis partition,kill,pause,clock,loss --seed 7
//! tenure-jepsen check runs/seed-7/history.jsonl      # re-check a saved history
//! tenure-jepsen teardown                              # remove leftovers of a killed run
//! ```
//! Exit code: 0 pass, 1 anomaly or too little activity, 2 the harness itself failed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tenure_jepsen::bench::{self, cluster::System, BenchOptions, Workload};
use tenure_jepsen::checker::{self, CheckParams};
use tenure_jepsen::history::History;
use tenure_jepsen::nemesis::Fault;
use tenure_jepsen::run::{run_test, TestOptions};
use tenure_jepsen::workload::{Kind, WorkloadConfig};
use tenure_jepsen::{hosts, report};

#[derive(Parser)]
#[command(
    name = "tenure-jepsen",
    version,
    about = "Fault-injection tests for Tenure (runs as root)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a cluster on network-namespace hosts, run clients and faults, check the history.
    Test {
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        time_limit: Duration,
        /// Comma-separated: partition, kill, pause, clock, loss, member (empty: none).
        #[arg(long, default_value = "partition,kill,pause,clock,loss,member")]
        nemesis: String,
        /// Seed of the fault schedule and the clients' choices (default: random, printed).
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 12)]
        clients: u64,
        /// Ad-hoc exclusive resources (workload `exclusive`).
        #[arg(long, default_value_t = 8)]
        resources: u64,
        /// Comma-separated resource kinds the clients use: exclusive (ad-hoc r0…), shared
        /// (READ/WRITE with a unit pool, s0…), transfer (transferable, x0…), waiting (acquired
        /// with on_conflict=WAIT, w0…).
        #[arg(long, default_value = "exclusive,shared,transfer,waiting")]
        workload: String,
        /// Tasks that keep Watch streams open (every resource, one kind's prefix, one
        /// resource, in turn) and whose events are checked against the cluster's history.
        #[arg(long, default_value_t = 3)]
        watchers: u64,
        /// Where history.jsonl, summary.json, report.html and node logs go.
        #[arg(long)]
        out: Option<PathBuf>,
        /// A run with fewer checked grants fails.
        #[arg(long, default_value_t = 200)]
        min_grants: usize,
        /// A run with fewer leader changes fails.
        #[arg(long, default_value_t = 1)]
        min_leader_changes: usize,
        /// A run with fewer waits admitted from the waiting room fails.
        #[arg(long, default_value_t = 0)]
        min_admissions: usize,
        /// Largest clock-rate change the clock nemesis injects (0.02 = 2 %).
        #[arg(long, default_value_t = 0.02)]
        clock_epsilon: f64,
        /// Deliberately broken node: `stale-reads` serves linearizable reads from local state.
        #[arg(long)]
        broken: Option<String>,
        /// The tenured binary (default: next to this one; needs feature fault-injection).
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
        /// Auth and TLS on, as in production: a token file, a cluster CA and node
        /// certificates made for the run; the workload's clients use TLS and a client
        /// token whose principal has small quotas (leases, waiters), and the checker judges
        /// every quota refusal; setup, nemeses and watchers use an admin token.
        #[arg(long)]
        secure: bool,
    },
    /// Check a saved history again and write its report next to it.
    Check {
        history: PathBuf,
        #[arg(long)]
        clock_epsilon: Option<f64>,
    },
    /// Remove namespaces, links and processes left by a run that was killed.
    Teardown,
    /// HTTP/2 abuse against a local three-node Tenure cluster (loopback, auth on) beside
    /// honest lock cycles: rapid reset, idle streams, a Watch never read. Prints a Markdown
    /// table; exit 1 if an attack cost the honest clients more than 20 % of their quiet
    /// throughput or a node more than twice its quiet memory.
    Abuse {
        /// Length of each phase (quiet baseline, then each attack).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        phase: Duration,
        /// Honest clients running lock cycles throughout.
        #[arg(long, default_value_t = 16)]
        honest: usize,
        /// Connections the rapid-reset attack uses at once.
        #[arg(long, default_value_t = 4)]
        reset_connections: usize,
        /// Calls the idle-streams attack opens without sending their bodies.
        #[arg(long, default_value_t = 10_000)]
        idle_streams: usize,
        /// Watch streams over every resource that the slow-watch attack never reads.
        #[arg(long, default_value_t = 4)]
        slow_watchers: usize,
        /// Report the figures without failing on a missed target (short smoke runs).
        #[arg(long)]
        report_only: bool,
        /// Comma-separated attacks to run, each followed by a quiet phase (default:
        /// rapid-reset, idle-streams, slow-watch).
        #[arg(long, default_value = "")]
        attacks: String,
        /// A flag for every tenured, e.g. `--tenured-arg=--max-in-flight=1000` (repeatable).
        #[arg(long = "tenured-arg", allow_hyphen_values = true)]
        tenured_args: Vec<String>,
        /// Where abuse.md, abuse.json and the node logs go (default abuse-runs/<unix time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The tenured binary (default: next to this one; build it with --release).
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
    },
    /// Benchmark a local three-node Tenure cluster side by side with a local three-node etcd
    /// cluster (loopback, no root needed) and print a Markdown table with ratios.
    Bench {
        /// Comma-separated: tenure, etcd (etcd needs the `etcd` feature; see jepsen/bench.sh).
        #[arg(long, default_value = "tenure,etcd")]
        systems: String,
        /// Comma-separated: acquire, lock, contended, renew, read, failover; and `noisy` (Tenure
        /// only, not in the default): 16 honest principals running lock cycles beside one
        /// noisy neighbour that attacks within its quotas, in turn, each attack `--duration`
        /// long between quiet phases (see docs/benchmarks.md).
        #[arg(long, default_value = "acquire,lock,contended,renew,read,failover")]
        workloads: String,
        /// Comma-separated client counts for every workload but `acquire` (1 client).
        #[arg(long, default_value = "1,16,64")]
        clients: String,
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        warmup: Duration,
        /// Measured time of each cell.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Leader kills in the failover workload.
        #[arg(long, default_value_t = 5)]
        kills: usize,
        /// Clients running lock cycles while the leader is killed.
        #[arg(long, default_value_t = 16)]
        failover_clients: usize,
        /// Comma-separated active-lease counts for the Tenure scale run, e.g.
        /// 1000,100000,1000000 (empty: none).
        #[arg(long, default_value = "")]
        scale: String,
        /// Where results.md and results.json go (default bench-runs/<unix time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The tenured binary (default: next to this one; build it with --release).
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
        /// A flag for every tenured, e.g. `--tenured-arg=--election-min=150ms` (repeatable).
        #[arg(long = "tenured-arg", allow_hyphen_values = true)]
        tenured_args: Vec<String>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,tenure_jepsen=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tenure-jepsen: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Bench {
            systems,
            workloads,
            clients,
            warmup,
            duration,
            kills,
            failover_clients,
            scale,
            out,
            bin,
            tenured_args,
        } => {
            let list = |s: &str| -> Vec<String> {
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            };
            let numbers = |s: &str, what: &str| -> anyhow::Result<Vec<usize>> {
                list(s)
                    .iter()
                    .map(|n| {
                        n.replace('_', "")
                            .parse()
                            .map_err(|_| anyhow::anyhow!("--{what}: `{n}` is not a count"))
                    })
                    .collect()
            };
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut workloads = list(&workloads);
            let noisy = workloads.iter().any(|w| w == "noisy");
            workloads.retain(|w| w != "noisy");
            let options = BenchOptions {
                systems: list(&systems)
                    .iter()
                    .map(|s| System::parse(s))
                    .collect::<Result<_, _>>()?,
                workloads: workloads
                    .iter()
                    .map(|w| Workload::parse(w))
                    .collect::<Result<_, _>>()?,
                clients: numbers(&clients, "clients")?,
                warmup,
                duration,
                kills,
                failover_clients,
                scale: numbers(&scale, "scale")?,
                out_dir: out.unwrap_or_else(|| PathBuf::from(format!("bench-runs/{stamp}"))),
                tenured: match bin {
                    Some(bin) => bin,
                    None => tenure_jepsen::procs::tenured_bin()?,
                },
                tenured_args,
            };
            let runtime = tokio::runtime::Runtime::new()?;
            if !options.workloads.is_empty() {
                runtime.block_on(bench::run(&options))?;
                let table = std::fs::read_to_string(options.out_dir.join("results.md"))?;
                println!("{table}");
            }
            if noisy {
                let noisy = tenure_jepsen::abuse::AbuseOptions {
                    tenured: options.tenured.clone(),
                    out_dir: options.out_dir.join("noisy"),
                    phase: options.duration,
                    honest: 16,
                    reset_connections: 0,
                    idle_streams: 0,
                    slow_watchers: 0,
                    attacks: tenure_jepsen::abuse::quota::ATTACKS
                        .map(String::from)
                        .to_vec(),
                    tenured_args: options.tenured_args.clone(),
                };
                let phases = runtime.block_on(tenure_jepsen::abuse::run(&noisy))?;
                let (table, met) = tenure_jepsen::abuse::table(&phases);
                std::fs::write(noisy.out_dir.join("noisy.md"), &table)?;
                println!("Noisy neighbour:\n\n{table}");
                println!("targets {}", if met { "met" } else { "MISSED" });
            }
            println!("results in {}", options.out_dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Abuse {
            phase,
            honest,
            reset_connections,
            idle_streams,
            slow_watchers,
            report_only,
            attacks,
            tenured_args,
            out,
            bin,
        } => {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let options = tenure_jepsen::abuse::AbuseOptions {
                tenured: match bin {
                    Some(bin) => bin,
                    None => tenure_jepsen::procs::tenured_bin()?,
                },
                out_dir: out.unwrap_or_else(|| PathBuf::from(format!("abuse-runs/{stamp}"))),
                phase,
                honest,
                reset_connections,
                idle_streams,
                slow_watchers,
                attacks: attacks
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(String::from)
                    .collect(),
                tenured_args,
            };
            let runtime = tokio::runtime::Runtime::new()?;
            let phases = runtime.block_on(tenure_jepsen::abuse::run(&options))?;
            let (table, met) = tenure_jepsen::abuse::table(&phases);
            std::fs::write(options.out_dir.join("abuse.md"), &table)?;
            println!("{table}");
            println!("results in {}", options.out_dir.display());
            Ok(if met || report_only {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Teardown => {
            hosts::teardown_leftovers()?;
            println!("no leftovers");
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            history,
            clock_epsilon,
        } => {
            let loaded = History::read_jsonl(&history)?;
            let epsilon = clock_epsilon.unwrap_or(loaded.clock_epsilon);
            let check = checker::check(
                &loaded,
                &CheckParams {
                    clock_epsilon: epsilon,
                    max_states_per_resource: 5_000_000,
                },
            );
            let dir = history
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            let summary = report::write_all(&dir, &loaded, &check)?;
            println!("{}", report::text(&summary, &check));
            Ok(if check.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Test {
            nodes,
            time_limit,
            nemesis,
            seed,
            clients,
            resources,
            workload,
            watchers,
            out,
            min_grants,
            min_leader_changes,
            min_admissions,
            clock_epsilon,
            broken,
            bin,
            secure,
        } => {
            anyhow::ensure!(nodes == 3 || nodes == 5, "--nodes is 3 or 5");
            let seed = seed.unwrap_or_else(rand::random);
            let faults = nemesis
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(Fault::parse)
                .collect::<Result<_, _>>()?;
            let mut kinds = workload
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(Kind::parse)
                .collect::<Result<Vec<_>, _>>()?;
            kinds.sort();
            kinds.dedup();
            anyhow::ensure!(!kinds.is_empty(), "--workload names no resource kind");
            let node_args = match broken.as_deref() {
                None => vec![],
                Some("stale-reads") => vec!["--fi-stale-reads".to_string()],
                Some(other) => anyhow::bail!("unknown --broken mode `{other}` (stale-reads)"),
            };
            let out_dir = out.unwrap_or_else(|| PathBuf::from(format!("jepsen-runs/seed-{seed}")));
            println!(
                "tenure-jepsen: seed {seed}; output in {}",
                out_dir.display()
            );
            let options = TestOptions {
                nodes,
                time_limit,
                faults,
                seed,
                workload: WorkloadConfig {
                    clients,
                    resources,
                    kinds,
                    watchers,
                    ..WorkloadConfig::default()
                },
                out_dir: out_dir.clone(),
                min_grants,
                min_leader_changes,
                min_admissions,
                node_args,
                secure,
                bin,
                clock_epsilon,
            };
            let (history, check, verdict) = run_test(&options)?;
            let summary = report::write_all(&out_dir, &history, &check)?;
            println!("{}", report::text(&summary, &check));
            for problem in &verdict.problems {
                println!("FAIL: {problem}");
            }
            println!("reproduce: tenure-jepsen test --nodes {nodes} --time-limit {} --nemesis {nemesis} --workload {workload} --watchers {watchers} --seed {seed}{}", humantime::format_duration(time_limit), if secure { " --secure" } else { "" });
            println!("report: {}", out_dir.join("report.html").display());
            Ok(if check.ok() && verdict.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
