//! Simulated histories of a correct cluster, and the pieces recorded histories are made of:
//! the checker's tests use them, and so does its criterion benchmark (`benches/checker.rs`).

use tenure_proto::contract::Reason;

use crate::history::{Call, History, Mode, Op, Outcome, Value};

/// Nanoseconds per millisecond.
pub const MS: u64 = 1_000_000;

/// The seeded generator of simulated histories.
pub struct SimRng(rand::rngs::SmallRng);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(rand::SeedableRng::seed_from_u64(seed))
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        rand::Rng::random_range(&mut self.0, 0..n)
    }
}

/// Simulated ops ordered by invocation and numbered in that order, as a recorded history is.
pub fn in_invocation_order(mut ops: Vec<Op>) -> Vec<Op> {
    ops.sort_by_key(|op| op.invoke_ns);
    for (id, op) in ops.iter_mut().enumerate() {
        op.id = id as u64;
    }
    ops
}

pub fn ok(value: Value) -> Outcome {
    Outcome::Ok { value }
}
pub fn granted(token: u64) -> Outcome {
    ok(Value::Granted {
        token,
        lease_id: format!("lse_{token}_0"),
    })
}
/// A refusal as histories before shared modes recorded it: the first holder only.
pub fn refused(holder: Option<&str>, token: Option<u64>) -> Outcome {
    ok(Value::Refused {
        reason: Reason::ResourceUnavailable.to_string(),
        holder: holder.map(Into::into),
        token,
        holders: vec![],
    })
}
/// A read as histories before shared modes recorded it: the one exclusive lease.
pub fn read_held(holder: &str, token: u64) -> Outcome {
    ok(Value::Read {
        holder: Some(holder.into()),
        token: Some(token),
        leases: vec![],
        revision: 0,
    })
}
pub fn read_free() -> Outcome {
    ok(Value::read(vec![]))
}
/// A refusal for `reason`: a [`Reason`], or its name as a history records it.
pub fn fail(reason: impl std::fmt::Display) -> Outcome {
    Outcome::Fail {
        reason: reason.to_string(),
    }
}
pub fn unknown() -> Outcome {
    Outcome::Unknown {
        error: "deadline exceeded".into(),
    }
}

/// A ground-truth simulation of a correct cluster: `resources` exclusive resources, each with
/// `ops_per_resource` ops from three clients; linearization points in time order, each op's
/// interval around its point, real expiry at (grant or renew point) + `ttl_ms` (+ time lost to
/// a leader change), and `timeout_pct` % of ops timing out whether or not they took effect.
pub fn correct_history(
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
                        many: 0,
                        session_id: String::new(),
                        session_alive_ns: 0,
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
                        sets_metadata: false,
                    };
                    let outcome = match truth {
                        Some((h, token, _)) if h == c && token == my_token => {
                            if applies {
                                log_index += 1;
                                truth = Some((h, token, t + ttl_ms * MS + lost));
                            }
                            ok(Value::Renewed { token })
                        }
                        Some((h, _, _)) if h == c => fail(Reason::StaleFencingToken),
                        _ => fail(Reason::LeaseNotFound),
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
                        Some((h, _, _)) if h == c => fail(Reason::StaleFencingToken),
                        _ => fail(Reason::LeaseExpired),
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
                        register: false,
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
