//! A ground-truth simulation of a correct cluster, for speed and for cross-checking the pruned
//! search against a plain one.

use std::time::Instant;

use super::*;

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

pub(super) fn synthetic_ttl(
    resources: usize,
    ops_per_resource: usize,
    seed: u64,
    timeout_pct: u64,
    ttl_ms: u64,
) -> History {
    let mut rng = SimRng::new(seed);
    let mut log_index = 0u64;
    let mut ops: Vec<Op> = Vec::new();
    for r in 0..resources {
        let resource = format!("r{r}");
        let holders = ["h0", "h1", "h2", "h3"];
        let mut known: [Option<u64>; 4] = [None; 4];
        // (holder index, token, real expiry)
        let mut truth: Option<(usize, u64, u64)> = None;
        let mut store_highest = 0u64;
        let mut t = 50 * MS;
        for _ in 0..ops_per_resource {
            t += (1 + rng.below(8)) * MS;
            if truth.is_some_and(|(_, _, exp)| t >= exp) {
                truth = None;
            }
            let c = rng.below(4) as usize;
            let holder = holders[c].to_owned();
            let invoke = t - rng.below(10 * MS);
            let timed_out = rng.below(100) < timeout_pct;
            let applies = !timed_out || rng.below(2) == 0;
            let lost = rng.below(30) * MS; // time lost to a leader change
            let my_token = known[c].unwrap_or(1);
            let (call, outcome) = match rng.below(10) {
                0..=2 => {
                    let call = Call::Acquire {
                        resource: resource.clone(),
                        holder: holder.clone(),
                        ttl_ms,
                        mode: Mode::Exclusive,
                        units: 0,
                        wait_ms: 0,
                    };
                    let outcome = match truth {
                        None => {
                            if applies {
                                log_index += 1;
                                truth = Some((c, log_index, t + ttl_ms * MS + lost));
                            }
                            if !timed_out {
                                known[c] = Some(log_index);
                            }
                            granted(log_index)
                        }
                        Some((h, token, _)) if h == c => granted(token),
                        Some((h, token, _)) => refused(Some(holders[h]), Some(token)),
                    };
                    (call, outcome)
                }
                3 | 4 => {
                    let call = Call::Renew {
                        resource: resource.clone(),
                        holder: holder.clone(),
                        lease_id: format!("lse_{my_token}_0"),
                        token: my_token,
                        ttl_ms,
                    };
                    let outcome = match truth {
                        Some((h, token, _)) if h == c && token == my_token => {
                            if applies {
                                log_index += 1;
                                truth = Some((h, token, t + ttl_ms * MS + lost));
                            }
                            ok(Value::Renewed { token })
                        }
                        Some((h, _, _)) if h == c => fail("stale_fencing_token"),
                        _ => fail("lease_not_found"),
                    };
                    (call, outcome)
                }
                5 => {
                    let call = Call::Release {
                        resource: resource.clone(),
                        holder: holder.clone(),
                        lease_id: format!("lse_{my_token}_0"),
                        token: my_token,
                    };
                    let outcome = match truth {
                        Some((h, token, _)) if h == c && token == my_token => {
                            if applies {
                                log_index += 1;
                                truth = None;
                            }
                            ok(Value::Released { token })
                        }
                        Some((h, _, _)) if h == c => fail("stale_fencing_token"),
                        _ => fail("lease_expired"),
                    };
                    (call, outcome)
                }
                6 => {
                    let call = Call::Validate {
                        resource: resource.clone(),
                        token: my_token,
                    };
                    let valid = truth.is_some_and(|(_, token, _)| token == my_token);
                    (
                        call,
                        ok(Value::Validated {
                            valid,
                            reason: String::new(),
                        }),
                    )
                }
                9 => {
                    // The fenced store (local: never times out).
                    let call = Call::Write {
                        resource: resource.clone(),
                        holder: holder.clone(),
                        token: my_token,
                        shared: false,
                    };
                    let outcome = if my_token >= store_highest {
                        store_highest = my_token;
                        ok(Value::StoreAccepted)
                    } else {
                        ok(Value::StoreRejected {
                            highest: store_highest,
                        })
                    };
                    (call, outcome)
                }
                _ => {
                    let call = Call::Read {
                        resource: resource.clone(),
                        node: rng.below(3),
                    };
                    let outcome = match truth {
                        Some((h, token, _)) => read_held(holders[h], token),
                        None => read_free(),
                    };
                    (call, outcome)
                }
            };
            let (outcome, complete) = if timed_out {
                (unknown(), t + 100 * MS)
            } else {
                (outcome, t + rng.below(10 * MS))
            };
            ops.push(Op {
                id: 0,
                process: c as u64,
                call,
                invoke_ns: invoke,
                complete_ns: complete,
                outcome,
            });
        }
    }
    History {
        clock_epsilon: 0.02,
        ops: in_invocation_order(ops),
        ..History::default()
    }
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
