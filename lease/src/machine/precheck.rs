//! What the leader refuses without proposing it (SPEC §4.21): a write that would certainly be
//! refused for its principal's quotas, or its request id, and an acquire of a resource held for
//! a while yet, gets that refusal from the leader's applied state, and never reaches the log,
//! every node's disk and every snapshot. Apply's checks stay the authority: this only answers
//! as apply would, with the same rules ([`State::acquire_plan`], [`State::session_room_for`],
//! [`State::exactly_once_room`]).

use super::super::command::{Op, Proposal, Reply, Stamp};
use super::super::expiry::since_stamp_ms;
use super::super::grant::AcquirePlan;
use super::super::lease_clock::LeaderKey;
use super::super::quota::{metadata_cost, Quota};
use super::super::types::Rejection;
use super::{timed, Ctx, State};

/// How recent the newest entry the state applied must be, on the leader's clock, for a
/// refusal to be given unproposed. Apply first settles what time decided by its entry's stamp
/// (reclaims, timed-out waits, request ids forgotten), which may free the very quota that
/// refuses: a state this fresh holds all of that but what fell due in the last moments (as if
/// the write had come that much sooner; a lease can only last longer for it), and one older (a
/// cluster idle for a while) is brought up to date by an entry first.
pub const FRESH_MS: u64 = 250;

/// How long past the state's time every lease on a resource must last for an acquire of it to
/// be refused unproposed: the state may be [`FRESH_MS`] behind the leader's clock, and the
/// refusal stands for that long again.
pub const HELD_MARGIN_MS: u64 = 2 * FRESH_MS;

impl State {
    /// Whether this state is fresh for leader `me`, whose clock reads `now`: its newest entry
    /// stamped by `me`, at most [`FRESH_MS`] before `now`.
    pub fn is_fresh(&self, me: LeaderKey, now: &Stamp) -> bool {
        since_stamp_ms(self, me, now).is_some_and(|since| since <= FRESH_MS)
    }

    /// The refusal `proposal` would get if it were applied right after the entries this
    /// state has applied (at their time: see [`State::is_fresh`]); None when it would not be
    /// refused, or when finding out would cost what applying does. A look at the principal's
    /// quotas decides first whether the rest is worth asking: a write within its quotas is
    /// never looked at further.
    pub fn certainly_refused(
        &self,
        proposal: &Proposal,
        leader: LeaderKey,
        now: &Stamp,
    ) -> Option<Reply> {
        let ctx = Ctx {
            index: 0,
            principal: &proposal.principal,
            admin: proposal.admin,
            require_registration: proposal.require_registration,
            request_id: proposal.request_id.as_deref(),
        };
        if let Some(request_id) = ctx.request_id.filter(|_| proposal.op.exactly_once()) {
            match self
                .dedup
                .remembers(ctx.principal, request_id, &proposal.op)
            {
                // A retry gets its remembered answer from apply.
                Some(true) => return None,
                Some(false) => return Some(Reply::Rejected(Rejection::request_id_reused())),
                None => {
                    if let Err(refused) = self.exactly_once_room(&ctx) {
                        return Some(Reply::Rejected(refused));
                    }
                }
            }
        }
        if let Op::Acquire(op) = &proposal.op {
            if op.wait_ms.is_none() && self.held_for_a_while(&op.resource) {
                // Its resource refuses it, for as long as the leader's state may be behind.
                if let Ok(AcquirePlan::Answer(Reply::Acquire(mut outcome))) =
                    self.acquire_plan(&ctx, op, None)
                {
                    if !outcome.granted {
                        // The holders as apply shows them: at the time of the entry that would
                        // have carried it.
                        let mut clock = self.clock.clone();
                        clock.observe(leader, now);
                        for view in &mut outcome.holders {
                            *view = timed(view.lease.clone(), &clock);
                        }
                        return Some(Reply::Acquire(outcome));
                    }
                }
            }
        }
        if ctx.quota_exempt() {
            return None;
        }
        match &proposal.op {
            Op::Acquire(op) => {
                // A grant charges `leases`, a wait `waiters` (a WAIT acquire of a free
                // resource is a grant), both with the metadata and an ad-hoc resource.
                let quotas = match op.wait_ms {
                    Some(_) => &[Quota::Leases, Quota::Waiters][..],
                    None => &[Quota::Leases][..],
                };
                let tight = quotas.iter().any(|quota| {
                    let charges = [
                        (*quota, 1),
                        (Quota::MetadataBytes, metadata_cost(&op.metadata)),
                        (
                            Quota::AdHocResources,
                            u64::from(self.is_ad_hoc(&op.resource)),
                        ),
                    ];
                    self.quotas.admit_all(ctx.principal, &charges).is_err()
                });
                if !tight {
                    return None;
                }
                self.acquire_plan(&ctx, op, None).err().map(Reply::Rejected)
            }
            Op::CreateSession(op) => self.session_room_for(&ctx, op).err().map(Reply::Rejected),
            _ => None,
        }
    }

    /// Whether `resource` is held, and will be for longer than the leader's state may be
    /// behind its clock and then as long again: every lease on it lasts (by itself or by its
    /// session) past [`HELD_MARGIN_MS`] from the state's time, and nothing else decides
    /// whether a new claim fits (no waiter, who may time out; no booking; no lock delay).
    /// An acquire of it without waiting is then refused for it as apply would refuse it, had
    /// it come that much later or sooner (SPEC §4.21).
    fn held_for_a_while(&self, resource: &str) -> bool {
        let Some(rs) = self.resources.get(resource) else {
            return false;
        };
        let until_ms = self.clock.now_ms().saturating_add(HELD_MARGIN_MS);
        let rare = rs.rare();
        !rs.leases.is_empty()
            && rare.waiters.is_empty()
            && rare.bookings.is_empty()
            && rare.closed_until_ms <= self.clock.now_ms()
            && rs.leases.iter().all(|lease| {
                let expires_at_ms = match lease.session {
                    Some(id) => self.session(id.get()).map_or(0, |s| s.expires_at_ms),
                    None => lease.expires_at_ms,
                };
                expires_at_ms > until_ms
            })
    }

    /// Whether a new remembered request of the caller's fits: the table's bound, then the
    /// principal's `exactly_once_bytes` (an admin is held to the table's bound only).
    pub(crate) fn exactly_once_room(&self, ctx: &Ctx<'_>) -> Result<(), Rejection> {
        self.dedup.room()?;
        match ctx.quota_exempt() {
            true => Ok(()),
            false => self.quotas.admit(ctx.principal, Quota::ExactlyOnceBytes, 1),
        }
    }
}
