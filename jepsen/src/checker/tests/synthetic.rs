//! A ground-truth simulation of a correct cluster, for speed and for cross-checking the pruned
//! search against a plain one.

use std::time::Instant;

use super::*;
use crate::checker::sim::correct_history as synthetic_ttl;

/// A ground-truth simulation of a correct cluster: linearization points in time order, each op's
/// interval around its point, real expiry at (grant or renew point) + ttl (+ lost time), some
/// ops timing out whether or not they took effect.
fn synthetic(resources: usize, ops_per_resource: usize, seed: u64) -> History {
    synthetic_with(resources, ops_per_resource, seed, 4)
}

fn synthetic_with(
    resources: usize,
    ops_per_resource: usize,
    seed: u64,
    timeout_pct: u64,
) -> History {
    synthetic_ttl(resources, ops_per_resource, seed, timeout_pct, 200)
}

#[test]
fn a_synthetic_correct_history_passes_quickly() {
    let history = synthetic(5, 400, 1);
    assert_eq!(history.ops.len(), 2000);
    let unknowns = history
        .ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Unknown { .. }))
        .count();
    assert!(unknowns > 40, "{unknowns}");
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: QUICK_STATES,
        },
    );
    assert_ok(&report);
    assert_eq!(report.resources_checked, 5);
    assert!(report.grants > 50, "{}", report.grants);
}

#[test]
fn synthetic_histories_of_many_seeds_pass() {
    for seed in 0..20 {
        let history = synthetic(2, 300, seed);
        let report = check(
            &history,
            &CheckParams {
                clock_epsilon: 0.02,
                max_states_per_resource: 2_000_000,
            },
        );
        assert!(report.ok(), "seed {seed}: {:#?}", report.anomalies);
    }
}

#[test]
fn a_doctored_synthetic_history_fails() {
    let mut history = synthetic(1, 400, 3);
    // Make one read that saw a holder see nobody: a stale/lost read.
    let victim = history
        .ops
        .iter()
        .position(|op| {
            op.invoke_ns > 400 * MS
                && matches!(
                    op.outcome,
                    Outcome::Ok {
                        value: Value::Read {
                            holder: Some(_),
                            ..
                        }
                    }
                )
        })
        .expect("a read that saw a holder");
    history.ops[victim].outcome = read_held("nobody", 1);
    let id = history.ops[victim].id;
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: 2_000_000,
        },
    );
    let a = the(&report, "nonlinearizable");
    assert!(a.ops.contains(&id), "{a:#?}");
}

/// The last read that saw a holder now sees a stranger: only the very end is wrong, so the
/// search has to exhaust every way of linearizing everything before it.
fn doctor_last_read(history: &mut History) -> u64 {
    let victim = history
        .ops
        .iter()
        .rposition(|op| {
            matches!(
                op.outcome,
                Outcome::Ok {
                    value: Value::Read {
                        holder: Some(_),
                        ..
                    }
                }
            )
        })
        .expect("a read that saw a holder");
    history.ops[victim].outcome = read_held("nobody", 1);
    history.ops[victim].id
}

#[test]
fn a_violation_at_the_end_of_a_long_history_is_found() {
    let mut history = synthetic_with(1, 3000, 5, 10);
    let victim = doctor_last_read(&mut history);
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: QUICK_STATES,
        },
    );
    assert!(
        report.search_exhausted.is_empty(),
        "the search ran out of states"
    );
    assert!(the(&report, "nonlinearizable").ops.contains(&victim));
}

/// A benchmark: `STRESS_N=2000,10000 STRESS_PCT=10 STRESS_DOCTOR=1 cargo test --release -p
/// tenure-jepsen --lib stress_benchmark -- --ignored --nocapture`.
#[test]
#[ignore]
fn stress_benchmark() {
    let sizes: Vec<usize> = std::env::var("STRESS_N")
        .map(|v| v.split(',').map(|x| x.parse().expect("n")).collect())
        .unwrap_or(vec![2000]);
    let pct: u64 = std::env::var("STRESS_PCT")
        .map(|v| v.parse().expect("pct"))
        .unwrap_or(4);
    let budget: usize = std::env::var("STRESS_BUDGET")
        .map(|v| v.parse().expect("budget"))
        .unwrap_or(2_000_000);
    let doctor = std::env::var("STRESS_DOCTOR").is_ok();
    for n in sizes {
        for seed in 0..3 {
            let mut history = synthetic_with(1, n, seed, pct);
            if doctor {
                doctor_last_read(&mut history);
            }
            let started = Instant::now();
            let report = check(
                &history,
                &CheckParams {
                    clock_epsilon: 0.02,
                    max_states_per_resource: budget,
                },
            );
            eprintln!(
                "n={n} seed={seed} pct={pct} doctored={doctor}: {:?} ok={} exhausted={:?} {:?}",
                started.elapsed(),
                report.ok(),
                report.search_exhausted,
                report
                    .anomalies
                    .iter()
                    .map(|a| a.message.chars().take(1500).collect::<String>())
                    .collect::<Vec<_>>()
            );
        }
    }
}
