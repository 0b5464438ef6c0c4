//! The model's ops and [`step`]: what each op needs of a state and what it makes of it.

use super::{HolderId, Lease, Rules, State, Token};
use crate::history::{Mode, Nanos};

/// Why an acquire was refused (the refusals that constrain the state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Refusal {
    /// `resource_unavailable`: incompatible by mode.
    Unavailable,
    /// `insufficient_units`: compatible by mode, but the pool is too small.
    Units,
}

/// A live lease as an answer showed it; `None` fields were not reported (old histories).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Seen {
    pub holder: HolderId,
    pub token: Option<u64>,
    pub mode: Option<Mode>,
    pub units: Option<u32>,
    pub grace: Option<bool>,
}

/// One op of the lease model, compiled from a history op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MOp {
    /// Acquire answered `Granted{token}`: a fresh grant, or the holder's live lease returned.
    AcquireGranted {
        holder: HolderId,
        mode: Mode,
        units: u32,
        token: u64,
        expiry: Nanos,
        bound: Nanos,
    },
    /// Acquire answered `Refused`: the holders are the live leases (all of them when `exact`,
    /// else at least these).
    AcquireRefused {
        holder: HolderId,
        mode: Mode,
        units: u32,
        why: Refusal,
        holders: Box<[Seen]>,
        exact: bool,
    },
    /// Acquire with an unknown outcome; the only effect that matters is a fresh grant.
    AcquireUnknown {
        holder: HolderId,
        mode: Mode,
        units: u32,
        expiry: Nanos,
        bound: Nanos,
    },
    /// Acquire failed `already_held`: the holder has a lease in another mode or other units.
    AlreadyHeld {
        holder: HolderId,
        mode: Mode,
        units: u32,
    },
    /// A successful renew, or (`required = false`) one with an unknown outcome.
    Renew {
        holder: HolderId,
        token: u64,
        expiry: Nanos,
        bound: Nanos,
    },
    /// A successful release, or one with an unknown outcome.
    Release {
        holder: HolderId,
        token: u64,
    },
    /// A successful transfer (`new_token` known), or one with an unknown outcome.
    Transfer {
        holder: HolderId,
        token: u64,
        to: HolderId,
        new_token: Option<u64>,
    },
    /// Transfer failed `already_held`: (holder, token) is live and `to` holds a lease.
    TransferToHolder {
        holder: HolderId,
        token: u64,
        to: HolderId,
    },
    /// Renew, release or transfer refused with `stale_fencing_token` / `lease_expired` /
    /// `lease_not_found`: (holder, token) is not live.
    NotLive {
        holder: HolderId,
        token: u64,
    },
    Validate {
        token: u64,
        valid: bool,
    },
    /// A linearizable read: exactly these leases are live.
    Read {
        leases: Box<[Seen]>,
    },
    /// `ListLeases(holder)` on this resource: the holder's lease, or none.
    Holding {
        holder: HolderId,
        lease: Option<Seen>,
    },
    /// The holder's session was renewed (or, not required, may have been): its lease here, if
    /// it has one, gets new bounds (SPEC §4.24; the harness gives each session its own holder).
    SessionRenewed {
        holder: HolderId,
        expiry: Nanos,
        bound: Nanos,
    },
    /// The holder's session was closed (or may have been): its lease here, if any, is gone.
    SessionClosed {
        holder: HolderId,
    },
}

fn mode_code(mode: Mode) -> u64 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Read => 1,
        Mode::Write => 2,
    }
}

impl MOp {
    /// Ops of one class differ at most in their expiry bounds: two pending unknown ops of one
    /// class are interchangeable once both bounds have passed (or if they carry none).
    pub(crate) fn class(&self) -> (u8, HolderId, u64, u64) {
        match *self {
            MOp::AcquireGranted {
                holder,
                token,
                mode,
                units,
                ..
            } => (0, holder, token, mode_code(mode) << 32 | units as u64),
            MOp::AcquireRefused { holder, .. } => (1, holder, 0, 0),
            MOp::AcquireUnknown {
                holder,
                mode,
                units,
                ..
            } => (2, holder, 0, mode_code(mode) << 32 | units as u64),
            MOp::AlreadyHeld { holder, .. } => (3, holder, 0, 0),
            MOp::Renew { holder, token, .. } => (4, holder, token, 0),
            MOp::Release { holder, token } => (5, holder, token, 0),
            MOp::Transfer {
                holder, token, to, ..
            } => (6, holder, token, to as u64),
            MOp::TransferToHolder { holder, token, to } => (7, holder, token, to as u64),
            MOp::NotLive { holder, token } => (8, holder, token, 0),
            MOp::Validate { token, valid } => (9, valid as HolderId, token, 0),
            MOp::Read { .. } => (10, 0, 0, 0),
            MOp::Holding { holder, .. } => (11, holder, 0, 0),
            MOp::SessionRenewed { holder, .. } => (12, holder, 0, 0),
            MOp::SessionClosed { holder } => (13, holder, 0, 0),
        }
    }

    /// The reclaim lower bound the op sets, if it sets one (its expiry bound is never later).
    pub(crate) fn bound(&self) -> Option<Nanos> {
        match *self {
            MOp::AcquireGranted { bound, .. }
            | MOp::AcquireUnknown { bound, .. }
            | MOp::Renew { bound, .. }
            | MOp::SessionRenewed { bound, .. } => Some(bound),
            _ => None,
        }
    }

    /// The holder whose lease the op creates, if it creates one.
    pub(crate) fn creates(&self) -> Option<HolderId> {
        match *self {
            MOp::AcquireGranted { holder, .. } | MOp::AcquireUnknown { holder, .. } => Some(holder),
            MOp::Transfer { to, .. } => Some(to),
            _ => None,
        }
    }
}

/// Can `op` (an unknown renew, release or transfer) never take effect again, from `state` or
/// any state that follows it? Its token is below every future grant's and is not live.
pub(crate) fn dead(op: &MOp, state: &State) -> bool {
    let (MOp::Renew { holder, token, .. }
    | MOp::Release { holder, token }
    | MOp::Transfer { holder, token, .. }) = *op
    else {
        return false;
    };
    if state.floor <= token {
        return false;
    }
    match state.lease_of(holder) {
        Some(lease) => !lease.token.may_be(token),
        None => true,
    }
}

/// May a request in `mode` for `units` be granted next to the live leases (the holder having
/// none)? `None`: yes; else why not.
fn refusal(rules: &Rules, state: &State, mode: Mode, units: u32) -> Option<Refusal> {
    if state.is_free() {
        None
    } else if mode == Mode::Exclusive || state.has_exclusive() {
        Some(Refusal::Unavailable)
    } else if rules.pool > 0 && state.units_used() + units as u64 > rules.pool {
        Some(Refusal::Units)
    } else {
        None
    }
}

/// Does the lease at `index` look like `seen`? Binds its token.
fn matches(state: &mut State, index: usize, seen: &Seen) -> bool {
    let lease = state.leases()[index];
    if seen.mode.is_some_and(|m| m != lease.mode)
        || seen.units.is_some_and(|u| u != lease.units)
        || seen.grace.is_some_and(|g| g != lease.grace)
    {
        return false;
    }
    match seen.token {
        Some(t) => state.bind(index, t),
        None => true,
    }
}

/// Are the live leases exactly (`exact`) or at least the `seen` ones?
fn shows(state: &mut State, seen: &[Seen], exact: bool) -> bool {
    if exact && seen.len() != state.leases().len() {
        return false;
    }
    seen.iter().all(|s| match state.find(s.holder) {
        Some(i) => matches(state, i, s),
        None => false,
    })
}

/// A new lease for a holder that has none; the token is `Some` when known.
fn grant(state: &mut State, lease: Lease, token: Option<u64>) -> bool {
    let mut lease = lease;
    match token {
        Some(t) => {
            if t < state.floor || !state.cap_unseen(t) {
                return false;
            }
            lease.token = Token::known(t);
            state.floor = t.saturating_add(1);
        }
        None => {
            lease.token = Token::at_least(state.floor);
            state.floor = state.floor.saturating_add(1);
        }
    }
    state.insert(lease)
}

/// The holder's lease, if its token may be `token` (bound to it).
fn own(state: &mut State, holder: HolderId, token: u64) -> Option<usize> {
    let i = state.find(holder)?;
    state.bind(i, token).then_some(i)
}

/// Apply `op` to `state` under `rules`; `None` when the op cannot take effect there.
pub(crate) fn step(rules: &Rules, state: &State, op: &MOp) -> Option<State> {
    let mut next = *state;
    match *op {
        MOp::AcquireGranted {
            holder,
            mode,
            units,
            token,
            expiry,
            bound,
        } => {
            if !rules.allows(mode) {
                return None;
            }
            if let Some(i) = next.find(holder) {
                let lease = next.leases()[i];
                // Idempotent: the same lease, unchanged; other mode or units is already_held.
                let same = lease.mode == mode && lease.units == units;
                return (same && next.bind(i, token)).then_some(next);
            }
            if refusal(rules, &next, mode, units).is_some() {
                return None;
            }
            let lease = Lease::granted(holder, mode, units, expiry, bound);
            grant(&mut next, lease, Some(token)).then_some(next)
        }
        MOp::AcquireRefused {
            holder,
            mode,
            units,
            why,
            ref holders,
            exact,
        } => {
            if next.find(holder).is_some() || refusal(rules, &next, mode, units) != Some(why) {
                return None;
            }
            shows(&mut next, holders, exact).then_some(next)
        }
        MOp::AcquireUnknown {
            holder,
            mode,
            units,
            expiry,
            bound,
        } => {
            // An idempotent or refused acquire changes nothing: the same as leaving it out.
            if !rules.allows(mode)
                || next.find(holder).is_some()
                || refusal(rules, &next, mode, units).is_some()
            {
                return None;
            }
            let lease = Lease::granted(holder, mode, units, expiry, bound);
            grant(&mut next, lease, None).then_some(next)
        }
        MOp::AlreadyHeld {
            holder,
            mode,
            units,
        } => {
            let lease = next.lease_of(holder)?;
            (lease.mode != mode || lease.units != units).then_some(next)
        }
        MOp::Renew {
            holder,
            token,
            expiry,
            bound,
        } => {
            let i = own(&mut next, holder, token)?;
            let lease = &mut next.leases_mut()[i];
            lease.expiry = expiry;
            lease.bound = bound;
            lease.grace = false;
            Some(next)
        }
        MOp::Release { holder, token } => {
            let i = own(&mut next, holder, token)?;
            next.remove(i);
            Some(next)
        }
        MOp::SessionRenewed {
            holder,
            expiry,
            bound,
        } => {
            if let Some(i) = next.find(holder) {
                let lease = &mut next.leases_mut()[i];
                lease.expiry = expiry;
                lease.bound = bound;
                lease.grace = false;
            }
            Some(next)
        }
        MOp::SessionClosed { holder } => {
            if let Some(i) = next.find(holder) {
                next.remove(i);
            }
            Some(next)
        }
        MOp::Transfer {
            holder,
            token,
            to,
            new_token,
        } => {
            if !rules.transferable || to == holder || next.find(to).is_some() {
                return None;
            }
            let i = own(&mut next, holder, token)?;
            let old = next.remove(i);
            let lease = Lease { holder: to, ..old };
            grant(&mut next, lease, new_token).then_some(next)
        }
        MOp::TransferToHolder { holder, token, to } => {
            if !rules.transferable || to == holder || next.find(to).is_none() {
                return None;
            }
            own(&mut next, holder, token).map(|_| next)
        }
        MOp::NotLive { holder, token } => match next.lease_of(holder) {
            // An unseen token is given the benefit of the doubt (it may differ from `token`)
            // without being constrained further.
            Some(lease) => (lease.token.value() != Some(token)).then_some(next),
            None => Some(next),
        },
        MOp::Validate { token, valid: true } => {
            let known = next
                .leases()
                .iter()
                .position(|l| l.token.value() == Some(token));
            if let Some(i) = known {
                return (!next.leases()[i].grace).then_some(next);
            }
            let candidates: Vec<usize> = (0..next.leases().len())
                .filter(|&i| next.leases()[i].token.may_be(token))
                .collect();
            match candidates.as_slice() {
                [] => None,
                [i] => (!next.leases()[*i].grace && next.bind(*i, token)).then_some(next),
                // Several leases with unseen tokens could carry it: accept without choosing.
                many => many
                    .iter()
                    .any(|&i| !next.leases()[i].grace)
                    .then_some(next),
            }
        }
        MOp::Validate {
            token,
            valid: false,
        } => {
            let live = next
                .leases()
                .iter()
                .any(|l| l.token.value() == Some(token) && !l.grace);
            (!live).then_some(next)
        }
        MOp::Read { ref leases } => shows(&mut next, leases, true).then_some(next),
        MOp::Holding { holder, lease } => match (next.find(holder), lease) {
            (None, None) => Some(next),
            (Some(i), Some(seen)) => matches(&mut next, i, &seen).then_some(next),
            _ => None,
        },
    }
}
