//! The report's tables and targets, from hand-made results.

use super::*;
use crate::bench::{Failover, Results};

fn cell(system: System, workload: Workload, clients: usize, ops_per_s: f64, p50_us: u64) -> Cell {
    Cell {
        system,
        workload,
        clients,
        ops: (ops_per_s * 10.0) as u64,
        errors: 0,
        first_error: None,
        seconds: 10.0,
        ops_per_s,
        per_minute_ops_per_s: vec![ops_per_s],
        p50_us,
        p99_us: p50_us * 2,
        p999_us: p50_us * 3,
        cpu_s_per_1k: 0.1,
        switches_per_op: 10.0,
    }
}

fn options() -> BenchOptions {
    BenchOptions {
        systems: vec![System::Tenure, System::Etcd],
        workloads: Workload::ALL.to_vec(),
        clients: vec![1, 64],
        warmup: std::time::Duration::from_secs(1),
        duration: std::time::Duration::from_secs(10),
        kills: 3,
        failover_clients: 16,
        scale: vec![],
        scale_hold: std::time::Duration::ZERO,
        sessions: None,
        out_dir: "unused".into(),
        tenured: "unused".into(),
        tenured_args: vec![],
    }
}

#[test]
fn targets_are_judged_from_the_ratios_of_one_run() {
    let results = Results {
        cells: vec![
            cell(System::Tenure, Workload::Lock, 64, 6_000.0, 10_000),
            cell(System::Etcd, Workload::Lock, 64, 1_000.0, 50_000),
            Cell {
                cpu_s_per_1k: 0.2,
                ..cell(System::Tenure, Workload::Renew, 64, 900.0, 1_000)
            },
            cell(System::Etcd, Workload::Renew, 64, 1_000.0, 1_000),
            cell(System::Tenure, Workload::Acquire, 1, 1_000.0, 1_100),
            cell(System::Etcd, Workload::Acquire, 1, 1_000.0, 1_000),
            cell(System::Tenure, Workload::Handoff, 1, 500.0, 1_000),
            cell(System::Etcd, Workload::Handoff, 1, 500.0, 3_000),
        ],
        failovers: vec![
            Failover {
                system: System::Tenure,
                clients: 16,
                millis: vec![900.0, 700.0, 800.0],
                errors: 0,
            },
            Failover {
                system: System::Etcd,
                clients: 16,
                millis: vec![2_000.0, 1_000.0],
                errors: 0,
            },
        ],
        scale: vec![],
        sessions: None,
        unprovoked_elections: vec![(System::Tenure, 0)],
    };
    let judged: Vec<(String, bool)> = targets(&results)
        .into_iter()
        .map(|(name, _, met)| (name, met))
        .collect();
    let met = |prefix: &str| {
        judged
            .iter()
            .find(|(name, _)| name.starts_with(prefix))
            .map(|(_, met)| *met)
    };
    assert_eq!(met("lock cycle"), Some(true), "6× ≥ 5×");
    assert_eq!(met("renew"), Some(false), "200 µs of CPU per renewal > 100");
    assert_eq!(met("single-client acquire"), Some(false), "1.1 > 1.0");
    assert_eq!(met("contended handoff"), Some(true), "1 ms ≤ 0.5 × 3 ms");
    // Medians 800 and 1500: 0.53 > 0.5.
    assert_eq!(met("failover"), Some(false));
    assert_eq!(met("linearizable read"), None, "not measured, not judged");

    let table = markdown(&options(), &results);
    assert!(
        table.contains("| lock | 64 | 6000 | 1000 | 6.00× |"),
        "{table}"
    );
    assert!(
        table.contains("| tenure | 900, 700, 800 | 800 |"),
        "{table}"
    );
}

#[test]
fn a_run_without_cells_prints_no_cells_table() {
    let results = Results {
        cells: vec![],
        failovers: vec![],
        scale: vec![],
        sessions: None,
        unprovoked_elections: vec![],
    };
    let table = markdown(&options(), &results);
    assert!(!table.contains("| workload | clients |"), "{table}");
    let results = Results {
        cells: vec![cell(System::Tenure, Workload::Lock, 1, 100.0, 1_000)],
        ..results
    };
    assert!(markdown(&options(), &results).contains("| lock | 1 |"));
}
