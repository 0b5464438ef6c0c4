//! The dispatch: an entry's proposals, each settling what time has decided, then the
//! exactly-once check, then the rule its operation names.

use super::super::command::{BookOp, Command, CreateOp, Op, Proposal, Reply};
use super::super::dedup::Seen;
use super::super::many::MAX_CLAIMS;
use super::super::quota::Quota;
use super::super::types::{LeaseView, Rejection};
use super::{Ctx, Effects, EntryMeta, State};

/// Applies one command entry. Never panics on any input: bad input is a `Rejected` reply.
pub fn apply(state: &mut State, meta: EntryMeta, command: &Command) -> Reply {
    // Effects belong to the entry: lease ids `lse_<index>_<k>` number on across a batch.
    state.effects = Effects::default();
    let reply = match command {
        Command::V1(proposal) => apply_proposal(state, meta, proposal),
        Command::Batch(proposals) => Reply::Batch(
            proposals
                .iter()
                .map(|proposal| apply_proposal(state, meta, proposal))
                .collect(),
        ),
    };
    // The entry's events in delivery order; what it left idle leaves the heap (`cold`).
    state.log.settle();
    state.cool_idle();
    reply
}

fn apply_proposal(state: &mut State, meta: EntryMeta, proposal: &Proposal) -> Reply {
    state.clock.observe(meta.leader, &proposal.stamp);
    let now_ms = state.clock.now_ms();
    let quotas = &mut state.quotas;
    state
        .dedup
        .prune(now_ms, |(p, n)| quotas.add(p, Quota::ExactlyOnceBytes, n));
    // Time first: reclaims, wait timeouts, lock delays and bookings that ended by now, and
    // the waiters that lets in, all before the command sees the resource.
    let reclaimed = state.settle_due(meta.index);
    state.settle_waits(meta.index);
    state.settle_bookings();
    match &proposal.op {
        // Every resource an AcquireMany names (as many as it may name: more is refused).
        Op::AcquireMany(op) => {
            for claim in op.claims.iter().take(MAX_CLAIMS) {
                state.settle_resource(meta.index, &claim.resource);
            }
        }
        op => {
            if let Some(name) = op.resource_key() {
                state.settle_resource(meta.index, name);
            }
        }
    }
    state.admit_touched(meta.index);
    let ctx = Ctx {
        index: meta.index,
        principal: &proposal.principal,
        admin: proposal.admin,
        require_registration: proposal.require_registration,
        request_id: proposal.request_id.as_deref(),
    };

    // The leader proposes nothing the cluster's rules do not have yet; this is apply's own
    // check, before the exactly-once table (a refusal is not remembered: the same request
    // may be taken once the rules rise). The raise is what brings a version in. The refusal
    // is a reason every release decodes (it may be remembered in a snapshot 0.1.0 reads).
    let needs = proposal.op.rules_needed();
    if needs > state.rules && !matches!(proposal.op, Op::RaiseRules { .. }) {
        state.admit_touched(meta.index);
        return Reply::Rejected(Rejection::invalid(
            "op",
            crate::rules::not_reached("this command", needs, state.rules),
        ));
    }
    let reply = match ctx.request_id.filter(|_| proposal.op.exactly_once()) {
        None => state.execute(&ctx, proposal, reclaimed),
        Some(request_id) => match state
            .dedup
            .check(&proposal.principal, request_id, &proposal.op)
        {
            Seen::Retry(kept) => state.rebuild(kept, &proposal.op),
            Seen::Conflict => Reply::Rejected(Rejection::request_id_reused()),
            Seen::New(ticket) => {
                // Past its budget (or the table's), a principal's new request ids are refused:
                // nothing is done, nothing is remembered.
                match state.exactly_once_room(&ctx) {
                    Err(refused) => Reply::Rejected(refused),
                    Ok(()) => {
                        let reply = state.execute(&ctx, proposal, reclaimed);
                        let cost = state.dedup.remember(ctx.principal, ticket, &reply, now_ms);
                        state
                            .quotas
                            .add(ctx.principal, Quota::ExactlyOnceBytes, cost);
                        reply
                    }
                }
            }
        },
    };
    // Capacity the command freed goes to the waiting room in this same entry (SPEC §4.5, §4.7).
    state.admit_touched(meta.index);
    reply
}

impl State {
    fn execute(&mut self, ctx: &Ctx<'_>, proposal: &Proposal, reclaimed: Vec<LeaseView>) -> Reply {
        let result = match &proposal.op {
            Op::CreateResource(op) => self.create_resource(ctx, op),
            Op::CreateResourceV1(op) => self.create_resource(
                ctx,
                &CreateOp {
                    name: op.name.clone(),
                    policy: op.policy.clone().into(),
                },
            ),
            Op::Acquire(op) => self.acquire(ctx, op, None),
            Op::AcquireOnSession(op) => self.acquire_on_session(ctx, op),
            Op::AcquireMany(op) => self.acquire_many(ctx, op),
            Op::CreateSession(op) => self.create_session(ctx, op),
            Op::RenewSession(op) => self.renew_session(ctx, op),
            Op::CloseSession(op) => self.close_session(ctx, op),
            Op::Renew(op) => self.renew(ctx, op, None),
            Op::RenewWithMetadata(op) => self.renew(ctx, &op.renew, Some(&op.metadata)),
            Op::Release(op) => self.release(ctx, op),
            Op::Transfer(op) => self.transfer(ctx, op),
            Op::CancelWait(op) => self.cancel_wait(ctx, op),
            Op::Book(op) => self.book(ctx, op, false),
            Op::BookV1(op) => self.book(
                ctx,
                &BookOp {
                    resource: op.resource.clone(),
                    holder: op.holder.clone(),
                    start_wall_ms: op.start_wall_ms,
                    duration_ms: op.duration_ms,
                    ad_hoc_bookable: true,
                },
                true,
            ),
            Op::CancelBooking(op) => self.cancel_booking(ctx, op),
            Op::SetQuota(op) => self.set_quota(ctx, op),
            Op::Reclaim { .. } | Op::Tick => Ok(Reply::Reclaimed(reclaimed)),
            // Only the leader's own entry raises the rules (never one handed over).
            Op::RaiseRules { .. } if !ctx.admin || ctx.principal != crate::command::SYSTEM => Err(
                Rejection::InsufficientPermissions("only the leader raises the rules".into()),
            ),
            Op::RaiseRules { to } => {
                // Never down: a raise that arrives after a higher one changes nothing.
                self.rules = self.rules.max(*to);
                Ok(Reply::Reclaimed(reclaimed))
            }
        };
        result.unwrap_or_else(Reply::Rejected)
    }
}
