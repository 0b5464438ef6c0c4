//! A ground-truth simulation of a correct cluster serving one resource that is shared (READ and
//! WRITE over a pool), transferable and has a renewal grace; its histories must pass, and on
//! small doctored ones the pruned search must agree with the plain reference.

use std::time::Instant;

use super::reference::{compiled, naive_linearizable};
use super::*;

const HOLDERS: [&str; 5] = ["h0", "h1", "h2", "h3", "h4"];

fn policy(grace_ms: u64) -> ResourcePolicy {
    ResourcePolicy {
        shared_modes: vec![Mode::Read, Mode::Write],
        total_units: 4,
        transferable: true,
        renewal_grace_ms: grace_ms,
        ..ResourcePolicy::default()
    }
}

/// A live lease in the simulated cluster.
#[derive(Clone)]
struct Truth {
    holder: usize,
    mode: Mode,
    units: u64,
    token: u64,
    expiry: u64,
    reclaim: u64,
}

fn held(l: &Truth, now: u64) -> Held {
    Held {
        holder: HOLDERS[l.holder].into(),
        token: l.token,
        mode: l.mode,
        units: l.units,
        grace: now >= l.expiry,
    }
}

/// `n` ops on resource `R` under [`policy`]; `timeout_pct` of the calls time out (and take
/// effect or not).
fn simulate(n: usize, seed: u64, timeout_pct: u64, ttl_ms: u64, grace_ms: u64) -> History {
    let policy = policy(grace_ms);
    let mut rng = SimRng::new(seed);
    let mut log = 0u64;
    let mut live: Vec<Truth> = Vec::new();
    let mut known: [u64; 5] = [1; 5];
    let mut store = 0u64;
    let mut ops = Vec::new();
    let mut t = 50 * MS;
    for _ in 0..n {
        t += (1 + rng.below(8)) * MS;
        live.retain(|l| l.reclaim > t);
        let c = rng.below(5) as usize;
        let me = HOLDERS[c].to_owned();
        let timed_out = rng.below(100) < timeout_pct;
        let applies = !timed_out || rng.below(2) == 0;
        let lost = rng.below(20) * MS;
        let expiry = t + ttl_ms * MS + lost;
        let reclaim = expiry + grace_ms * MS;
        let own = live.iter().position(|l| l.holder == c);
        let mine = own.filter(|&i| live[i].token == known[c]);
        let not_mine = |own: Option<usize>| match own {
            Some(_) => fail("stale_fencing_token"),
            None => fail("lease_not_found"),
        };
        let (call, outcome) = match rng.below(12) {
            0..=3 => {
                let mode = [Mode::Exclusive, Mode::Read, Mode::Write][rng.below(3) as usize];
                let asked = 1 + rng.below(3);
                let units = policy.effective_units(mode, asked);
                let call = acquire_in(&me, mode, asked, ttl_ms);
                let used: u64 = live.iter().map(|l| l.units).sum();
                let outcome = match own {
                    Some(i) if live[i].mode == mode && live[i].units == units => {
                        granted(live[i].token)
                    }
                    Some(_) => fail("already_held"),
                    None if live.is_empty()
                        || (mode != Mode::Exclusive
                            && live.iter().all(|l| l.mode != Mode::Exclusive)
                            && used + units <= 4) =>
                    {
                        log += 1;
                        if applies {
                            let token = log;
                            live.push(Truth {
                                holder: c,
                                mode,
                                units,
                                token,
                                expiry,
                                reclaim,
                            });
                        }
                        known[c] = log;
                        granted(log)
                    }
                    None => {
                        let reason = if mode == Mode::Exclusive
                            || live.iter().any(|l| l.mode == Mode::Exclusive)
                        {
                            "resource_unavailable"
                        } else {
                            "insufficient_units"
                        };
                        let holders: Vec<Held> = live.iter().map(|l| held(l, t)).collect();
                        ok(Value::Refused {
                            reason: reason.into(),
                            holder: holders.first().map(|h| h.holder.clone()),
                            token: holders.first().map(|h| h.token),
                            holders,
                        })
                    }
                };
                (call, outcome)
            }
            4 | 5 => {
                let call = renew(&me, known[c], ttl_ms);
                let outcome = match mine {
                    Some(i) => {
                        log += 1;
                        if applies {
                            live[i].expiry = expiry;
                            live[i].reclaim = reclaim;
                        }
                        ok(Value::Renewed { token: known[c] })
                    }
                    None => not_mine(own),
                };
                (call, outcome)
            }
            6 => {
                let call = release(&me, known[c]);
                let outcome = match mine {
                    Some(i) => {
                        log += 1;
                        if applies {
                            live.remove(i);
                        }
                        ok(Value::Released { token: known[c] })
                    }
                    None => not_mine(own),
                };
                (call, outcome)
            }
            7 => {
                let d = (c + 1 + rng.below(4) as usize) % 5;
                let call = Call::Transfer {
                    resource: R.into(),
                    holder: me.clone(),
                    lease_id: format!("lse_{}_0", known[c]),
                    token: known[c],
                    to_holder: HOLDERS[d].into(),
                };
                let outcome = match mine {
                    Some(_) if live.iter().any(|l| l.holder == d) => fail("already_held"),
                    Some(i) => {
                        log += 1;
                        let (mode, units) = (live[i].mode, live[i].units);
                        if applies {
                            live[i].holder = d;
                            live[i].token = log;
                        }
                        known[d] = log;
                        ok(Value::Transferred {
                            token: log,
                            lease_id: format!("lse_{log}_0"),
                            mode,
                            units,
                        })
                    }
                    None => not_mine(own),
                };
                (call, outcome)
            }
            8 => {
                let token = known[c];
                let valid = live.iter().any(|l| l.token == token && t < l.expiry);
                (
                    validate(token),
                    ok(Value::Validated {
                        valid,
                        reason: String::new(),
                    }),
                )
            }
            9 => {
                let call = Call::ListLeases {
                    resource: R.into(),
                    holder: me.clone(),
                };
                let leases = own.map(|i| held(&live[i], t)).into_iter().collect();
                (call, ok(Value::Leases { leases }))
            }
            10 => {
                let token = known[c];
                let shared = own.is_some_and(|i| live[i].mode != Mode::Exclusive);
                let call = Call::Write {
                    resource: R.into(),
                    holder: me.clone(),
                    token,
                    shared,
                    register: false,
                };
                let outcome = if token >= store {
                    if !shared {
                        store = token;
                    }
                    ok(Value::StoreAccepted)
                } else {
                    ok(Value::StoreRejected { highest: store })
                };
                (call, outcome)
            }
            _ => (
                read(rng.below(3)),
                ok(Value::read(live.iter().map(|l| held(l, t)).collect())),
            ),
        };
        let local = matches!(call, Call::Write { .. });
        let (outcome, invoke, complete) = if timed_out && !local {
            (unknown(), t - rng.below(10 * MS), t + 100 * MS)
        } else {
            (outcome, t - rng.below(10 * MS), t + rng.below(10 * MS))
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
    History {
        clock_epsilon: 0.02,
        ops: in_invocation_order(ops),
        resources: [(R.to_owned(), policy)].into_iter().collect(),
        ..History::default()
    }
}

fn params() -> CheckParams {
    CheckParams {
        clock_epsilon: 0.02,
        max_states_per_resource: 2_000_000,
    }
}

#[test]
fn simulated_pool_histories_pass() {
    let seeds: u64 = env_or("POOL_SEEDS", 30);
    for seed in 0..seeds {
        let (ttl, grace) = [(200, 60), (60, 0), (40, 30), (300, 5)][(seed % 4) as usize];
        let history = simulate(400, seed, 2 + seed % 7, ttl, grace);
        let report = check(&history, &params());
        assert!(report.ok(), "seed {seed}: {:#?}", report.anomalies);
        assert!(report.grants > 5, "seed {seed}: {} grants", report.grants);
    }
}

#[test]
fn a_long_pool_history_checks_quickly() {
    let history = simulate(3000, 11, 4, 150, 50);
    // "Quickly" as a deterministic effort bound rather than a wall-clock one: the search must
    // finish within a small state budget (the timing itself is the ignored benchmark's job).
    let report = check(
        &history,
        &CheckParams {
            max_states_per_resource: QUICK_STATES,
            ..params()
        },
    );
    assert_ok(&report);
}

#[test]
fn a_doctored_pool_history_fails() {
    let mut history = simulate(400, 3, 5, 200, 60);
    // A read late in the run forgets one of several co-holders.
    let victim = history
        .ops
        .iter()
        .rposition(|op| {
            matches!(&op.outcome, Outcome::Ok { value: Value::Read { leases, .. } } if leases.len() > 1)
        })
        .expect("a read of co-holders");
    if let Outcome::Ok {
        value: Value::Read { leases, .. },
    } = &history.ops[victim].outcome
    {
        let fewer = leases[1..].to_vec();
        history.ops[victim].outcome = ok(Value::read(fewer));
    }
    let id = history.ops[victim].id;
    let report = check(&history, &params());
    assert!(the(&report, "nonlinearizable").ops.contains(&id));
}

/// Small histories of the simulation (short ttl and grace, many timeouts), most doctored at
/// random: the search and the plain reference must agree on every one.
#[test]
fn the_pruned_search_agrees_with_a_plain_one_on_pools() {
    let mut rng = SimRng::new(0x9001);
    let (mut yes, mut no) = (0, 0);
    let seeds: u64 = std::env::var("FUZZ_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let spread: u64 = env_or("FUZZ_SPREAD", 8);
    for seed in 0..seeds {
        let n = 4 + (seed % spread) as usize;
        let grace = [0, 4, 9][(seed % 3) as usize];
        let mut history = simulate(n, seed, 30, 6 + seed % 15, grace);
        let doctored = rng.below(3) != 0;
        if doctored {
            let k = rng.below(history.ops.len() as u64) as usize;
            let h = HOLDERS[rng.below(5) as usize];
            let tok = 1 + rng.below(6);
            let mode = [Mode::Exclusive, Mode::Read, Mode::Write][rng.below(3) as usize];
            let some = Held {
                holder: h.into(),
                token: tok,
                mode,
                units: if mode == Mode::Exclusive {
                    0
                } else {
                    1 + rng.below(3)
                },
                grace: rng.below(4) == 0,
            };
            history.ops[k].outcome = match (&history.ops[k].call, rng.below(5)) {
                (_, 0) => unknown(),
                (Call::Acquire { .. }, 1) => ok(Value::Refused {
                    reason: "insufficient_units".into(),
                    holder: None,
                    token: None,
                    holders: vec![some],
                }),
                (Call::Acquire { .. }, 2) => fail("already_held"),
                (Call::Acquire { .. }, _) => granted(tok),
                (Call::Read { .. }, 1) => read_free(),
                (Call::Read { .. }, _) => ok(Value::read(vec![some])),
                (Call::ListLeases { .. }, _) => ok(Value::Leases {
                    leases: vec![Held {
                        holder: history.ops[k].call.holder().unwrap_or("h0").into(),
                        ..some
                    }],
                }),
                (Call::Validate { .. }, v) => ok(Value::Validated {
                    valid: v % 2 == 0,
                    reason: String::new(),
                }),
                (Call::Transfer { .. }, 1) => fail("already_held"),
                (Call::Transfer { .. }, _) => ok(Value::Transferred {
                    token: tok,
                    lease_id: String::new(),
                    mode,
                    units: some.units,
                }),
                (Call::Renew { token, .. }, 1) => ok(Value::Renewed { token: *token }),
                (Call::Release { token, .. }, 1) => ok(Value::Released { token: *token }),
                (_, 2) => fail("lease_not_found"),
                (_, _) => fail("stale_fencing_token"),
            };
            if rng.below(3) == 0 {
                let shift = rng.below(40) * MS;
                history.ops[k].invoke_ns = history.ops[k].invoke_ns.saturating_sub(shift / 2);
                history.ops[k].complete_ns += shift / 2;
            }
        } else {
            let report = check(&history, &params());
            assert!(report.ok(), "seed {seed}: {:#?}", report.anomalies);
        }
        let ops = compiled(&history);
        let rules = model::Rules::of(&history.resources[R]);
        let expected = naive_linearizable(&ops, &rules);
        let got = match linear::search(&ops, rules, 10_000_000) {
            linear::Outcome::Linearizable => true,
            linear::Outcome::NotLinearizable(_) => false,
            linear::Outcome::Exhausted => panic!("exhausted on {} ops", ops.len()),
        };
        assert_eq!(got, expected, "seed {seed}: {:#?}", history.ops);
        if expected {
            yes += 1;
        } else {
            no += 1;
        }
    }
    eprintln!("pools: {yes} linearizable, {no} not");
    assert!(yes > 200 && no > 200, "{yes} linearizable, {no} not");
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A benchmark: `POOL_N=5000 POOL_PCT=8 POOL_GRACE=50 cargo test --release -p tenure-jepsen
/// --lib pool_benchmark -- --ignored --nocapture`.
#[test]
#[ignore]
fn pool_benchmark() {
    let n: usize = env_or("POOL_N", 3000);
    let pct: u64 = env_or("POOL_PCT", 8);
    let grace: u64 = env_or("POOL_GRACE", 50);
    let budget: usize = env_or("POOL_BUDGET", 20_000_000);
    for seed in 0..3 {
        let history = simulate(n, seed + 11, pct, 150, grace);
        let ops = compiled(&history);
        let rules = model::Rules::of(&history.resources[R]);
        let started = Instant::now();
        let out = linear::search(&ops, rules, budget);
        let search = started.elapsed();
        let started = Instant::now();
        let report = check(&history, &params());
        eprintln!(
            "n={n} pct={pct} grace={grace} seed={seed}: search {search:?} {:?}; check {:?} ok={}",
            out_word(&out),
            started.elapsed(),
            report.ok()
        );
    }
}

fn out_word(out: &linear::Outcome) -> &'static str {
    match out {
        linear::Outcome::Linearizable => "linearizable",
        linear::Outcome::NotLinearizable(_) => "NOT linearizable",
        linear::Outcome::Exhausted => "exhausted",
    }
}
