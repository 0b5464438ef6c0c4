//! What the leader proposes on its own, and when (docs/design.md §4): a `Tick` right after
//! taking office and whenever the committed clock is older than `tick_interval` while anything
//! is live (a lease or a waiter); a `Reclaim` as soon as a lease is due, and a `Tick` as soon
//! as a wait times out or a lock delay with waiters behind it ends. Pure: the caller supplies
//! the clock reading and runs the timer.

use super::command::{Op, Stamp};
use super::lease_clock::LeaderKey;
use super::machine::State;

/// How many leases one `Reclaim` entry names. Applying an entry reclaims what is due (up to
/// `machine::RECLAIMS_PER_ENTRY`), so the list only records intent; the cap keeps a mass
/// expiry from making one huge log value.
pub const MAX_RECLAIM_LIST: usize = 256;

/// The leader's next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Propose this now.
    Propose(Op),
    /// Nothing to do for this many milliseconds (or until the state changes).
    Wait(u64),
}

/// How far leader `me`, whose clock reads `now`, is ahead of the log's clock: the time since
/// the newest stamp the log holds; None when the log's clock is not anchored on this leader
/// (its next entry re-anchors it, advancing nothing).
pub fn since_stamp_ms(state: &State, me: LeaderKey, now: &Stamp) -> Option<u64> {
    match state.clock().anchor() {
        Some((leader, epoch, last_mono_ms)) if leader == me && epoch == now.clock_epoch => {
            Some(now.mono_ms.saturating_sub(last_mono_ms))
        }
        _ => None,
    }
}

/// Decides the leader's next proposal from the committed state and its clock reading `now`.
pub fn plan(state: &State, me: LeaderKey, now: Stamp, tick_interval_ms: u64) -> Plan {
    let clock = state.clock();
    // The log's clock is not anchored on this leader yet: anchor it at once.
    let Some(since_stamp_ms) = since_stamp_ms(state, me, &now) else {
        return Plan::Propose(Op::Tick);
    };
    let estimate_ms = clock.now_ms().saturating_add(since_stamp_ms);
    let due = state.due_by(estimate_ms, MAX_RECLAIM_LIST);
    if !due.is_empty() {
        return Plan::Propose(Op::Reclaim { leases: due });
    }
    if state
        .next_due_ms()
        .is_some_and(|due_ms| due_ms <= estimate_ms)
    {
        // A wait timed out or a lock delay that waiters wait behind ended: any entry settles it.
        return Plan::Propose(Op::Tick);
    }
    if state.live_leases() == 0 && state.waiters() == 0 && state.session_count() == 0 {
        return Plan::Wait(tick_interval_ms);
    }
    if since_stamp_ms >= tick_interval_ms {
        return Plan::Propose(Op::Tick);
    }
    let until_tick_ms = tick_interval_ms - since_stamp_ms;
    let until_due_ms = state
        .next_due_ms()
        .map_or(u64::MAX, |due_ms| due_ms.saturating_sub(estimate_ms));
    Plan::Wait(until_tick_ms.min(until_due_ms).max(1))
}
