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
use crate::workload::WorkloadConfig;
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
    /// Auth and TLS on (`crate::secure`).
    pub secure: bool,
    pub bin: Option<PathBuf>,
    pub clock_epsilon: f64,
    /// What a power cut keeps of unsynced writes (the `power` nemesis), one drawn per cut.
    pub power_modes: Vec<CutMode>,
    /// Power cuts of a majority of the nodes at once the run needs.
    pub min_majority_power_cuts: usize,
}

/// What the run found, beyond the checker's anomalies.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunVerdict {
    pub grants: usize,
    pub leader_changes: usize,
    pub progress_after_heal: bool,
    pub problems: Vec<String>,
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
    let procs = Procs::start(&hosts, bin, options.nodes, data_root, node_args, power)?;
    let procs = Arc::new(Mutex::new(procs));

    // The clients talk to the nodes from the client namespace: every runtime thread is
    // created by this thread after it moved there, and inherits it.
    let root_namespace = std::fs::File::open("/proc/self/ns/net")?;
    hosts::enter_client_namespace()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let driven = runtime.block_on(drive(options, hosts.clone(), procs.clone(), connect));
    drop(runtime);
    nix::sched::setns(&root_namespace, nix::sched::CloneFlags::CLONE_NEWNET)?;
    drop(procs);
    drop(hosts);

    let (history, progress) = driven?;
    history.write_jsonl(&options.out_dir.join("history.jsonl"))?;
    let check = checker::check(
        &history,
        &CheckParams {
            clock_epsilon: options.clock_epsilon,
            max_states_per_resource: 5_000_000,
        },
    );
    let verdict = judge(options, &history, &check, progress);
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
    let mut verdict = RunVerdict {
        grants: check.grants,
        leader_changes,
        progress_after_heal: progress,
        problems: vec![],
    };
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
