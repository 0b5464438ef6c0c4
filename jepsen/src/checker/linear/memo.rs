//! The memo of explored configurations, with dominance and symmetry (see the module doc).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::Ctx;
use crate::checker::model::{dead, State};
use crate::history::Nanos;

/// A small, fast, non-cryptographic hasher (FxHash) for the memo.
#[derive(Default)]
pub(super) struct Fx(u64);

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

/// The part of a configuration compared by dominance.
pub(super) struct Entry {
    state: State,
    /// Linearized unknown ops that may still matter, canonical, ascending.
    used: Box<[u32]>,
}

/// What must be equal for one state to dominate another: the leases' holders, modes, units,
/// grace and known tokens. A hash of it keys the memo; [`same_shape`] confirms.
fn shape(state: &State) -> u64 {
    let mut h = Fx::default();
    for l in state.leases() {
        (l.holder, l.mode, l.units, l.grace, l.token.value()).hash(&mut h);
    }
    h.finish()
}

fn same_shape(a: &State, b: &State) -> bool {
    a.leases().len() == b.leases().len()
        && a.leases().iter().zip(b.leases()).all(|(x, y)| {
            (x.holder, x.mode, x.units, x.grace, x.token.value())
                == (y.holder, y.mode, y.units, y.grace, y.token.value())
        })
}

/// Is `a` at least as permissive as `b` (same shape assumed)? A lower floor, a wider unseen
/// token range and earlier expiry and reclaim bounds allow more.
fn permits_more(a: &State, b: &State) -> bool {
    a.floor <= b.floor
        && a.leases().iter().zip(b.leases()).all(|(x, y)| {
            x.token.lo <= y.token.lo
                && x.token.hi >= y.token.hi
                && x.expiry <= y.expiry
                && x.bound <= y.bound
        })
}

pub(super) type Memo = HashMap<(u128, u64), Vec<Entry>, BuildHasherDefault<Fx>>;

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
    pub(super) fn has_twin_before(&self, i: usize, lin: &[bool], min_return: Nanos) -> bool {
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
    pub(super) fn visit(
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
            same_shape(&a.state, b_state)
                && permits_more(&a.state, b_state)
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
}
