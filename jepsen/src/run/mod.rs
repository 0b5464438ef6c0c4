//! One test run: hosts and nodes up, clients and nemesis for the time limit, every fault
//! healed, final reads through every node and a progress check, then teardown, the checker
//! and the report.

mod cluster;
mod drive;

use anyhow::Context;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::checker::{self, CheckParams, CheckReport};
use crate::history::History;
use crate::hosts::{self, Hosts};
use crate::nemesis::Fault;
use crate::power::CutMode;
use crate::procs::{self, Procs};
use crate::secure::{Connect, Secure};
use crate::workload::{Kind, PgServer, WorkloadConfig};
use drive::drive;

#[derive(Clone, Debug)]
pub struct TestOptions {
    pub nodes: u64,
    pub time_limit: Duration,
    pub faults: Vec<Fault>,
    pub seed: u64,
    pub workload: WorkloadConfig,
    pub out_dir: PathBuf,
    pub min_grants: usize,
    pub min_leader_changes: usize,
    /// Waits admitted from the waiting room (after queueing) the run needs.
    pub min_admissions: usize,
    /// Extra `tenured` flags, e.g. `--fi-stale-reads` for a deliberately broken build.
    pub node_args: Vec<String>,
    /// Flags for this build's nodes only (the release before does not know them), e.g.
    /// `--fi-ungated`.
    pub new_args: Vec<String>,
    /// The release before's `tenured` for the `upgrade` nemesis (None: built from the commit
    /// CHANGELOG.md names, `crate::releases`).
    pub old_bin: Option<PathBuf>,
    /// Auth and TLS on (`crate::secure`).
    pub secure: bool,
    pub bin: Option<PathBuf>,
    pub clock_epsilon: f64,
    /// What a power cut keeps of unsynced writes (the `power` nemesis), one drawn per cut.
    pub power_modes: Vec<CutMode>,
    /// Power cuts of a majority of the nodes at once the run needs.
    pub min_majority_power_cuts: usize,
    /// The `upgrade` nemesis makes one rolling upgrade (every node onto this build, the leader
    /// last), and every client call must succeed but for refusals of rules not reached yet.
    pub rolling_upgrade: bool,
}

/// What the run found, beyond the checker's anomalies.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunVerdict {
    pub grants: usize,
    pub leader_changes: usize,
    pub progress_after_heal: bool,
    /// Nodes swapped onto this build and back to the release before (`upgrade`).
    pub upgrades: usize,
    pub downgrades: usize,
    /// The rules version the upgrade raised the cluster to, if it did.
    pub rules_raised_to: Option<u32>,
    pub calls: Calls,
    pub problems: Vec<String>,
}

/// The clients' calls (their own writes to the fenced store aside) by how they ended.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Calls {
    pub ok: usize,
    /// Definite failures, by reason.
    pub failed: std::collections::BTreeMap<String, usize>,
    /// Outcome unknown: timeouts, `unavailable` past the client's retries.
    pub unknown: usize,
    /// Renews that replaced their lease's metadata (rules version 2): served once the
    /// cluster ran rules 2 (in a run of two releases, invoked after the raise was seen), and
    /// refused `rules_not_reached`.
    pub metadata_renews_served: usize,
    pub metadata_renews_refused: usize,
    /// Of those served, the ones before the raise: a node of the release before, which does
    /// not know the fields, renewed without them.
    pub metadata_renews_before_raise: usize,
    /// `rules_not_reached` refusals of calls invoked after the raise was seen (a failure).
    pub refused_after_raise: usize,
    /// Renews replacing metadata refused `invalid_argument`: a command of rules the cluster
    /// had not reached was proposed anyway (apply refused it), or handed to a node of the
    /// release before, which could not decode it. Never right.
    pub metadata_renews_invalid: usize,
}

impl Calls {
    /// The calls of `history`; `raised_ns`: when the raise of the rules was seen (a run of
    /// two releases), None where the cluster ran this build's rules from the start.
    pub fn of(history: &History, raised_ns: Option<crate::history::Nanos>) -> Calls {
        use crate::history::{Call, Outcome};
        let mut calls = Calls::default();
        for op in &history.ops {
            if matches!(op.call, Call::Write { .. }) {
                continue;
            }
            let sets_metadata = matches!(
                op.call,
                Call::Renew {
                    sets_metadata: true,
                    ..
                }
            );
            let after_raise = raised_ns.is_none_or(|raised| op.invoke_ns >= raised);
            match &op.outcome {
                Outcome::Ok { .. } => {
                    calls.ok += 1;
                    if sets_metadata && after_raise {
                        calls.metadata_renews_served += 1;
                    } else if sets_metadata {
                        calls.metadata_renews_before_raise += 1;
                    }
                }
                Outcome::Fail { reason } => {
                    *calls.failed.entry(reason.clone()).or_default() += 1;
                    if tenure_client::Reason::RulesNotReached == reason.as_str() {
                        calls.metadata_renews_refused += usize::from(sets_metadata);
                        calls.refused_after_raise += usize::from(after_raise);
                    }
                    if tenure_client::Reason::InvalidArgument == reason.as_str() {
                        calls.metadata_renews_invalid += usize::from(sets_metadata);
                    }
                }
                Outcome::QuotaExceeded { quota, .. } => {
                    *calls.failed.entry(format!("quota {quota}")).or_default() += 1;
                }
                Outcome::Unknown { .. } => calls.unknown += 1,
            }
        }
        calls
    }

    /// One line: `N ok, failed: reason×n, …, M unknown`.
    pub fn describe(&self) -> String {
        let failed: Vec<String> = self
            .failed
            .iter()
            .map(|(reason, n)| format!("{reason} ×{n}"))
            .collect();
        format!(
            "{} ok, failed: {}, {} unknown; renews setting metadata: {} served after the raise, {} refused rules_not_reached ({} after the raise), {} renewed without it before the raise",
            self.ok,
            if failed.is_empty() { "none".into() } else { failed.join(", ") },
            self.unknown,
            self.metadata_renews_served,
            self.metadata_renews_refused,
            self.refused_after_raise,
            self.metadata_renews_before_raise
        )
    }
}

impl RunVerdict {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Runs a test end to end. Hosts and processes are torn down before this returns, also when
/// it fails.
pub fn run_test(options: &TestOptions) -> anyhow::Result<(History, CheckReport, RunVerdict)> {
    std::fs::create_dir_all(&options.out_dir)?;
    let bin = match &options.bin {
        Some(bin) => bin.clone(),
        None => procs::tenured_bin()?,
    };
    let hosts = Arc::new(Hosts::setup(options.nodes)?);
    let data_root = options.out_dir.join("nodes");
    // A run starts on empty disks: the nodes of an earlier run into the same directory
    // (their membership changed by `member`) would not form this run's cluster.
    if data_root.exists() {
        std::fs::remove_dir_all(&data_root).with_context(|| {
            format!(
                "emptying {} (an earlier run's disks; `tenure-jepsen teardown` unmounts them)",
                data_root.display()
            )
        })?;
    }
    std::fs::create_dir_all(&data_root)?;
    let mut node_args = options.node_args.clone();
    let connect = if options.secure {
        let addrs: Vec<String> = (1..=options.nodes).map(hosts::node_ip).collect();
        let (secure, flags) = Secure::generate(&options.out_dir.join("secrets"), &addrs)?;
        node_args.extend(flags);
        Connect::secure(secure)
    } else {
        Connect::default()
    };
    let power = options.faults.contains(&Fault::Power);
    let previous = match (options.faults.contains(&Fault::Upgrade), &options.old_bin) {
        (false, _) => None,
        (true, Some(old)) => Some((old.clone(), node_args.clone())),
        (true, None) => {
            let repo = crate::releases::repository()?;
            let (release, old) = crate::releases::previous_tenured(&repo, &bin)?;
            tracing::info!(version = %release.version, bin = %old.display(), "the release before");
            Some((old, node_args.clone()))
        }
    };
    node_args.extend(options.new_args.iter().cloned());
    let procs = Procs::start(
        &hosts,
        bin,
        options.nodes,
        data_root,
        node_args,
        power,
        previous,
    )?;
    let procs = Arc::new(Mutex::new(procs));
    // The `fenced` workload's register: a PostgreSQL of the run's own, on a Unix socket (which
    // the clients reach from their namespace).
    let postgres = match options.workload.kinds.contains(&Kind::Fenced) {
        true => Some(PgServer::start()?),
        false => None,
    };

    // The clients talk to the nodes from the client namespace: every runtime thread is
    // created by this thread after it moved there, and inherits it.
    let root_namespace = std::fs::File::open("/proc/self/ns/net")?;
    hosts::enter_client_namespace()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let conn = postgres.as_ref().map(PgServer::conn);
    let driven = runtime.block_on(drive(options, hosts.clone(), procs.clone(), connect, conn));
    drop(runtime);
    nix::sched::setns(&root_namespace, nix::sched::CloneFlags::CLONE_NEWNET)?;
    drop(procs);
    drop(hosts);
    if let Some(postgres) = postgres {
        postgres.keep_log(&options.out_dir);
    }

    let (history, progress, problems) = driven?;
    history.write_jsonl(&options.out_dir.join("history.jsonl"))?;
    let check = checker::check(
        &history,
        &CheckParams {
            clock_epsilon: options.clock_epsilon,
            max_states_per_resource: 5_000_000,
        },
    );
    let mut verdict = judge(options, &history, &check, progress);
    verdict.problems.extend(problems);
    Ok((history, check, verdict))
}

/// Too little activity is a failed run, not a pass.
fn judge(
    options: &TestOptions,
    history: &History,
    check: &CheckReport,
    progress: bool,
) -> RunVerdict {
    let leader_changes = {
        let mut seen: Vec<(u64, u64)> = history
            .leaders
            .iter()
            .map(|(_, node, term)| (*node, *term))
            .collect();
        seen.dedup();
        seen.len().saturating_sub(1)
    };
    let upgrade_events = || history.nemesis.iter().filter(|e| e.kind == "upgrade");
    let mut verdict = RunVerdict {
        grants: check.grants,
        leader_changes,
        progress_after_heal: progress,
        upgrades: upgrade_events()
            .filter(|e| e.detail.contains(crate::nemesis::UPGRADED))
            .count(),
        downgrades: upgrade_events()
            .filter(|e| e.detail.contains(crate::nemesis::DOWNGRADED))
            .count(),
        rules_raised_to: upgrade_events().find_map(|e| {
            e.detail
                .strip_prefix(crate::nemesis::RAISED)
                .and_then(|v| v.trim().parse().ok())
        }),
        calls: Calls::of(
            history,
            upgrade_events()
                .find(|e| e.detail.starts_with(crate::nemesis::RAISED))
                .map(|e| e.end_ns.unwrap_or(e.start_ns))
                .or(options.faults.contains(&Fault::Upgrade).then_some(u64::MAX)),
        ),
        problems: vec![],
    };
    if options.rolling_upgrade {
        let failed: usize = verdict
            .calls
            .failed
            .iter()
            .filter(|(reason, _)| tenure_client::Reason::RulesNotReached != reason.as_str())
            .map(|(_, n)| n)
            .sum();
        if failed + verdict.calls.refused_after_raise + verdict.calls.unknown > 0 {
            verdict.problems.push(format!(
                "a rolling upgrade failed client calls: {}",
                verdict.calls.describe()
            ));
        }
        if verdict.calls.metadata_renews_served == 0 {
            verdict
                .problems
                .push("no renew that needed the raised rules was served".into());
        }
    }
    for accepted in
        upgrade_events().filter(|e| e.detail.starts_with(crate::nemesis::DOWNGRADE_ACCEPTED))
    {
        verdict.problems.push(accepted.detail.clone());
    }
    if verdict.calls.metadata_renews_invalid > 0 {
        verdict.problems.push(format!(
            "{} renews replacing metadata were refused invalid_argument: a command of rules the cluster had not reached was proposed, or handed to a node that cannot decode it",
            verdict.calls.metadata_renews_invalid
        ));
    }
    for ungated in upgrade_events().filter(|e| e.detail.starts_with(crate::nemesis::UNGATED)) {
        verdict.problems.push(ungated.detail.clone());
    }
    for failed in upgrade_events().filter(|e| e.detail.starts_with(crate::nemesis::SWAP_FAILED)) {
        verdict.problems.push(failed.detail.clone());
    }
    for lag in upgrade_events().filter(|e| e.detail.starts_with(crate::nemesis::LAGGING)) {
        verdict.problems.push(format!(
            "a node fell behind in a cluster of two releases: {}",
            lag.detail
        ));
    }
    if options.faults.contains(&Fault::Upgrade)
        && !upgrade_events().any(|e| e.detail.starts_with(crate::nemesis::FINISHED))
    {
        verdict
            .problems
            .push("the upgrade did not finish (every node on this build, the rules raised)".into());
    }
    if options.workload.kinds.contains(&Kind::Fenced) && check.register.accepted == 0 {
        verdict
            .problems
            .push("the register took no write (workload fenced)".into());
    }
    if !progress {
        verdict
            .problems
            .push("no acquire succeeded after every fault was healed".into());
    }
    if check.grants < options.min_grants {
        verdict.problems.push(format!(
            "only {} grants checked (need {})",
            check.grants, options.min_grants
        ));
    }
    if leader_changes < options.min_leader_changes {
        verdict.problems.push(format!(
            "{leader_changes} leader changes (need {})",
            options.min_leader_changes
        ));
    }
    if check.waits.admitted < options.min_admissions {
        verdict.problems.push(format!(
            "only {} waits admitted (need {})",
            check.waits.admitted, options.min_admissions
        ));
    }
    if options.workload.watchers > 0 && check.watch.events_checked == 0 {
        verdict
            .problems
            .push("the watchers checked no event".into());
    }
    let majority_cuts = history.power_cuts().filter(|p| p.majority()).count();
    if majority_cuts < options.min_majority_power_cuts {
        verdict.problems.push(format!(
            "{majority_cuts} power cuts of a majority (need {})",
            options.min_majority_power_cuts
        ));
    }
    if !history.unread.is_empty() {
        let unread: Vec<String> = history
            .unread
            .iter()
            .map(|(resource, error)| format!("{resource} ({error})"))
            .collect();
        verdict.problems.push(format!(
            "the history of {} resource(s) could not be read after the run: {}",
            unread.len(),
            unread.join(", ")
        ));
    }
    verdict
}
