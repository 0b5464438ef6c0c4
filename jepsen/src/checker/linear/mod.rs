//! Wing–Gong linearizability search with Lowe's memoisation, for the ops of one resource
//! (P-compositionality lets the checker search each resource on its own).
//!
//! * Required ops (outcome Ok, or a Fail that proves something) must all be linearized, each at
//!   a point inside `[invoke, complete]`; an op may come next only if it was invoked before every
//!   pending required op completed (`min_return`).
//! * Ops with an unknown outcome complete at infinity: they may be linearized at any point after
//!   their invocation, or never (the search succeeds once every required op is placed).
//! * Expiry: besides ops, a move of the search may let time pass a lease's bound: a lease whose
//!   expiry lower bound has passed may enter the renewal grace (if the policy has one), a lease
//!   whose reclaim lower bound has passed may be reclaimed. That puts the point at or after the
//!   bound, so every pending required op must complete at or after it: allowed iff
//!   `bound ≤ min_return`. The search tries required ops first ("still held"), then unknown
//!   ops, then expiry moves (in holder order after an expiry move: expiring a then b is
//!   expiring b then a). (Trying expiry before unknown ops, or combined with each required op
//!   as the exclusive-only search did, is much slower on histories of shared leases.)
//! * Memoisation (Lowe), strengthened by dominance: a configuration is (set of linearized
//!   required ops, set of linearized unknown ops, model state). The required set is fingerprinted
//!   by XOR-ing a 128-bit random value per op (Zobrist hashing: O(1) to update, 16 bytes to store,
//!   collisions astronomically unlikely). An explored configuration A *dominates* B when they
//!   linearized the same required ops, A's state is at least as permissive (the same leases:
//!   holders, modes, units, grace and known tokens; no higher floor, no narrower unseen-token
//!   range, no later expiry or reclaim bound: [`step`] is monotone in those), and every unknown
//!   op A used that can still take effect from B was used by B too.
//!   Then every move open to B is open to A and leads to a configuration dominating B's, so B
//!   is pruned. Plain Lowe memoisation is the special case of equal configurations.
//! * Symmetry: unknown ops of one class (same kind, holder, token) whose expiry bounds have both
//!   passed are interchangeable: only the first pending one is tried, and used sets are renamed
//!   to the first ones of each class before comparison. Reclaiming a lease that an unknown
//!   acquire or transfer has just created is not tried (not applying that op permits more).
//!   Without these, a pile of never-applied unknown acquires multiplies the search.
//! * The search is an explicit stack: histories have thousands of ops per resource.
//!
//! [`step`]: super::model::step

mod memo;
mod moves;

use std::collections::HashMap;

use super::model::{HolderId, MOp, Rules, State};
use crate::history::Nanos;
use memo::Memo;

/// One op as the search sees it.
#[derive(Clone, Debug)]
pub(crate) struct SOp {
    /// Index into the resource's op list (for evidence).
    pub src: usize,
    pub invoke: Nanos,
    /// `Nanos::MAX` for an unknown outcome.
    pub complete: Nanos,
    pub required: bool,
    pub op: MOp,
}

impl SOp {
    /// History op `op` (at `src` in its resource's list) as the model op `mop`; an op that
    /// need not take effect (unknown outcome) may be linearized any time after its invocation.
    pub fn new(src: usize, op: &crate::history::Op, mop: MOp, required: bool) -> Self {
        let complete = if required {
            op.complete_ns.max(op.invoke_ns)
        } else {
            Nanos::MAX
        };
        SOp {
            src,
            invoke: op.invoke_ns,
            complete,
            required,
            op: mop,
        }
    }
}

/// Where the search got stuck furthest into the history.
#[derive(Clone, Debug)]
pub(crate) struct Evidence {
    /// Required ops linearized on the deepest path.
    pub linearized: usize,
    pub total_required: usize,
    /// The model state there.
    pub state: State,
    /// Every pending required op must take effect by then.
    pub min_return: Nanos,
    /// Indices (into the search's op slice) of the pending required ops that could come next and
    /// cannot, earliest deadline first.
    pub stuck: Vec<usize>,
    /// The last ops linearized on that path, oldest first.
    pub path_tail: Vec<usize>,
}

/// A move of the search: linearize an op, or let a lease pass a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Op(usize),
    /// The holder's lease entered its grace or was reclaimed.
    Expire(HolderId),
}

#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Linearizable,
    NotLinearizable(Box<Evidence>),
    Exhausted,
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Frame {
    state: State,
    /// The move that created this frame (None for the root).
    via: Option<Move>,
    /// First position in `req` not yet linearized.
    req_pos: usize,
    /// First position in `by_complete` not yet linearized.
    comp_pos: usize,
    min_return: Nanos,
    /// 0: trying required ops; 1: unknown ops; 2: expiry moves.
    pass: u8,
    cursor: usize,
}

const PATH_TAIL: usize = 4;
const MAX_STUCK: usize = 8;

/// What does not change during a search.
struct Ctx<'a> {
    ops: &'a [SOp],
    rules: Rules,
    /// Required ops, by invocation.
    req: Vec<usize>,
    /// Unknown ops, by invocation.
    unk: Vec<usize>,
    /// Required ops, by completion.
    by_complete: Vec<usize>,
    /// For an unknown op, the previous unknown op of the same class.
    prev_same: Vec<Option<usize>>,
    /// For an unknown op, its class; and each class's members, ascending.
    class_of: Vec<usize>,
    members: Vec<Vec<usize>>,
}

/// Search for a linearization of `ops` (sorted by invocation) starting from [`State::initial`],
/// under the resource's `rules`.
pub(crate) fn search(ops: &[SOp], rules: Rules, max_states: usize) -> Outcome {
    let n = ops.len();
    let req: Vec<usize> = (0..n).filter(|&i| ops[i].required).collect();
    let unk: Vec<usize> = (0..n).filter(|&i| !ops[i].required).collect();
    let mut by_complete = req.clone();
    by_complete.sort_by_key(|&i| (ops[i].complete, i));
    let total_required = req.len();
    if total_required == 0 {
        return Outcome::Linearizable;
    }
    let mut prev_same = vec![None; n];
    let mut class_of = vec![0; n];
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut classes = HashMap::new();
    for &i in &unk {
        let class = *classes.entry(ops[i].op.class()).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        class_of[i] = class;
        prev_same[i] = members[class].last().copied();
        members[class].push(i);
    }
    let ctx = Ctx {
        ops,
        rules,
        req,
        unk,
        by_complete,
        prev_same,
        class_of,
        members,
    };

    let mut seed = 0x7e4e_0e5e_ed00_0001u64;
    let zobrist: Vec<u128> = (0..n)
        .map(|_| ((splitmix64(&mut seed) as u128) << 64) | splitmix64(&mut seed) as u128)
        .collect();

    let mut lin = vec![false; n];
    let mut fingerprint: u128 = 0;
    let mut done = 0usize;
    // Unknown ops linearized on the current path, in order.
    let mut used: Vec<u32> = Vec::new();
    let mut memo = Memo::default();
    let mut explored = 0usize;
    let mut best: Option<Evidence> = None;

    let mut stack = vec![Frame {
        state: State::initial(),
        via: None,
        req_pos: 0,
        comp_pos: 0,
        min_return: ops[ctx.by_complete[0]].complete,
        pass: 0,
        cursor: 0,
    }];

    while let Some(frame) = stack.last_mut() {
        match ctx.next_candidate(frame, &lin) {
            Some((mv, mut next_state)) => {
                let (req_pos, comp_pos, min_return) = match mv {
                    Move::Op(i) => {
                        lin[i] = true;
                        if ops[i].required {
                            fingerprint ^= zobrist[i];
                            done += 1;
                        } else {
                            used.push(i as u32);
                        }
                        if done == total_required {
                            return Outcome::Linearizable;
                        }
                        let mut req_pos = frame.req_pos;
                        while req_pos < ctx.req.len() && lin[ctx.req[req_pos]] {
                            req_pos += 1;
                        }
                        let mut comp_pos = frame.comp_pos;
                        while comp_pos < ctx.by_complete.len() && lin[ctx.by_complete[comp_pos]] {
                            comp_pos += 1;
                        }
                        // done < total_required, so some required op is pending.
                        let min_return = ctx
                            .by_complete
                            .get(comp_pos)
                            .map_or(Nanos::MAX, |&j| ops[j].complete);
                        (req_pos, comp_pos, min_return)
                    }
                    Move::Expire(_) => (frame.req_pos, frame.comp_pos, frame.min_return),
                };
                // A bound already passed allows its move at every later point (min_return
                // never decreases along a path): all such bounds are equivalent.
                for lease in next_state.leases_mut() {
                    if lease.expiry <= min_return {
                        lease.expiry = 0;
                    }
                    if lease.bound <= min_return {
                        lease.bound = 0;
                    }
                }
                if !ctx.visit(&mut memo, fingerprint, &next_state, &used, min_return) {
                    if let Move::Op(i) = mv {
                        undo(
                            i,
                            ops,
                            &mut lin,
                            &mut fingerprint,
                            &mut done,
                            &mut used,
                            &zobrist,
                        );
                    }
                    continue;
                }
                explored += 1;
                if explored > max_states {
                    return Outcome::Exhausted;
                }
                let cursor = match mv {
                    Move::Op(_) => req_pos,
                    Move::Expire(_) => frame.req_pos,
                };
                stack.push(Frame {
                    state: next_state,
                    via: Some(mv),
                    req_pos,
                    comp_pos,
                    min_return,
                    pass: 0,
                    cursor,
                });
            }
            None => {
                let deeper = match &best {
                    None => true,
                    Some(b) => done > b.linearized,
                };
                if deeper {
                    let frame = &stack[stack.len() - 1];
                    let mut stuck: Vec<usize> = ctx.req[frame.req_pos..]
                        .iter()
                        .copied()
                        .take_while(|&j| ops[j].invoke <= frame.min_return)
                        .filter(|&j| !lin[j])
                        .collect();
                    stuck.sort_by_key(|&j| (ops[j].complete, j));
                    stuck.truncate(MAX_STUCK);
                    let mut path_tail: Vec<usize> = stack
                        .iter()
                        .rev()
                        .filter_map(|f| match f.via {
                            Some(Move::Op(i)) => Some(i),
                            _ => None,
                        })
                        .take(PATH_TAIL)
                        .collect();
                    path_tail.reverse();
                    best = Some(Evidence {
                        linearized: done,
                        total_required,
                        state: frame.state,
                        min_return: frame.min_return,
                        stuck,
                        path_tail,
                    });
                }
                if let Some(Some(Move::Op(i))) = stack.pop().map(|f| f.via) {
                    undo(
                        i,
                        ops,
                        &mut lin,
                        &mut fingerprint,
                        &mut done,
                        &mut used,
                        &zobrist,
                    );
                }
            }
        }
    }

    match best {
        Some(evidence) => Outcome::NotLinearizable(Box::new(evidence)),
        // Unreachable: the root frame always ends in a dead end before the stack empties.
        None => Outcome::Linearizable,
    }
}

fn undo(
    i: usize,
    ops: &[SOp],
    lin: &mut [bool],
    fingerprint: &mut u128,
    done: &mut usize,
    used: &mut Vec<u32>,
    zobrist: &[u128],
) {
    lin[i] = false;
    if ops[i].required {
        *fingerprint ^= zobrist[i];
        *done -= 1;
    } else {
        // Moves are undone in reverse order.
        used.pop();
    }
}
