//! The checker must be shown to fail: small hand-written histories, each with one anomaly,
//! valid controls, and a synthetic history from a ground-truth simulation for speed.

use std::time::{Duration, Instant};

use super::*;
use crate::history::{Call, History, Op, Outcome, Value};

const MS: u64 = 1_000_000;
const R: &str = "res";

/// A history under construction; times in milliseconds.
struct Builder {
    ops: Vec<Op>,
}

impl Builder {
    fn new() -> Self {
        Builder { ops: Vec::new() }
    }

    fn op(&mut self, call: Call, invoke_ms: u64, complete_ms: u64, outcome: Outcome) -> u64 {
        let id = self.ops.len() as u64;
        let process = match &call {
            Call::Acquire { holder, .. }
            | Call::Renew { holder, .. }
            | Call::Release { holder, .. }
            | Call::Write { holder, .. } => holder.bytes().map(u64::from).sum(),
            _ => 0,
        };
        self.ops.push(Op {
            id,
            process,
            call,
            invoke_ns: invoke_ms * MS,
            complete_ns: complete_ms * MS,
            outcome,
        });
        id
    }

    fn history(&self) -> History {
        let mut ops = self.ops.clone();
        ops.sort_by_key(|op| (op.invoke_ns, op.id));
        History {
            clock_epsilon: 0.02,
            started_ns: 0,
            ops,
            ..History::default()
        }
    }

    fn check(&self) -> CheckReport {
        let history = self.history();
        check(
            &history,
            &CheckParams {
                clock_epsilon: history.clock_epsilon,
                max_states_per_resource: 2_000_000,
            },
        )
    }
}

fn acquire(holder: &str, ttl_ms: u64) -> Call {
    Call::Acquire {
        resource: R.into(),
        holder: holder.into(),
        ttl_ms,
    }
}
fn renew(holder: &str, token: u64, ttl_ms: u64) -> Call {
    Call::Renew {
        resource: R.into(),
        holder: holder.into(),
        lease_id: format!("lse_{token}_0"),
        token,
        ttl_ms,
    }
}
fn release(holder: &str, token: u64) -> Call {
    Call::Release {
        resource: R.into(),
        holder: holder.into(),
        lease_id: format!("lse_{token}_0"),
        token,
    }
}
fn validate(token: u64) -> Call {
    Call::Validate {
        resource: R.into(),
        token,
    }
}
fn read(node: u64) -> Call {
    Call::Read {
        resource: R.into(),
        node,
    }
}
fn write(holder: &str, token: u64) -> Call {
    Call::Write {
        resource: R.into(),
        holder: holder.into(),
        token,
    }
}

fn ok(value: Value) -> Outcome {
    Outcome::Ok { value }
}
fn granted(token: u64) -> Outcome {
    ok(Value::Granted {
        token,
        lease_id: format!("lse_{token}_0"),
    })
}
fn refused(holder: Option<&str>, token: Option<u64>) -> Outcome {
    ok(Value::Refused {
        reason: "resource_unavailable".into(),
        holder: holder.map(Into::into),
        token,
    })
}
fn read_held(holder: &str, token: u64) -> Outcome {
    ok(Value::Read {
        holder: Some(holder.into()),
        token: Some(token),
    })
}
fn read_free() -> Outcome {
    ok(Value::Read {
        holder: None,
        token: None,
    })
}
fn fail(reason: &str) -> Outcome {
    Outcome::Fail {
        reason: reason.into(),
    }
}
fn unknown() -> Outcome {
    Outcome::Unknown {
        error: "deadline exceeded".into(),
    }
}

fn kinds(report: &CheckReport) -> Vec<&str> {
    report.anomalies.iter().map(|a| a.kind.as_str()).collect()
}

fn assert_ok(report: &CheckReport) {
    assert!(report.ok(), "expected a clean report, got {:#?}", report);
    assert!(report.linearizable);
}

fn the<'a>(report: &'a CheckReport, kind: &str) -> &'a Anomaly {
    match report.of_kind(kind).into_iter().next() {
        Some(a) => {
            eprintln!("{kind}: {}", a.message);
            a
        }
        None => panic!("expected a {kind} anomaly, got {:#?}", report.anomalies),
    }
}

#[test]
fn a_valid_control_history_passes() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(5));
    h.op(acquire("b", 1000), 5, 15, refused(Some("a"), Some(5)));
    h.op(read(1), 20, 25, read_held("a", 5));
    h.op(
        validate(5),
        20,
        30,
        ok(Value::Validated {
            valid: true,
            reason: "ok".into(),
        }),
    );
    h.op(renew("a", 5, 1000), 30, 40, ok(Value::Renewed { token: 5 }));
    h.op(write("a", 5), 41, 42, ok(Value::StoreAccepted));
    h.op(acquire("a", 1000), 43, 44, granted(5)); // idempotent
    h.op(release("a", 5), 50, 60, ok(Value::Released { token: 5 }));
    h.op(
        validate(5),
        61,
        62,
        ok(Value::Validated {
            valid: false,
            reason: "lease released".into(),
        }),
    );
    h.op(acquire("b", 1000), 61, 70, granted(9));
    h.op(write("b", 9), 71, 72, ok(Value::StoreAccepted));
    h.op(
        write("a", 5),
        73,
        74,
        ok(Value::StoreRejected { highest: 9 }),
    );
    h.op(renew("a", 5, 1000), 75, 76, fail("stale_fencing_token"));
    h.op(release("a", 5), 75, 77, fail("unavailable"));
    h.op(read(2), 80, 85, read_held("b", 9));
    // Concurrent: c is refused, b releases, a read sees the resource free.
    h.op(acquire("c", 1000), 90, 200, refused(Some("b"), Some(9)));
    h.op(release("b", 9), 100, 110, ok(Value::Released { token: 9 }));
    h.op(read(3), 105, 120, read_free());
    h.op(acquire("c", 1000), 210, 220, granted(12));
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.grants, 3);
    assert_eq!(report.resources_checked, 1);
    assert_eq!(report.ops_checked, 18); // the release that failed `unavailable` proves nothing
}

#[test]
fn a_stale_read_after_another_grant_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(release("a", 3), 20, 30, ok(Value::Released { token: 3 }));
    let grant = h.op(acquire("b", 5000), 40, 50, granted(8));
    let stale = h.op(read(2), 60, 70, read_held("a", 3));
    let report = h.check();
    let a = the(&report, "nonlinearizable");
    // The evidence: the read, and the grant that put b in charge before it.
    assert_eq!(a.ops, vec![grant, stale], "{a:#?}");
    assert!(
        a.message.contains("read(node 2)") && a.message.contains("held by b"),
        "{}",
        a.message
    );
    assert!(!report.ok() && !report.linearizable);
}

#[test]
fn a_lost_release_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    let rel = h.op(release("a", 3), 20, 30, ok(Value::Released { token: 3 }));
    let seen = h.op(read(1), 40, 50, read_held("a", 3));
    let report = h.check();
    let a = the(&report, "nonlinearizable");
    assert_eq!(a.ops, vec![rel, seen], "{a:#?}");
    assert!(a.message.contains("free"), "{}", a.message);
}

#[test]
fn overlapping_tenures_are_reported() {
    let mut h = Builder::new();
    let first = h.op(acquire("a", 10_000), 0, 10, granted(3));
    let second = h.op(acquire("b", 10_000), 100, 110, granted(7));
    let report = h.check();
    let a = the(&report, "overlapping_tenures");
    assert_eq!(a.ops, vec![first, second]);
    the(&report, "nonlinearizable");
}

#[test]
fn a_token_going_down_is_reported() {
    let mut h = Builder::new();
    let high = h.op(acquire("a", 10_000), 0, 10, granted(10));
    h.op(release("a", 10), 20, 30, ok(Value::Released { token: 10 }));
    let low = h.op(acquire("b", 10_000), 40, 50, granted(5));
    let report = h.check();
    let a = the(&report, "token_not_increasing");
    assert_eq!(a.ops, vec![high, low]);
    the(&report, "nonlinearizable");
    assert!(
        report.of_kind("overlapping_tenures").is_empty(),
        "{report:#?}"
    );
}

#[test]
fn a_token_granted_twice_is_reported() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(4));
    h.op(release("a", 4), 20, 30, ok(Value::Released { token: 4 }));
    h.op(acquire("b", 1000), 40, 50, granted(4));
    let report = h.check();
    assert!(
        report
            .of_kind("token_not_increasing")
            .iter()
            .any(|a| a.message.contains("2 different holders")),
        "{report:#?}"
    );
    the(&report, "nonlinearizable");
}

#[test]
fn an_acquire_refused_while_free_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(release("a", 3), 20, 30, ok(Value::Released { token: 3 }));
    let refused_op = h.op(acquire("b", 5000), 40, 50, refused(None, None));
    let report = h.check();
    assert!(the(&report, "nonlinearizable").ops.contains(&refused_op));
    assert_eq!(kinds(&report), vec!["nonlinearizable"]);
}

#[test]
fn a_refusal_naming_the_wrong_holder_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("b", 5000), 20, 30, refused(Some("c"), Some(3)));
    the(&h.check(), "nonlinearizable");
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("b", 5000), 20, 30, refused(Some("a"), Some(2)));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn an_idempotent_acquire_must_return_the_same_token() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("a", 5000), 20, 30, granted(3));
    assert_ok(&h.check());
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("a", 5000), 20, 30, granted(4));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn unknown_ops_may_take_effect_late_or_never() {
    let mut h = Builder::new();
    // An acquire that timed out but took effect: revealed by b's refusal and a read.
    h.op(acquire("a", 1000), 0, 500, unknown());
    h.op(acquire("b", 1000), 600, 610, refused(Some("a"), Some(4)));
    h.op(read(1), 620, 630, read_held("a", 4));
    // A release that timed out and never took effect.
    h.op(release("a", 4), 700, 1000, unknown());
    h.op(read(2), 1100, 1110, read_held("a", 4));
    // An acquire that timed out and never took effect.
    h.op(acquire("c", 1000), 1200, 5000, unknown());
    h.op(read(3), 1300, 1310, read_held("a", 4));
    h.op(
        release("a", 4),
        1400,
        1410,
        ok(Value::Released { token: 4 }),
    );
    h.op(acquire("b", 1000), 1500, 1510, granted(9));
    h.op(
        renew("b", 9, 1000),
        1600,
        1610,
        ok(Value::Renewed { token: 9 }),
    );
    assert_ok(&h.check());
}

#[test]
fn an_unknown_grant_still_needs_a_higher_token() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(4));
    h.op(release("a", 4), 20, 30, ok(Value::Released { token: 4 }));
    h.op(acquire("b", 1000), 40, 500, unknown());
    // Token 4 was a's: b's grant (if any) has a higher one.
    h.op(read(1), 600, 610, read_held("b", 4));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn an_unknown_release_that_never_happened_cannot_free_another_tenure() {
    let mut h = Builder::new();
    h.op(acquire("a", 10_000), 0, 10, granted(4));
    h.op(release("a", 3), 20, 500, unknown());
    h.op(read(1), 600, 610, read_free());
    the(&h.check(), "nonlinearizable");
}

#[test]
fn a_lease_expires_after_its_ttl_and_not_before() {
    // ttl 1000 ms, ε 2 %: a's lease cannot expire before 980 ms.
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(3));
    h.op(read(1), 1500, 1510, read_held("a", 3)); // may still be held after the bound
    h.op(acquire("b", 1000), 2000, 2010, granted(7));
    h.op(renew("a", 3, 1000), 2100, 2110, fail("lease_not_found"));
    assert_ok(&h.check());

    let mut h = Builder::new();
    let a = h.op(acquire("a", 1000), 0, 10, granted(3));
    let b = h.op(acquire("b", 1000), 500, 510, granted(7));
    let report = h.check();
    assert_eq!(the(&report, "nonlinearizable").ops, vec![a, b]);
    the(&report, "overlapping_tenures");

    // An expired lease stays expired.
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(3));
    h.op(read(1), 1500, 1510, read_free());
    h.op(read(2), 1600, 1610, read_held("a", 3));
    the(&h.check(), "nonlinearizable");
}

#[test]
fn a_renew_moves_the_bound() {
    let history = |b_at: u64| {
        let mut h = Builder::new();
        h.op(acquire("a", 1000), 0, 10, granted(3));
        h.op(
            renew("a", 3, 1000),
            800,
            810,
            ok(Value::Renewed { token: 3 }),
        );
        h.op(acquire("b", 1000), b_at, b_at + 10, granted(7));
        h.check()
    };
    assert_ok(&history(1900)); // 800 + 980 = 1780 ≤ 1900
    let report = history(1500);
    the(&report, "nonlinearizable");
    the(&report, "overlapping_tenures");
}

#[test]
fn a_renew_after_expiry_cannot_succeed() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(3));
    h.op(read(1), 1500, 1510, read_free());
    h.op(
        renew("a", 3, 1000),
        1600,
        1610,
        ok(Value::Renewed { token: 3 }),
    );
    the(&h.check(), "nonlinearizable");
}

#[test]
fn the_fenced_store_is_checked() {
    // Accepted after a higher token was accepted and returned.
    let mut h = Builder::new();
    h.op(write("a", 9), 0, 1, ok(Value::StoreAccepted));
    h.op(write("b", 5), 2, 3, ok(Value::StoreAccepted));
    assert_eq!(the(&h.check(), "stale_write_accepted").ops, vec![0, 1]);

    // Rejected though nothing higher was accepted.
    let mut h = Builder::new();
    h.op(write("a", 5), 0, 1, ok(Value::StoreAccepted));
    h.op(write("b", 7), 2, 3, ok(Value::StoreRejected { highest: 9 }));
    assert_eq!(the(&h.check(), "fresh_write_rejected").ops, vec![1]);
    let mut h = Builder::new();
    h.op(write("a", 5), 0, 1, ok(Value::StoreAccepted));
    h.op(write("b", 7), 2, 3, ok(Value::StoreRejected { highest: 5 }));
    the(&h.check(), "fresh_write_rejected");

    // A concurrent higher write justifies a rejection; an equal token is accepted.
    let mut h = Builder::new();
    h.op(write("b", 9), 0, 10, ok(Value::StoreAccepted));
    h.op(write("a", 5), 5, 8, ok(Value::StoreRejected { highest: 9 }));
    h.op(write("b", 9), 11, 12, ok(Value::StoreAccepted));
    assert_ok(&h.check());
}

#[test]
fn an_answer_that_does_not_fit_the_call_is_reported() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, ok(Value::StoreAccepted));
    the(&h.check(), "unexpected_value");
}

#[test]
fn a_search_over_budget_is_reported_as_exhausted() {
    let mut h = Builder::new();
    for i in 0..6 {
        h.op(read(i), 0, 100, read_free());
    }
    let history = h.history();
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: 2,
        },
    );
    assert_eq!(report.search_exhausted, vec![R.to_owned()]);
    assert!(!report.ok() && !report.linearizable && report.anomalies.is_empty());
}

#[test]
fn a_report_serializes() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(3));
    h.op(acquire("b", 5000), 20, 30, granted(4));
    let json = serde_json::to_string(&h.check()).expect("json");
    assert!(json.contains("\"nonlinearizable\""), "{json}");
}

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

fn synthetic_ttl(
    resources: usize,
    ops_per_resource: usize,
    seed: u64,
    timeout_pct: u64,
    ttl_ms: u64,
) -> History {
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }
    let mut rng = Rng(seed);
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
    ops.sort_by_key(|op| op.invoke_ns);
    for (id, op) in ops.iter_mut().enumerate() {
        op.id = id as u64;
    }
    History {
        clock_epsilon: 0.02,
        ops,
        ..History::default()
    }
}

#[test]
fn a_synthetic_correct_history_passes_quickly() {
    let history = synthetic(5, 400, 7);
    assert_eq!(history.ops.len(), 2000);
    let unknowns = history
        .ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Unknown { .. }))
        .count();
    assert!(unknowns > 40, "{unknowns}");
    let started = Instant::now();
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: 2_000_000,
        },
    );
    let took = started.elapsed();
    assert_ok(&report);
    assert_eq!(report.resources_checked, 5);
    assert!(report.grants > 50, "{}", report.grants);
    assert!(took < Duration::from_secs(2), "took {took:?}");
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
    let started = Instant::now();
    let report = check(
        &history,
        &CheckParams {
            clock_epsilon: 0.02,
            max_states_per_resource: 2_000_000,
        },
    );
    let took = started.elapsed();
    assert!(
        report.search_exhausted.is_empty(),
        "exhausted after {took:?}"
    );
    assert!(the(&report, "nonlinearizable").ops.contains(&victim));
    assert!(took < Duration::from_secs(20), "took {took:?}");
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

/// The reference: a plain Wing–Gong/Lowe search with expiry as a move of its own, and no
/// dominance, symmetry or other pruning. Exponential; for a handful of ops.
fn naive_linearizable(ops: &[linear::SOp]) -> bool {
    use std::collections::HashSet;
    fn rec(
        ops: &[linear::SOp],
        lin: u64,
        state: model::State,
        memo: &mut HashSet<(u64, model::State)>,
    ) -> bool {
        let pending: Vec<usize> = (0..ops.len())
            .filter(|&i| ops[i].required && lin & (1 << i) == 0)
            .collect();
        if pending.is_empty() {
            return true;
        }
        if !memo.insert((lin, state)) {
            return false;
        }
        let min_return = pending
            .iter()
            .map(|&i| ops[i].complete)
            .min()
            .unwrap_or(u64::MAX);
        if state.may_expire_by(min_return) && rec(ops, lin, state.expired(), memo) {
            return true;
        }
        for i in 0..ops.len() {
            if lin & (1 << i) != 0 || ops[i].invoke > min_return {
                continue;
            }
            if let Some(next) = model::step(&state, &ops[i].op) {
                if rec(ops, lin | (1 << i), next, memo) {
                    return true;
                }
            }
        }
        false
    }
    rec(ops, 0, model::State::initial(), &mut HashSet::new())
}

fn compiled(history: &History) -> Vec<linear::SOp> {
    let mut holders = model::Holders::default();
    let mut ops: Vec<&Op> = history.ops.iter().collect();
    ops.sort_by_key(|op| (op.invoke_ns, op.id));
    let mut out = Vec::new();
    for (src, op) in ops.iter().enumerate() {
        if let model::Compiled::Model { op: mop, required } =
            model::compile(op, history.clock_epsilon, &mut holders)
        {
            out.push(linear::SOp::new(src, op, mop, required));
        }
    }
    out
}

/// Small histories from the ground-truth simulation (short ttl, many timeouts), half of them
/// doctored at random: the search and the plain reference must agree on every one.
#[test]
fn the_pruned_search_agrees_with_a_plain_one() {
    let mut rng = 0x5eed_u64;
    let mut next = move || {
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (mut yes, mut no) = (0, 0);
    let seeds: u64 = std::env::var("FUZZ_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let spread: u64 = std::env::var("FUZZ_SPREAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    for seed in 0..seeds {
        let n = 4 + (seed % spread) as usize;
        let mut history = synthetic_ttl(1, n, seed, 30, 8 + seed % 20);
        let doctored = next() % 3 != 0;
        if doctored {
            let k = (next() % history.ops.len() as u64) as usize;
            let holders = ["h0", "h1", "h2", "h3"];
            let h = holders[(next() % 4) as usize];
            let t = 1 + next() % 6;
            history.ops[k].outcome = match (&history.ops[k].call, next() % 6) {
                (_, 0) => unknown(),
                (Call::Acquire { .. }, 1) => refused(Some(h), Some(t)),
                (Call::Acquire { .. }, _) => granted(t),
                (Call::Read { .. }, 1) => read_free(),
                (Call::Read { .. }, _) => read_held(h, t),
                (Call::Validate { .. }, v) => ok(Value::Validated {
                    valid: v % 2 == 0,
                    reason: String::new(),
                }),
                (Call::Renew { token, .. }, 1) => ok(Value::Renewed { token: *token }),
                (Call::Release { token, .. }, 1) => ok(Value::Released { token: *token }),
                (_, 2) => fail("lease_not_found"),
                (_, _) => fail("stale_fencing_token"),
            };
            // Shift it in time too, sometimes.
            if next() % 3 == 0 {
                let shift = (next() % 40) * MS;
                history.ops[k].invoke_ns = history.ops[k].invoke_ns.saturating_sub(shift / 2);
                history.ops[k].complete_ns += shift / 2;
            }
        }
        if !doctored {
            // An undoctored history passes every check, invariants included.
            let report = check(
                &history,
                &CheckParams {
                    clock_epsilon: 0.02,
                    max_states_per_resource: 1_000_000,
                },
            );
            assert!(report.ok(), "seed {seed}: {:#?}", report.anomalies);
        }
        let ops = compiled(&history);
        let expected = naive_linearizable(&ops);
        let got = match linear::search(&ops, 10_000_000) {
            linear::Outcome::Linearizable => true,
            linear::Outcome::NotLinearizable(_) => false,
            linear::Outcome::Exhausted => panic!("exhausted on {} ops", ops.len()),
        };
        assert_eq!(got, expected, "seed {seed}: {:#?}", history.ops);
        if expected {
            // The model implies the token invariant. (Not the tenure one: tenures use log order
            // to bound a lease's start, which the model does not; they may catch more.)
            let report = check(
                &history,
                &CheckParams {
                    clock_epsilon: 0.02,
                    max_states_per_resource: 1_000_000,
                },
            );
            assert!(
                report.of_kind("token_not_increasing").is_empty(),
                "seed {seed}: {:#?}\n{:#?}",
                report.anomalies,
                history.ops
            );
        }
        if expected {
            yes += 1;
        } else {
            no += 1;
        }
    }
    assert!(yes > 300 && no > 300, "{yes} linearizable, {no} not");
}
