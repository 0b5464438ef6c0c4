//! `tenure-jepsen`: break a real Tenure cluster and check every history.
//!
//! ```text
//! tenure-jepsen test --nodes 3 --time-limit 60s --nemesis partition,kill,pause,clock,loss --seed 7
//! tenure-jepsen check runs/seed-7/history.jsonl      # re-check a saved history
//! tenure-jepsen teardown                              # remove leftovers of a killed run
//! ```
//! Exit code: 0 pass, 1 anomaly or too little activity, 2 the harness itself failed.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command};
use tenure_jepsen::bench::{self, cluster::System, BenchOptions, Workload};
use tenure_jepsen::checker::{self, CheckParams};
use tenure_jepsen::history::History;
use tenure_jepsen::nemesis::Fault;
use tenure_jepsen::power::CutMode;
use tenure_jepsen::run::{run_test, TestOptions};
use tenure_jepsen::workload::{Kind, WorkloadConfig};
use tenure_jepsen::{hosts, report};

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
            scale_hold,
            sessions,
            session_leases,
            session_ttl,
            session_hold,
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
                scale_hold,
                sessions: (sessions > 0).then_some(bench::sessions::SessionsOptions {
                    sessions,
                    per_session: session_leases,
                    ttl: session_ttl,
                    hold: session_hold,
                }),
                out_dir: out.unwrap_or_else(|| PathBuf::from(format!("bench-runs/{stamp}"))),
                tenured: match bin {
                    Some(bin) => bin,
                    None => tenure_jepsen::procs::tenured_bin()?,
                },
                tenured_args,
            };
            let runtime = tokio::runtime::Runtime::new()?;
            if !options.workloads.is_empty() || options.sessions.is_some() {
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
                    idle_connections: 0,
                    rejoins: 0,
                    attacks: tenure_jepsen::abuse::quota::ATTACKS
                        .map(String::from)
                        .to_vec(),
                    tenured_args: options.tenured_args.clone(),
                    auth_off: false,
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
            auth_off,
            attacks,
            tenured_args,
            out,
            bin,
            idle_connections,
            rejoins,
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
                idle_connections,
                rejoins,
                attacks: attacks
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(String::from)
                    .collect(),
                tenured_args,
                auth_off,
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
            for mountpoint in tenure_jepsen::power::unmount_leftovers()? {
                println!("unmounted {}", mountpoint.display());
            }
            println!("no leftovers");
            Ok(ExitCode::SUCCESS)
        }
        Command::PreviousRelease { bin } => {
            let bin = match bin {
                Some(bin) => bin,
                None => tenure_jepsen::procs::tenured_bin()?,
            };
            let repo = tenure_jepsen::releases::repository()?;
            let (release, path) = tenure_jepsen::releases::previous_tenured(&repo, &bin)?;
            println!(
                "{} ({}): {}",
                release.version,
                release.commit,
                path.display()
            );
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
            min_majority_power_cuts,
            clock_epsilon,
            power_modes,
            broken,
            old_bin,
            rolling_upgrade,
            calm,
            bin,
            secure,
        } => {
            anyhow::ensure!(nodes == 3 || nodes == 5, "--nodes is 3 or 5");
            let seed = seed.unwrap_or_else(rand::random);
            let faults: Vec<Fault> = nemesis
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
            let (node_args, new_args) = match broken.as_deref() {
                None => (vec![], vec![]),
                Some("stale-reads") => (vec!["--fi-stale-reads".to_string()], vec![]),
                Some("fsync-lies") => (vec!["--fi-ack-before-sync".to_string()], vec![]),
                Some("ungated") => {
                    anyhow::ensure!(
                        faults.contains(&Fault::Upgrade),
                        "--broken ungated needs the upgrade nemesis (a cluster of two releases)"
                    );
                    (vec![], vec!["--fi-ungated".to_string()])
                }
                // Not the nodes: the `fenced` clients, which write without the guard.
                Some("unguarded-writes") => {
                    anyhow::ensure!(
                        kinds.contains(&Kind::Fenced),
                        "--broken unguarded-writes needs the fenced workload (--workload fenced)"
                    );
                    (vec![], vec![])
                }
                Some(other) => {
                    anyhow::bail!(
                        "unknown --broken mode `{other}` (stale-reads, fsync-lies, ungated, unguarded-writes)"
                    )
                }
            };
            let power_modes = power_modes
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| CutMode::parse(s.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            let out_dir = out.unwrap_or_else(|| PathBuf::from(format!("jepsen-runs/seed-{seed}")));
            println!(
                "tenure-jepsen: seed {seed}; output in {}",
                out_dir.display()
            );
            let mut workload_config = WorkloadConfig {
                clients,
                resources,
                kinds,
                watchers,
                unguarded_writes: broken.as_deref() == Some("unguarded-writes"),
                ..WorkloadConfig::default()
            };
            if calm {
                workload_config = workload_config.calm();
            }
            let options = TestOptions {
                nodes,
                time_limit,
                faults,
                seed,
                workload: workload_config,
                out_dir: out_dir.clone(),
                min_grants,
                min_leader_changes,
                min_admissions,
                node_args,
                new_args,
                old_bin,
                secure,
                bin,
                clock_epsilon,
                power_modes,
                min_majority_power_cuts,
                rolling_upgrade,
            };
            let (history, check, verdict) = run_test(&options)?;
            let summary = report::write_all(&out_dir, &history, &check)?;
            println!("{}", report::text(&summary, &check));
            println!("calls: {}", verdict.calls.describe());
            if options.faults.contains(&Fault::Upgrade) {
                println!(
                    "upgrade: {} swaps onto this build, {} back to the release before; rules raised to {}",
                    verdict.upgrades,
                    verdict.downgrades,
                    verdict
                        .rules_raised_to
                        .map_or("nothing (not raised)".to_string(), |r| r.to_string())
                );
            }
            for problem in &verdict.problems {
                println!("FAIL: {problem}");
            }
            let mut extra = String::new();
            if options.faults.contains(&Fault::Power) {
                let modes: Vec<&str> = options.power_modes.iter().map(|m| m.name()).collect();
                extra.push_str(&format!(" --power-modes {}", modes.join(",")));
            }
            if let Some(broken) = &broken {
                extra.push_str(&format!(" --broken {broken}"));
            }
            if secure {
                extra.push_str(" --secure");
            }
            if rolling_upgrade {
                extra.push_str(" --rolling-upgrade");
            }
            if calm {
                extra.push_str(" --calm");
            }
            println!("reproduce: tenure-jepsen test --nodes {nodes} --time-limit {} --nemesis {nemesis} --workload {workload} --watchers {watchers} --seed {seed}{extra}", humantime::format_duration(time_limit));
            println!("report: {}", out_dir.join("report.html").display());
            Ok(if check.ok() && verdict.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
