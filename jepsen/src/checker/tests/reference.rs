//! The reference the pruned search is checked against: a plain Wing–Gong/Lowe search.

use super::*;
use crate::checker::sim::correct_history as synthetic_ttl;

/// The reference: a plain Wing–Gong/Lowe search with expiry as a move of its own, and no
/// dominance, symmetry or other pruning. Exponential; for a handful of ops.
pub(super) fn naive_linearizable(ops: &[linear::SOp], rules: &model::Rules) -> bool {
    use std::collections::HashSet;
    fn rec(
        ops: &[linear::SOp],
        rules: &model::Rules,
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
        for (_, _, next) in state.expiries(rules, min_return) {
            if rec(ops, rules, lin, next, memo) {
                return true;
            }
        }
        for i in 0..ops.len() {
            if lin & (1 << i) != 0 || ops[i].invoke > min_return {
                continue;
            }
            if let Some(next) = model::step(rules, &state, &ops[i].op) {
                if rec(ops, rules, lin | (1 << i), next, memo) {
                    return true;
                }
            }
        }
        false
    }
    rec(ops, rules, 0, model::State::initial(), &mut HashSet::new())
}

pub(super) fn compiled(history: &History) -> Vec<linear::SOp> {
    let policy = history
        .resources
        .values()
        .next()
        .cloned()
        .unwrap_or_default();
    let mut holders = model::Holders::default();
    let mut ops: Vec<&Op> = history.ops.iter().collect();
    ops.sort_by_key(|op| (op.invoke_ns, op.id));
    let mut out = Vec::new();
    for (src, op) in ops.iter().enumerate() {
        if let model::Compiled::Model { op: mop, required } =
            model::compile(op, R, history.clock_epsilon, &policy, &mut holders)
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
        let rules = model::Rules::exclusive();
        let expected = naive_linearizable(&ops, &rules);
        let got = match linear::search(&ops, rules, 10_000_000) {
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
