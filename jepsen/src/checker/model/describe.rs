//! Ops and model states in words, for anomaly messages.

use super::{Holders, Lease, State};
use crate::history::{Mode, Nanos, Op, Outcome};

/// Seconds since `t0`, for messages.
pub(crate) fn at(t: Nanos, t0: Nanos) -> String {
    if t == Nanos::MAX {
        return "∞".to_owned();
    }
    let d = t as i128 - t0 as i128;
    format!("{:.3}s", d as f64 / 1e9)
}

/// `#12 acquire(a, ttl 1000ms) → granted token 7 [0.100s, 0.110s]`
pub(crate) fn describe_op(op: &Op, t0: Nanos) -> String {
    let outcome = match &op.outcome {
        Outcome::Ok { value } => value.describe(),
        Outcome::Fail { reason } => format!("failed {reason}"),
        Outcome::QuotaExceeded { quota, limit } => {
            format!("refused: quota {quota} ({limit}) exceeded")
        }
        Outcome::Unknown { error } => format!("unknown ({error})"),
    };
    let end = match op.outcome {
        Outcome::Unknown { .. } => "…".to_owned(),
        _ => at(op.complete_ns, t0),
    };
    format!(
        "#{} {} → {} [{}, {}]",
        op.id,
        op.call.describe(),
        outcome,
        at(op.invoke_ns, t0),
        end
    )
}

fn describe_lease(lease: &Lease, holders: &Holders, t0: Nanos) -> String {
    let token = match lease.token.value() {
        Some(t) => format!("token {t}"),
        None if lease.token.hi == u64::MAX => format!("unseen token ≥ {}", lease.token.lo),
        None => format!("unseen token in {}..={}", lease.token.lo, lease.token.hi),
    };
    let mode = match lease.mode {
        Mode::Exclusive => String::new(),
        m if lease.units > 0 => format!(" in {} mode with {} units", m.name(), lease.units),
        m => format!(" in {} mode", m.name()),
    };
    // The search sets a bound that has already passed to 0.
    let expiry = if lease.grace {
        "past its expiry, in its renewal grace".to_owned()
    } else if lease.expiry == 0 {
        "its ttl has run out: it may expire at any moment".to_owned()
    } else {
        format!("cannot expire before {}", at(lease.expiry, t0))
    };
    let reclaim = if lease.bound == lease.expiry || lease.bound == 0 {
        String::new()
    } else {
        format!(", cannot be reclaimed before {}", at(lease.bound, t0))
    };
    format!(
        "{}{} with {} ({}{})",
        holders.name(lease.holder),
        mode,
        token,
        expiry,
        reclaim
    )
}

pub(crate) fn describe_state(state: &State, holders: &Holders, t0: Nanos) -> String {
    if state.is_free() {
        return format!("free (next token ≥ {})", state.floor);
    }
    let leases: Vec<String> = state
        .leases()
        .iter()
        .map(|l| describe_lease(l, holders, t0))
        .collect();
    format!(
        "held by {} (next token ≥ {})",
        leases.join("; "),
        state.floor
    )
}
