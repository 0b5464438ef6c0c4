//! An independent model of one resource (SPEC §4.1–4.6, §4.10, §5) under its policy: exclusive
//! and shared (READ/WRITE) leases, a unit pool, transfers and the renewal grace. Written for the
//! checker, not derived from the node: every history op of a resource is compiled into a
//! [`MOp`] (`compile`), and [`step`] says whether it can take effect on a model [`State`] and
//! what the state becomes.
//!
//! The model does not know fencing tokens in advance (they are Raft log indexes): it knows only
//! that every grant's (or transfer's) token is above every earlier one, so it keeps a `floor`
//! (the lowest token the next grant may carry). A lease granted by an op whose answer was lost
//! holds a [`Token`] range, narrowed when a later grant's token is known (it is below that) and
//! fixed when a later op reveals it.
//!
//! Time is not a transition of [`step`]: the search decides when a lease may pass its expiry
//! (enter the renewal grace, [`State::enter_grace`]) or be reclaimed ([`State::reclaim`]), after
//! the lower bounds `expiry` and `bound` the lease carries.
//!
//! The rules ("live" = in the state, active or in grace; "match" binds an unseen token):
//! * acquire → `Granted{t}`: the holder's live lease in the same mode and units with token `t`
//!   (idempotent: bounds unchanged); or the holder has none, the request is compatible (no live
//!   lease; or it and every live lease are shared and the units fit the pool) and `t ≥ floor`
//!   → a new lease, expiry `invoke + ttl·(1−ε)`, reclaim `invoke + (ttl + grace)·(1−ε)`.
//! * acquire → `Refused{resource_unavailable}`: the holder has no lease and the request is
//!   incompatible by mode; `Refused{insufficient_units}`: by units only. Either way the holders
//!   the answer lists are exactly the live leases. Other refusals constrain nothing.
//! * acquire → `already_held`: the holder has a live lease in another mode or with other units.
//! * acquire, outcome unknown: if it would grant, a new lease with an unseen token (or nothing).
//! * any call refused for a quota (`quota_exceeded`): nothing happened to the resource; it is
//!   not part of the search (`checker::quota` judges whether the quota was full).
//! * an acquire with `WAIT` follows the same rules: its admission is a grant somewhere inside
//!   the call (in the entry that freed the resource, whose index is the token); a wait that
//!   ended `wait_timeout` / `wait_cancelled` changed no lease (the waiting checker judges the
//!   queue). A plain acquire never ends so, and a `WAIT` one never ends refused otherwise.
//! * renew → ok: the holder's live lease with that token; new bounds, active again.
//! * release → ok: the holder's live lease with that token; it is gone.
//! * transfer → ok `{t'}`: the resource is transferable, the holder's live lease has the token,
//!   `to` has no lease, `t' ≥ floor`; the lease becomes `to`'s with token `t'`, mode, units,
//!   bounds and grace kept. The old (holder, token) is dead from then on.
//! * renew/release/transfer → `stale_fencing_token`/`lease_expired`/`lease_not_found`: (holder,
//!   token) is not live. transfer → `already_held`: it is live and `to` holds a lease.
//! * renew/release/transfer, outcome unknown: the same effect, or none.
//! * validate → `valid`: a live, active (not in grace) lease carries the token; `!valid`: none
//!   does.
//! * read → exactly the live leases (holder, token, mode, units, grace); list_leases(holder) →
//!   exactly the holder's live lease on the resource, or none.
//! * writes to the fenced store are not part of this model (see the invariants).
//!
//! What the rules keep true in every state the search reaches (the invariants "at no point of
//! any linearization"): shared leases never draw more than `total_units`, an exclusive lease is
//! the only live lease, a holder has at most one lease ([`State::within`]).

mod compile;
mod describe;
mod step;
#[cfg(test)]
mod tests;

use std::hash::{Hash, Hasher};

pub(crate) use compile::{alive_since, compile, ttl_floor_ns, Compiled, Holders};
pub(crate) use describe::{at, describe_op, describe_state};
pub(crate) use step::{dead, step, MOp, Refusal, Seen};

use crate::history::{Mode, Nanos, ResourcePolicy};

/// A holder name interned per resource.
pub(crate) type HolderId = u32;

/// Live leases a state can hold: enough for a pool of this many units (each shared lease draws
/// at least one) or for this many holders of a pool-less shared resource.
pub(crate) const MAX_LEASES: usize = 8;

/// What the model knows of a resource's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rules {
    pub read: bool,
    pub write: bool,
    /// `total_units`; 0 = no pool.
    pub pool: u64,
    pub transferable: bool,
    /// The policy has a renewal grace: a lease may be past its expiry and still live.
    pub grace: bool,
}

impl Rules {
    pub(crate) fn of(policy: &ResourcePolicy) -> Self {
        Rules {
            read: policy.shared_modes.contains(&Mode::Read),
            write: policy.shared_modes.contains(&Mode::Write),
            pool: policy.total_units,
            transferable: policy.transferable,
            grace: policy.renewal_grace_ms > 0,
        }
    }

    /// The ad-hoc policy: exclusive only.
    #[cfg(test)]
    pub(crate) fn exclusive() -> Self {
        Rules::of(&ResourcePolicy::default())
    }

    pub(crate) fn allows(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => true,
            Mode::Read => self.read,
            Mode::Write => self.write,
        }
    }

    /// Can the model hold every lease these `holders` could have at once?
    pub(crate) fn fits(&self, holders: usize) -> bool {
        if !self.read && !self.write {
            return true;
        }
        let most = if self.pool > 0 {
            (self.pool as usize).min(holders)
        } else {
            holders
        };
        most <= MAX_LEASES
    }
}

/// A lease's fencing token as far as the model knows it: some value in `lo..=hi`
/// (known when `lo == hi`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Token {
    pub lo: u64,
    pub hi: u64,
}

impl Token {
    pub(crate) fn known(t: u64) -> Self {
        Token { lo: t, hi: t }
    }

    pub(crate) fn at_least(t: u64) -> Self {
        Token {
            lo: t,
            hi: u64::MAX,
        }
    }

    pub(crate) fn value(&self) -> Option<u64> {
        (self.lo == self.hi).then_some(self.lo)
    }

    pub(crate) fn may_be(&self, t: u64) -> bool {
        self.lo <= t && t <= self.hi
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Lease {
    pub holder: HolderId,
    pub mode: Mode,
    /// Past its nominal expiry, inside the renewal grace (status `GRACE`).
    pub grace: bool,
    /// Units drawn from the pool (0: exclusive, or no pool).
    pub units: u32,
    pub token: Token,
    /// It cannot pass its expiry before this instant (harness clock; 0 = at any moment).
    pub expiry: Nanos,
    /// It cannot be reclaimed before this instant (0 = at any moment).
    pub bound: Nanos,
}

impl Lease {
    /// A lease as an acquire grants it: active, its token still to be bound.
    pub(crate) fn granted(
        holder: HolderId,
        mode: Mode,
        units: u32,
        expiry: Nanos,
        bound: Nanos,
    ) -> Self {
        Lease {
            holder,
            mode,
            grace: false,
            units,
            token: Token::default(),
            expiry,
            bound,
        }
    }
}

/// The live leases of a resource (sorted by holder: one lease per holder) and the token floor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct State {
    n: u8,
    slots: [Lease; MAX_LEASES],
    /// Every future grant's token is ≥ this (tokens are never 0).
    pub floor: u64,
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.floor == other.floor && self.leases() == other.leases()
    }
}

impl Eq for State {}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.floor.hash(h);
        self.leases().hash(h);
    }
}

impl State {
    pub(crate) fn initial() -> Self {
        State {
            n: 0,
            slots: [Lease::default(); MAX_LEASES],
            floor: 1,
        }
    }

    /// A state holding these leases (tests).
    #[cfg(test)]
    pub(crate) fn with(leases: &[Lease], floor: u64) -> Self {
        let mut s = State {
            floor,
            ..State::initial()
        };
        for lease in leases {
            assert!(s.insert(*lease), "too many leases");
        }
        s
    }

    pub(crate) fn leases(&self) -> &[Lease] {
        &self.slots[..self.n as usize]
    }

    pub(crate) fn leases_mut(&mut self) -> &mut [Lease] {
        &mut self.slots[..self.n as usize]
    }

    pub(crate) fn is_free(&self) -> bool {
        self.n == 0
    }

    /// Index of `holder`'s lease.
    pub(crate) fn find(&self, holder: HolderId) -> Option<usize> {
        self.leases().iter().position(|l| l.holder == holder)
    }

    pub(crate) fn lease_of(&self, holder: HolderId) -> Option<&Lease> {
        self.find(holder).map(|i| &self.slots[i])
    }

    /// Adds a lease of a holder that has none, keeping the order; false when full.
    pub(crate) fn insert(&mut self, lease: Lease) -> bool {
        let n = self.n as usize;
        if n == MAX_LEASES {
            return false;
        }
        let at = self.leases().partition_point(|l| l.holder < lease.holder);
        self.slots.copy_within(at..n, at + 1);
        self.slots[at] = lease;
        self.n += 1;
        true
    }

    pub(crate) fn remove(&mut self, index: usize) -> Lease {
        let n = self.n as usize;
        let lease = self.slots[index];
        self.slots.copy_within(index + 1..n, index);
        self.slots[n - 1] = Lease::default();
        self.n -= 1;
        lease
    }

    pub(crate) fn units_used(&self) -> u64 {
        self.leases().iter().map(|l| l.units as u64).sum()
    }

    pub(crate) fn has_exclusive(&self) -> bool {
        self.leases().iter().any(|l| l.mode == Mode::Exclusive)
    }

    /// May some lease have been reclaimed by `deadline`?
    pub(crate) fn may_expire_by(&self, deadline: Nanos) -> bool {
        self.leases().iter().any(|l| l.bound <= deadline)
    }

    /// The lease at `index` passes its expiry and enters the renewal grace.
    pub(crate) fn enter_grace(&self, index: usize) -> State {
        let mut next = *self;
        next.slots[index].grace = true;
        next
    }

    /// The lease at `index` is reclaimed.
    pub(crate) fn reclaim(&self, index: usize) -> State {
        let mut next = *self;
        next.remove(index);
        next
    }

    /// Every state one expiry move away, for a search whose next op must take effect by
    /// `deadline`: a lease whose expiry has passed may enter the grace (if the policy has one),
    /// a lease whose reclaim bound has passed may be reclaimed. `(index, reclaimed, state)`.
    pub(crate) fn expiries(&self, rules: &Rules, deadline: Nanos) -> Vec<(usize, bool, State)> {
        let mut out = Vec::new();
        for (i, l) in self.leases().iter().enumerate() {
            if rules.grace && !l.grace && l.expiry <= deadline {
                out.push((i, false, self.enter_grace(i)));
            }
            if l.bound <= deadline {
                out.push((i, true, self.reclaim(i)));
            }
        }
        out
    }

    /// Does the live lease set respect the policy: one lease per holder, an exclusive lease
    /// alone, shared leases in allowed modes within the pool?
    pub(crate) fn within(&self, rules: &Rules) -> bool {
        let leases = self.leases();
        let sorted = leases.windows(2).all(|w| w[0].holder < w[1].holder);
        let exclusive_alone = !self.has_exclusive() || leases.len() == 1;
        let modes = leases.iter().all(|l| rules.allows(l.mode));
        let pool = rules.pool == 0 || self.units_used() <= rules.pool;
        sorted && exclusive_alone && modes && pool
    }

    /// Binds the token of the lease at `index` to `t` if it may be `t`.
    pub(crate) fn bind(&mut self, index: usize, t: u64) -> bool {
        let lease = &mut self.slots[index];
        if !lease.token.may_be(t) {
            return false;
        }
        if lease.token.value().is_none() {
            lease.token = Token::known(t);
            self.floor = self.floor.max(t.saturating_add(1));
        }
        true
    }

    /// A grant with the known token `t` was made: every lease with an unseen token was granted
    /// before it, so below `t`.
    pub(crate) fn cap_unseen(&mut self, t: u64) -> bool {
        for lease in self.leases_mut() {
            if lease.token.value().is_none() {
                lease.token.hi = lease.token.hi.min(t.saturating_sub(1));
                if lease.token.hi < lease.token.lo {
                    return false;
                }
            }
        }
        true
    }
}
