//! The harness must fail when it should: a node told to serve linearizable reads from its
//! local state (`--fi-stale-reads`, fault-injection builds only) is caught within a short
//! partitioned run. Needs root and `ip netns`; elsewhere it prints a note and passes.

use std::time::Duration;

use tenure_jepsen::nemesis::Fault;
use tenure_jepsen::run::{run_test, TestOptions};
use tenure_jepsen::workload::WorkloadConfig;

mod common;
use common::SERIAL;

#[test]
fn a_node_serving_stale_reads_is_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    skip_unless_supported!("a_node_serving_stale_reads_is_caught");
    let Ok(bin) = tenure_jepsen::procs::tenured_bin() else {
        eprintln!("note: skipping: no tenured binary (cargo build --bin tenured --features tenure-node/fault-injection)");
        return;
    };
    let out = tempfile::tempdir().expect("temp dir");
    let options = TestOptions {
        nodes: 3,
        time_limit: Duration::from_secs(25),
        faults: vec![Fault::Partition],
        seed: 2,
        workload: WorkloadConfig::default(),
        out_dir: out.path().to_path_buf(),
        min_grants: 0,
        min_leader_changes: 0,
        min_admissions: 0,
        node_args: vec!["--fi-stale-reads".into()],
        secure: false,
        bin: Some(bin),
        clock_epsilon: 0.02,
    };
    let (history, check, _) = run_test(&options).expect("the run itself works");
    assert!(!history.ops.is_empty());
    assert!(
        check.anomalies.iter().any(|a| a.kind == "nonlinearizable"),
        "stale reads went unnoticed: {:?}",
        check.anomalies
    );
    assert!(
        common::namespaces().is_empty(),
        "the run left namespaces behind"
    );
}
