//! Wing–Gong linearizability search with Lowe's memoisation, for the ops of one resource
//! (P-compositionality lets the checker search each resource on its own).
//!
//! * Required ops (outcome Ok, or a Fail that proves something) must all be linearized, each at
//!   a point inside `[invoke, complete]`; an op may come next only if it was invoked before every
//!   pending required op completed (`min_return`).
//! * Ops with an unknown outcome complete at infinity: they may be linearized at any point after
//!   their invocation, or never (the search succeeds once every required op is placed).
//! * Expiry: before any op, a lease whose lower bound has passed may be dropped. That puts the
//!   linearization point at or after `bound`, so every pending required op must complete at or
//!   after it: allowed iff `bound ≤ min_return`. The search tries "still held" first.
//! * Memoisation (Lowe), strengthened by dominance: a configuration is (set of linearized
//!   required ops, set of linearized unknown ops, model state). The required set is fingerprinted
//!   by XOR-ing a 128-bit random value per op (Zobrist hashing: O(1) to update, 16 bytes to store,
//!   collisions astronomically unlikely). An explored configuration A *dominates* B when they
//!   linearized the same required ops, A's state is at least as permissive (same lease holder
//!   and known token; no higher floor, unseen-token minimum or expiry bound: [`step`] is monotone
//!   in those), and every unknown op A used that can still take effect from B was used by B too.
//!   Then every move open to B is open to A and leads to a configuration dominating B's, so B
//!   is pruned. Plain Lowe memoisation is the special case of equal configurations.
//! * Symmetry: unknown ops of one class (same kind, holder, token) whose expiry bounds have both
//!   passed are interchangeable: only the first pending one is tried, and used sets are renamed
//!   to the first ones of each class before comparison. Expiring a lease that an unknown acquire
//!   has just created is not tried (not applying that acquire permits more). Without these, a
//!   pile of never-applied unknown acquires multiplies the search.
//! * The search is an explicit stack: histories have thousands of ops per resource.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::model::{dead, step, HolderId, MOp, State, Token};
use crate::history::Nanos;

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

#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Linearizable,
    NotLinearizable(Box<Evidence>),
    Exhausted,
}

/// A small, fast, non-cryptographic hasher (FxHash) for the memo.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
}

/// The part of a state that must be equal for one configuration to dominate another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape(Option<(HolderId, Option<u64>)>);

/// The part of a configuration compared by dominance.
struct Entry {
    state: State,
    /// Linearized unknown ops that may still matter, canonical, ascending.
    used: Box<[u32]>,
}

fn shape(state: &State) -> Shape {
    Shape(state.lease.map(|lease| {
        let known = match lease.token {
            Token::Known(t) => Some(t),
            Token::AtLeast(_) => None,
        };
        (lease.holder, known)
    }))
}

/// Is `a` at least as permissive as `b` (same shape assumed)? Lower floor, unseen-token minimum
/// and expiry bound allow more.
fn permits_more(a: &State, b: &State) -> bool {
    let numbers = |s: &State| match s.lease {
        None => (0, 0),
        Some(lease) => match lease.token {
            Token::Known(_) => (0, lease.bound),
            Token::AtLeast(m) => (m, lease.bound),
        },
    };
    let (a_min, a_bound) = numbers(a);
    let (b_min, b_bound) = numbers(b);
    a.floor <= b.floor && a_min <= b_min && a_bound <= b_bound
}

type Memo = HashMap<(u128, Shape), Vec<Entry>, BuildHasherDefault<Fx>>;

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Frame {
    state: State,
    /// The op whose linearization created this frame (None for the root).
    via: Option<usize>,
    /// First position in `req` not yet linearized.
    req_pos: usize,
    /// First position in `by_complete` not yet linearized.
    comp_pos: usize,
    min_return: Nanos,
    /// 0: trying required ops; 1: trying unknown ones.
    pass: u8,
    cursor: usize,
    /// 0: next try is with the state as is; 1: with the lease expired.
    expired_phase: u8,
}

const PATH_TAIL: usize = 4;
const MAX_STUCK: usize = 8;

/// What does not change during a search.
struct Ctx<'a> {
    ops: &'a [SOp],
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

impl Ctx<'_> {
    /// Has unknown op `i` become interchangeable with every other settled op of its class? Yes
    /// once its expiry bound has passed (min_return never decreases along a path), or, for an
    /// op without a bound, once it may be linearized at all.
    fn settled(&self, i: usize, min_return: Nanos) -> bool {
        match self.ops[i].op.bound() {
            Some(bound) => bound <= min_return,
            None => self.ops[i].invoke <= min_return,
        }
    }

    /// Is an earlier, still pending unknown op interchangeable with unknown op `i`? Then only
    /// that one is tried (symmetry reduction).
    fn has_twin_before(&self, i: usize, lin: &[bool], min_return: Nanos) -> bool {
        let bound = self.ops[i].op.bound();
        let mut j = self.prev_same[i];
        while let Some(k) = j {
            if !lin[k] {
                let twin = match (bound, self.ops[k].op.bound()) {
                    (Some(a), Some(b)) => a == b || (a <= min_return && b <= min_return),
                    _ => self.ops[k].invoke <= min_return,
                };
                if twin {
                    return true;
                }
            }
            j = self.prev_same[k];
        }
        false
    }

    /// The used set with, in each class, its settled ops replaced by the class's first settled
    /// ops (as many): configurations equal up to such a renaming are equivalent.
    fn canonical_used(&self, used: &[u32], min_return: Nanos) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::with_capacity(used.len());
        let mut settled_per_class: Vec<(usize, usize)> = Vec::new();
        for &u in used {
            let i = u as usize;
            if self.settled(i, min_return) {
                let class = self.class_of[i];
                match settled_per_class.iter_mut().find(|(c, _)| *c == class) {
                    Some((_, count)) => *count += 1,
                    None => settled_per_class.push((class, 1)),
                }
            } else {
                out.push(u);
            }
        }
        for (class, count) in settled_per_class {
            let firsts = self.members[class]
                .iter()
                .copied()
                .filter(|&j| self.settled(j, min_return))
                .take(count);
            out.extend(firsts.map(|j| j as u32));
        }
        out.sort_unstable();
        out
    }

    /// Record a configuration; false if an explored one dominates it: it linearized the same
    /// required ops, its state permits at least as much, and every unknown op it used that
    /// still matters here was used here too.
    fn visit(
        &self,
        memo: &mut Memo,
        fingerprint: u128,
        state: &State,
        used: &[u32],
        min_return: Nanos,
    ) -> bool {
        let alive: Vec<u32> = used
            .iter()
            .copied()
            .filter(|&u| !dead(&self.ops[u as usize].op, state))
            .collect();
        let used = self.canonical_used(&alive, min_return);
        let covers = |a: &Entry, b_state: &State, b_used: &[u32]| {
            permits_more(&a.state, b_state)
                && a.used.iter().all(|&x| {
                    b_used.binary_search(&x).is_ok() || dead(&self.ops[x as usize].op, b_state)
                })
        };
        let list = memo.entry((fingerprint, shape(state))).or_default();
        if list.iter().any(|e| covers(e, state, &used)) {
            return false;
        }
        let entry = Entry {
            state: *state,
            used: used.into_boxed_slice(),
        };
        list.retain(|e| !covers(&entry, &e.state, &e.used));
        list.push(entry);
        true
    }

    /// The next (op, resulting state) this frame can try, advancing its cursor.
    fn next_candidate(&self, frame: &mut Frame, lin: &[bool]) -> Option<(usize, State)> {
        loop {
            let list = if frame.pass == 0 {
                &self.req
            } else {
                &self.unk
            };
            let i = match list.get(frame.cursor) {
                // Sorted by invocation: once one is invoked too late, so are the rest.
                Some(&i) if self.ops[i].invoke <= frame.min_return => i,
                _ => {
                    if frame.pass == 0 {
                        frame.pass = 1;
                        frame.cursor = 0;
                        frame.expired_phase = 0;
                        continue;
                    }
                    return None;
                }
            };
            if lin[i]
                || (frame.pass == 1
                    && frame.expired_phase == 0
                    && self.has_twin_before(i, lin, frame.min_return))
            {
                frame.cursor += 1;
                frame.expired_phase = 0;
                continue;
            }
            let base = if frame.expired_phase == 0 {
                frame.expired_phase = 1;
                Some(frame.state)
            } else {
                frame.expired_phase = 0;
                frame.cursor += 1;
                // Expiring a lease an unknown acquire has just created is never needed: not
                // applying that acquire leaves a state at least as permissive.
                let fresh_unknown_grant = frame
                    .via
                    .is_some_and(|v| matches!(self.ops[v].op, MOp::AcquireUnknown { .. }));
                (!fresh_unknown_grant && frame.state.may_expire_by(frame.min_return))
                    .then(|| frame.state.expired())
            };
            if let Some(next) = base.and_then(|s| step(&s, &self.ops[i].op)) {
                return Some((i, next));
            }
        }
    }
}

/// Search for a linearization of `ops` (sorted by invocation) starting from [`State::initial`].
pub(crate) fn search(ops: &[SOp], max_states: usize) -> Outcome {
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
        expired_phase: 0,
    }];

    while let Some(frame) = stack.last_mut() {
        match ctx.next_candidate(frame, &lin) {
            Some((i, mut next_state)) => {
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
                // A bound already passed allows expiry at every later point (min_return never
                // decreases along a path): all such bounds are equivalent.
                if let Some(lease) = next_state.lease.as_mut() {
                    if lease.bound <= min_return {
                        lease.bound = 0;
                    }
                }
                if !ctx.visit(&mut memo, fingerprint, &next_state, &used, min_return) {
                    undo(
                        i,
                        ops,
                        &mut lin,
                        &mut fingerprint,
                        &mut done,
                        &mut used,
                        &zobrist,
                    );
                    continue;
                }
                explored += 1;
                if explored > max_states {
                    return Outcome::Exhausted;
                }
                stack.push(Frame {
                    state: next_state,
                    via: Some(i),
                    req_pos,
                    comp_pos,
                    min_return,
                    pass: 0,
                    cursor: req_pos,
                    expired_phase: 0,
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
                        .filter_map(|f| f.via)
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
                let popped = stack.pop();
                if let Some(i) = popped.and_then(|f| f.via) {
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
