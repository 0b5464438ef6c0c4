//! The harness must fail when it should: a node told to serve linearizable reads from its
//! local state (`--fi-stale-reads`, fault-injection builds only) is caught within a short
//! partitioned run, nodes that acknowledge log appends without fdatasync
//! (`--fi-ack-before-sync`) within a short run of power cuts, and nodes of this build that
//! propose commands the cluster's rules do not have yet (`--fi-ungated`) within a short run of
//! two releases (the release before is built from CHANGELOG.md's commit the first time).
//! Clients of the `fenced` workload that write to the PostgreSQL register without the guard
//! (`--broken unguarded-writes`) are caught by the register's own record, where the same run
//! with the guard leaves it in token order.
//! Needs root and `ip netns` (and PostgreSQL for the register); elsewhere it prints a note
//! and passes.

use std::time::Duration;

use tenure_jepsen::checker::CheckReport;
use tenure_jepsen::history::History;
use tenure_jepsen::nemesis::Fault;
use tenure_jepsen::power::CutMode;
use tenure_jepsen::run::{run_test, RunVerdict, TestOptions};
use tenure_jepsen::workload::{Kind, WorkloadConfig};

mod common;
use common::SERIAL;

/// A short plain run of nodes started with `broken` (none if empty) under `faults`, or None
/// where these tests cannot run (the note says why).
fn run_broken(
    test: &str,
    broken: &str,
    faults: Vec<Fault>,
    seed: u64,
    time_limit: Duration,
    workload: WorkloadConfig,
) -> Option<(History, CheckReport, RunVerdict)> {
    if let Some(why) = common::unsupported() {
        eprintln!("note: skipping {test}: {why}");
        return None;
    }
    let Ok(bin) = tenure_jepsen::procs::tenured_bin() else {
        eprintln!("note: skipping {test}: no tenured binary (cargo build --bin tenured --features tenure-node/fault-injection)");
        return None;
    };
    let out = tempfile::tempdir().expect("temp dir");
    let power = faults.contains(&Fault::Power);
    // A flag of this build only goes to its nodes: the release before does not know it.
    let flags: Vec<String> = Some(broken)
        .filter(|flag| !flag.is_empty())
        .map(str::to_owned)
        .into_iter()
        .collect();
    let (node_args, new_args) = match faults.contains(&Fault::Upgrade) {
        true => (vec![], flags),
        false => (flags, vec![]),
    };
    let options = TestOptions {
        nodes: 3,
        time_limit,
        faults,
        seed,
        workload,
        out_dir: out.path().to_path_buf(),
        min_grants: 0,
        min_leader_changes: 0,
        min_admissions: 0,
        node_args,
        new_args,
        old_bin: None,
        secure: false,
        bin: Some(bin),
        clock_epsilon: 0.02,
        power_modes: vec![CutMode::Drop],
        min_majority_power_cuts: usize::from(power),
        rolling_upgrade: false,
    };
    let ran = run_test(&options).expect("the run itself works");
    assert!(!ran.0.ops.is_empty());
    assert!(
        common::namespaces().is_empty(),
        "the run left namespaces behind"
    );
    Some(ran)
}

/// Two ad-hoc exclusive resources, no watchers.
fn two_exclusive() -> WorkloadConfig {
    WorkloadConfig {
        resources: 2,
        kinds: vec![Kind::Exclusive],
        watchers: 0,
        ..WorkloadConfig::default()
    }
}

#[test]
fn a_node_serving_stale_reads_is_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Whether a read reaches the isolated node while the resource changes hands is up to
    // timing: a loaded machine's run can miss it. The broken node must be caught in one of
    // two runs; a checker blind to stale reads never catches it.
    let mut missed = Vec::new();
    for seed in [2, 3] {
        let Some((_, check, _)) = run_broken(
            "a_node_serving_stale_reads_is_caught",
            "--fi-stale-reads",
            vec![Fault::Partition],
            seed,
            Duration::from_secs(25),
            // Two contended resources: each changes hands many times during every
            // partition, and the clients that find it held read it instead (a read is 15%
            // of their rounds), so the isolated node is read, and is stale, many times over.
            // Spread over the default fifteen, a run's reads of the isolated node could all
            // miss a change.
            two_exclusive(),
        ) else {
            return;
        };
        if check.anomalies.iter().any(|a| a.kind == "nonlinearizable") {
            return;
        }
        missed.push(check.anomalies);
    }
    panic!("stale reads went unnoticed in both runs: {missed:?}");
}

/// Anomalies that show acknowledged log entries lost: grants forgotten, tokens issued again.
const LOST_WRITES: [&str; 5] = [
    "nonlinearizable",
    "overlapping_tenures",
    "token_not_increasing",
    "unexpected_value",
    "node_would_not_start",
];

#[test]
fn nodes_whose_fsync_lies_are_caught_by_power_cuts() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_, check, verdict)) = run_broken(
        "nodes_whose_fsync_lies_are_caught_by_power_cuts",
        "--fi-ack-before-sync",
        vec![Fault::Power],
        3,
        Duration::from_secs(20),
        // Few resources: a cluster that lost acknowledged entries may have no leader after
        // the run, and each resource's final reads then wait out their deadlines.
        two_exclusive(),
    ) else {
        return;
    };
    assert!(
        !verdict.problems.iter().any(|p| p.contains("power cuts")),
        "the run cut the power of a majority: {:?}",
        verdict.problems
    );
    assert!(
        check
            .anomalies
            .iter()
            .any(|a| LOST_WRITES.contains(&a.kind.as_str())),
        "acknowledged appends lost to a power cut went unnoticed: {:?}",
        check.anomalies
    );
}

/// A node of this build that proposes what the cluster's rules do not have yet (a renew that
/// replaces metadata, before the raise) is caught in a cluster of two releases: the nemesis's
/// gate probe, sent when a node of this build is made leader, is refused `invalid_argument` by
/// apply, or goes unanswered where followers of the release before cannot decode the entry,
/// instead of being refused `rules_not_reached` (the workload's own such renews reach that
/// leader only by chance), and a node of the release before that meets such an entry falls
/// behind for good.
#[test]
fn an_ungated_command_in_a_cluster_of_two_releases_is_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((history, _, verdict)) = run_broken(
        "an_ungated_command_in_a_cluster_of_two_releases_is_caught",
        "--fi-ungated",
        vec![Fault::Upgrade],
        5,
        Duration::from_secs(40),
        two_exclusive(),
    ) else {
        return;
    };
    assert!(
        verdict
            .problems
            .iter()
            .any(|p| p.starts_with(tenure_jepsen::nemesis::UNGATED)
                || p.contains("fell behind")
                || p.contains("not every node applied")
                || p.contains("refused invalid_argument")),
        "an ungated command went unnoticed: {:?}; what the upgrade nemesis did: {:#?}",
        verdict.problems,
        history
            .nemesis
            .iter()
            .filter(|e| e.kind == "upgrade")
            .map(|e| &e.detail)
            .collect::<Vec<_>>()
    );
}

/// The `fenced` workload's clients, pausing and partitioning nodes: with the guard, the
/// register holds every write in token order and some stale writer was refused; without it
/// (`unguarded-writes`), a holder that stalled past its ttl writes after the next tenure did,
/// and the register's record shows it.
#[test]
fn writes_without_the_guard_are_caught_in_the_data() {
    let test = "writes_without_the_guard_are_caught_in_the_data";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The run starts a server of its own; this one shows there is PostgreSQL to start.
    if tenure_guard::test_server::TestServer::for_test(test).is_none() {
        return;
    }
    let fenced = |unguarded_writes| WorkloadConfig {
        kinds: vec![Kind::Fenced],
        unguarded_writes,
        watchers: 0,
        ..WorkloadConfig::default()
    };
    let faults = || vec![Fault::Partition, Fault::Pause];
    let time = Duration::from_secs(25);
    let Some((_, check, verdict)) = run_broken(test, "", faults(), 8, time, fenced(false)) else {
        return;
    };
    assert!(check.ok(), "a guarded run: {:#?}", check.anomalies);
    assert!(verdict.ok(), "a guarded run: {:?}", verdict.problems);
    assert!(
        check.register.writes > 0 && check.register.refused > 0,
        "the guard refused no stale writer: {:?}",
        check.register
    );
    let Some((_, check, _)) = run_broken(test, "", faults(), 8, time, fenced(true)) else {
        return;
    };
    assert!(
        !check.of_kind("register_out_of_token_order").is_empty(),
        "writes out of token order went unnoticed: {:#?}",
        check.anomalies
    );
}
