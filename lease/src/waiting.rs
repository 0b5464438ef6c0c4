//! The waiting room (SPEC §4.7): a FIFO queue per resource for acquires made with `WAIT`.
//!
//! Admission happens inside the entry that frees capacity, whose index becomes the admitted
//! lease's token. Shared-mode waiters at the head are admitted together while they fit; nobody
//! barges past the head. A wait ends only by an entry: admission, its `wait_timeout` (the
//! leader proposes a `Tick` when one is due), or a removal (`CancelWait`, or the node holding
//! the blocked call proposing it when the call goes away). Each end is an [`WaitOutcome`] the
//! node holding the call picks up after applying the entry.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::command::{AcquireOp, CancelWaitOp, Reply};
use super::history::{Event, EventKind};
use super::machine::{check_names, Ctx, State};
use super::many::ManyOutcome;
use super::query::HOLDERS_SHOWN;
use super::quota::Quota;
use super::types::{AcquireOutcome, LeaseId, Metadata, Mode, Name, Refusal, Rejection};

/// One queued acquire: everything needed to grant it later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub holder: Name,
    pub principal: Name,
    pub mode: Mode,
    /// Units as the grant would draw them (0 for exclusive or without a pool).
    pub units: u64,
    pub ttl_ms: u64,
    pub metadata: Metadata,
    pub idempotency_key: Option<Name>,
    /// The index of the entry that queued it: names the wait.
    pub wait_id: u64,
    /// Lease-clock instant at which the wait times out.
    pub deadline_ms: u64,
    /// The queuing call's `request_id`: its remembered reply becomes the wait's outcome, so a
    /// retry of the call learns how the wait ended.
    pub request_id: Option<String>,
    /// The session it waits on (SPEC §4.24). Not encoded: the session keeps its waits, and a
    /// loaded snapshot names the session here again.
    #[serde(skip)]
    pub session: Option<std::num::NonZeroU64>,
}

impl Waiter {
    /// The claim of `op` by the caller of `ctx`, of (units, ttl): a grant's, or (with its
    /// deadline and request id) a wait's.
    pub(super) fn claim(
        ctx: &Ctx<'_>,
        op: &AcquireOp,
        (units, ttl_ms): (u64, u64),
        session: Option<std::num::NonZeroU64>,
    ) -> Waiter {
        Waiter {
            holder: op.holder.as_str().into(),
            principal: Name::from(ctx.principal),
            mode: op.mode,
            units,
            ttl_ms,
            metadata: op.metadata.clone().into(),
            idempotency_key: op.idempotency_key.as_deref().map(Name::from),
            wait_id: ctx.index,
            deadline_ms: 0,
            request_id: None,
            session,
        }
    }
}

/// How a wait ended, for the node holding the blocked call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitOutcome {
    pub resource: String,
    pub holder: String,
    pub wait_id: u64,
    /// What the blocked acquire answers: granted, or `wait_timeout` / `wait_cancelled`. For a
    /// multi-wait, its summary ([`ManyOutcome::summary`]).
    pub outcome: AcquireOutcome,
    /// A multi-wait's outcome (SPEC §4.25), told on its first resource.
    pub many: Option<Box<ManyOutcome>>,
}

impl Event {
    pub(super) fn about_waiter(kind: EventKind, waiter: &Waiter) -> Self {
        Event {
            holder: waiter.holder.clone(),
            metadata: if kind == EventKind::Queued {
                waiter.metadata.clone()
            } else {
                Metadata::default()
            },
            mode: waiter.mode,
            units: waiter.units,
            session: waiter.session,
            ..Event::of_resource(kind)
        }
    }
}

impl State {
    /// Queues an acquire that could not be granted (SPEC §4.7), or re-attaches a holder that
    /// already waits (a retried or re-sent call). `refusal` is why it was not granted.
    pub(super) fn queue(
        &mut self,
        ctx: &Ctx<'_>,
        op: &AcquireOp,
        (units, ttl_ms, wait_ms): (u64, u64, u64),
        why: Refusal,
        session: Option<std::num::NonZeroU64>,
    ) -> Result<Reply, Rejection> {
        self.queue_room(ctx, op)?;
        let now_ms = self.clock.now_ms();
        let waiter = Waiter {
            deadline_ms: now_ms.saturating_add(wait_ms),
            request_id: ctx.request_id.map(str::to_string),
            ..Waiter::claim(ctx, op, (units, ttl_ms), session)
        };
        let event = Event::about_waiter(EventKind::Queued, &waiter);
        self.indexes.track_wait(&op.resource, &waiter);
        self.count_waiter(&op.resource, &waiter, 1);
        let rs = self.resource_entry(&op.resource);
        rs.rare_mut().waiters.push_back(waiter);
        rs.revision = ctx.index;
        let position = rs.rare().waiters.len() as u32;
        self.record(ctx.index, ctx.principal, &op.resource, event);
        Ok(self.queued_reply(&op.resource, position, ctx.index, why))
    }

    /// Whether `op` may join its resource's waiting room: `waiting_room_full`, then the
    /// `waiters` quota (with its metadata).
    pub(super) fn queue_room(&self, ctx: &Ctx<'_>, op: &AcquireOp) -> Result<(), Rejection> {
        let max_waiters = self.policy_of(&op.resource).max_waiters;
        let waiting = self
            .resources
            .get(op.resource.as_str())
            .map_or(0, |rs| rs.rare().waiters.len());
        if waiting >= max_waiters as usize {
            return Err(Rejection::WaitingRoomFull { max_waiters });
        }
        let ad_hoc = self.is_ad_hoc(&op.resource);
        self.admit_holding(ctx, ctx.principal, ad_hoc, &op.metadata, Quota::Waiters)
    }

    /// The reply of a call that now waits at `position`, because of `why`.
    pub(super) fn queued_reply(
        &self,
        resource: &str,
        position: u32,
        wait_id: u64,
        why: Refusal,
    ) -> Reply {
        Reply::Acquire(AcquireOutcome {
            queue_position: position,
            wait_id: Some(wait_id),
            ..self.refused(resource, why)
        })
    }

    pub(super) fn holders_of(&self, resource: &str) -> Vec<super::types::LeaseView> {
        self.resources
            .get(resource)
            .map(|rs| self.leases_shown(resource, &rs.leases, HOLDERS_SHOWN))
            .unwrap_or_default()
    }

    /// Removes a holder's wait (SPEC §2 `CancelWait`): only its principal or an admin may.
    /// `wait_id` set = only that wait (a node cancelling a call it held must not remove a
    /// newer wait of the same holder).
    pub(super) fn cancel_wait(
        &mut self,
        ctx: &Ctx<'_>,
        op: &CancelWaitOp,
    ) -> Result<Reply, Rejection> {
        check_names(&op.resource, &op.holder)?;
        let Some(rs) = self.resources.get(op.resource.as_str()) else {
            return Ok(Reply::Cancelled {
                cancelled: false,
                revision: ctx.index,
            });
        };
        let Some(at) = rs
            .rare()
            .waiters
            .iter()
            .position(|w| w.holder == op.holder && op.wait_id.is_none_or(|id| id == w.wait_id))
        else {
            return Ok(Reply::Cancelled {
                cancelled: false,
                revision: ctx.index,
            });
        };
        if !ctx.admin && rs.rare().waiters[at].principal != ctx.principal {
            return Err(Rejection::InsufficientPermissions(format!(
                "holder {} waits for another principal",
                op.holder
            )));
        }
        self.end_wait(
            ctx.index,
            ctx.principal,
            &op.resource,
            at,
            Refusal::WaitCancelled,
        );
        Ok(Reply::Cancelled {
            cancelled: true,
            revision: ctx.index,
        })
    }

    /// Cancels the wait `wait_id` of `resource` (its session ended).
    pub(crate) fn cancel_session_wait(
        &mut self,
        index: u64,
        actor: &str,
        resource: &str,
        wait_id: u64,
    ) {
        let at = self
            .resources
            .get(resource)
            .and_then(|rs| rs.rare().waiters.iter().position(|w| w.wait_id == wait_id));
        if let Some(at) = at {
            self.end_wait(index, actor, resource, at, Refusal::WaitCancelled);
        }
    }

    /// Ends the wait at `at` without a grant, and admits whoever that lets through. A wait of
    /// a multi-wait ends it in every room.
    pub(super) fn end_wait(
        &mut self,
        index: u64,
        actor: &str,
        resource: &str,
        at: usize,
        why: Refusal,
    ) {
        let Some(waiter) = self.remove_waiter((index, actor), resource, at, why) else {
            return;
        };
        if let Some(id) = self.group_of(&waiter) {
            self.end_group((index, actor), id, (resource, at as u32 + 1), why);
            return;
        }
        let outcome = AcquireOutcome {
            queue_position: at as u32 + 1,
            ..self.refused(resource, why)
        };
        self.wait_ended(resource, waiter, outcome);
    }

    /// Takes the wait at `at` out of `resource`'s room, ended without a grant (`why`): its
    /// timeout, counts and session forget it, history records it, and the room is touched.
    pub(super) fn remove_waiter(
        &mut self,
        (index, actor): (u64, &str),
        resource: &str,
        at: usize,
        why: Refusal,
    ) -> Option<Waiter> {
        let rs = self.resources.get_mut(resource).map(Arc::make_mut)?;
        let waiter = rs.rare_mut().waiters.remove(at)?;
        rs.revision = index;
        self.indexes.untrack_wait(resource, &waiter);
        self.count_waiter(resource, &waiter, -1);
        let kind = match why {
            Refusal::WaitTimeout => EventKind::WaitTimedOut,
            _ => EventKind::WaitCancelled,
        };
        self.record(index, actor, resource, Event::about_waiter(kind, &waiter));
        self.effects.touched.insert(Name::from(resource));
        Some(waiter)
    }

    /// Hands a wait's outcome to the blocked call and to the queuing request's dedup entry.
    pub(super) fn wait_ended(&mut self, resource: &str, waiter: Waiter, outcome: AcquireOutcome) {
        if let Some(request_id) = &waiter.request_id {
            let reply = Reply::Acquire(outcome.clone());
            let (whose, change) = self.dedup.resolve(&waiter.principal, request_id, &reply);
            // Charged to whom the record is (nobody's, for one converted from format 4).
            if !whose.is_empty() {
                self.quotas.add(&whose, Quota::ExactlyOnceBytes, change);
            }
        }
        self.effects.waits.push(WaitOutcome {
            resource: resource.to_string(),
            holder: waiter.holder.to_string(),
            wait_id: waiter.wait_id,
            outcome,
            many: None,
        });
    }

    /// The place of `holder` in the waiting room of `resource` (1 = the head) and its wait.
    pub(super) fn waiting(&self, resource: &str, holder: &str) -> Option<(u32, &Waiter)> {
        let rs = self.resources.get(resource)?;
        let at = rs.rare().waiters.iter().position(|w| w.holder == holder)?;
        Some((at as u32 + 1, &rs.rare().waiters[at]))
    }

    /// How the wait queued by entry `wait_id` ended, as its blocked call answers, read from the
    /// resource's history; None if history holds no end of it (it still waits, or retention
    /// dropped the event).
    pub fn wait_outcome(
        &self,
        resource: &str,
        holder: &str,
        wait_id: u64,
    ) -> Option<AcquireOutcome> {
        let rs = self.resource_ref(resource)?;
        let from = rs.history.partition_point(|k| k.revision <= wait_id);
        let reader = self.log.reader();
        let end = reader
            .events(resource, rs.history.range_from(from))
            .find(|e| {
                e.holder == holder
                    && matches!(
                        e.kind,
                        EventKind::Admitted | EventKind::WaitTimedOut | EventKind::WaitCancelled
                    )
            })?;
        let refused = |why| Some(self.refused(resource, why));
        match end.kind {
            EventKind::WaitTimedOut => refused(Refusal::WaitTimeout),
            EventKind::WaitCancelled => refused(Refusal::WaitCancelled),
            _ => {
                let lease_id = LeaseId::parse(&end.lease_id)?;
                let view = match rs.lease(lease_id) {
                    Some(live) => self.live_view(resource, live),
                    None => {
                        self.ended_view(rs.ended.iter().find(|e| e.lease.lease_id() == lease_id)?)
                    }
                };
                Some(AcquireOutcome::granted(view))
            }
        }
    }

    /// Whether the wait queued by entry `wait_id` still waits.
    pub fn is_waiting(&self, resource: &str, holder: &str, wait_id: u64) -> bool {
        self.waiting(resource, holder)
            .is_some_and(|(_, w)| w.wait_id == wait_id)
    }

    /// Lease-clock instant of the next wait timeout or lock-delay end that admits waiters.
    pub(super) fn next_wait_due_ms(&self) -> Option<u64> {
        let timeout = self.indexes.next_wait_timeout_ms();
        let reopen = self
            .indexes
            .closed()
            .find(|(_, name)| {
                self.resources
                    .get(name)
                    .is_some_and(|rs| !rs.rare().waiters.is_empty())
            })
            .map(|(ms, _)| *ms);
        timeout.into_iter().chain(reopen).min()
    }
}
