//! The rules that begin things: registering a resource (SPEC §2 `CreateResource`) and
//! acquiring a lease (SPEC §4.1, §4.2, §4.4's lock delay, §4.13's limits).

use std::num::NonZeroU64;

use super::command::{AcquireOp, CreateOp, Reply, SessionAcquireOp};
use super::history::{Event, EventKind};
use super::machine::{check_name, check_names, check_ttl, Ctx, PushLean, ResourceState, State};
use super::policy;
use super::quota::Quota;
use super::types::{AcquireOutcome, Lease, LeaseStatus, Mode, Name, Refusal, Rejection};
use super::waiting::Waiter;

/// What an acquire comes to ([`State::acquire_plan`]).
#[allow(clippy::large_enum_variant)] // short-lived: decided, then carried out at once
pub(super) enum AcquirePlan {
    /// An answer that changes nothing: the same lease back, a rejoined wait, a refusal.
    Answer(Reply),
    /// Into the waiting room, for `refusal`.
    Queue {
        units: u64,
        ttl_ms: u64,
        wait_ms: u64,
        refusal: Refusal,
    },
    /// A new lease.
    Grant { units: u64, ttl_ms: u64 },
}

impl State {
    /// Registers a resource: argument checks → existence (`already_exists`) → admin role.
    pub(super) fn create_resource(
        &mut self,
        ctx: &Ctx<'_>,
        op: &CreateOp,
    ) -> Result<Reply, Rejection> {
        op.policy.check()?;
        let name = match &op.name {
            Some(name) => {
                check_name("name", name)?;
                name.clone()
            }
            None => self.generated_name(ctx.index),
        };
        if let Some(rs) = self.resources.get(name.as_str()) {
            if rs.rare().registration.is_some() || !rs.leases.is_empty() {
                return Err(Rejection::AlreadyExists(name));
            }
        }
        if !ctx.admin {
            return Err(Rejection::InsufficientPermissions(
                "only an admin may register resources".into(),
            ));
        }
        self.no_longer_ad_hoc(&name);
        let rs = self.resource_entry(&name);
        rs.rare_mut().registration = Some(Box::new(op.policy.clone()));
        rs.revision = ctx.index;
        self.record(
            ctx.index,
            ctx.principal,
            &name,
            Event::of_resource(EventKind::Registered),
        );
        Ok(Reply::Resource(Box::new(self.resource_view(&name))))
    }

    /// `res_<index>`, or with a suffix if someone registered that name by hand.
    fn generated_name(&self, index: u64) -> String {
        let base = format!("res_{index}");
        (0u32..)
            .map(|k| {
                if k == 0 {
                    base.clone()
                } else {
                    format!("{base}_{k}")
                }
            })
            .find(|n| !self.knows(n))
            .unwrap_or(base)
    }

    /// SPEC §3 order: names → existence → the policy's argument rules (mode, ttl, metadata,
    /// units) → the holder's own lease (idempotent / `already_held`) or wait (re-attached) →
    /// compatibility, with nobody waiting ahead (no barging) → with `WAIT`, the waiting room.
    /// An acquire on a session (SPEC §4.24): names → the session (id, existence, its principal
    /// or an admin) → its holder, no ttl of the lease's own, a policy without `max_lifetime` →
    /// then as any acquire, with the session's ttl.
    pub(super) fn acquire_on_session(
        &mut self,
        ctx: &Ctx<'_>,
        op: &SessionAcquireOp,
    ) -> Result<Reply, Rejection> {
        let acquire = &op.acquire;
        check_names(&acquire.resource, &acquire.holder)?;
        let (id, ttl_ms) =
            self.session_terms(ctx, &op.session_id, &acquire.holder, acquire.ttl_ms)?;
        self.session_lease_allowed(&acquire.resource)?;
        let acquire = AcquireOp {
            ttl_ms: Some(ttl_ms),
            ..acquire.clone()
        };
        self.acquire(ctx, &acquire, Some(id))
    }

    /// The session a lease is asked on (its id, its principal or an admin), its holder the
    /// lease's, no ttl of the lease's own: the session's id and ttl.
    pub(super) fn session_terms(
        &mut self,
        ctx: &Ctx<'_>,
        session_id: &str,
        holder: &str,
        ttl_ms: Option<u64>,
    ) -> Result<(NonZeroU64, u64), Rejection> {
        let (id, session) = self.session_for(ctx, session_id)?;
        if session.holder != holder {
            return Err(Rejection::invalid(
                "holder",
                format!(
                    "is not the holder of session {session_id} ({})",
                    session.holder
                ),
            ));
        }
        if ttl_ms.is_some() {
            return Err(Rejection::invalid(
                "ttl",
                "a lease on a session lives while its session lives: leave ttl unset",
            ));
        }
        let id =
            NonZeroU64::new(id).ok_or_else(|| Rejection::SessionNotFound(session_id.into()))?;
        Ok((id, session.ttl_ms))
    }

    /// A lease on a session has no end of its own: a policy with a `max_lifetime` refuses it.
    pub(super) fn session_lease_allowed(&self, resource: &str) -> Result<(), Rejection> {
        if self.policy_of(resource).max_lifetime_ms > 0 {
            return Err(Rejection::invalid(
                "session_id",
                format!(
                    "resource {resource}'s policy has a max_lifetime, and a lease on a session has no end of its own"
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn acquire(
        &mut self,
        ctx: &Ctx<'_>,
        op: &AcquireOp,
        session: Option<NonZeroU64>,
    ) -> Result<Reply, Rejection> {
        let (units, ttl_ms) = match self.acquire_plan(ctx, op, session)? {
            AcquirePlan::Answer(reply) => return Ok(reply),
            AcquirePlan::Queue {
                units,
                ttl_ms,
                wait_ms,
                refusal,
            } => return self.queue(ctx, op, (units, ttl_ms, wait_ms), refusal, session),
            AcquirePlan::Grant { units, ttl_ms } => (units, ttl_ms),
        };
        let claim = Waiter::claim(ctx, op, (units, ttl_ms), session);
        let lease = self.lease_from(ctx.index, &op.resource, claim);
        Ok(granted(self.grant(
            ctx.index,
            ctx.principal,
            lease,
            EventKind::Acquired,
        )))
    }

    /// What an acquire comes to, decided without changing anything, every check of SPEC
    /// §3.5 made, quotas included: apply carries it out ([`State::acquire`]), and the leader
    /// asks it of a request it may refuse before proposing it
    /// ([`State::certainly_refused`]).
    pub(super) fn acquire_plan(
        &self,
        ctx: &Ctx<'_>,
        op: &AcquireOp,
        session: Option<NonZeroU64>,
    ) -> Result<AcquirePlan, Rejection> {
        check_names(&op.resource, &op.holder)?;
        let (ttl_ms, units) = self.claim_terms(
            ctx,
            &op.resource,
            (op.mode, op.units, op.ttl_ms),
            &op.metadata,
        )?;
        let empty = ResourceState::default();
        let rs = self
            .resources
            .get(op.resource.as_str())
            .map_or(&empty, |rs| &**rs);
        if let Some(own) = rs.leases.iter().find(|l| l.holder == op.holder) {
            if !ctx.admin && own.principal != ctx.principal {
                // Handing the lease (and its token) to another principal would let it fence
                // downstream writes as the holder it is not.
                return Err(Rejection::InsufficientPermissions(format!(
                    "holder {} holds this resource for another principal",
                    op.holder
                )));
            }
            if own.mode == op.mode && own.units == units && own.session == session {
                // Idempotent: the same lease, unchanged, ttl not extended (SPEC §4.2).
                return Ok(AcquirePlan::Answer(granted(
                    self.live_view(&op.resource, own),
                )));
            }
            // Another mode, other units, or on another session (or none).
            return Err(Rejection::AlreadyHeld {
                mode: own.mode,
                units: own.units,
            });
        }
        if let Some((position, waiter)) = self.waiting(&op.resource, &op.holder) {
            if !ctx.admin && waiter.principal != ctx.principal {
                return Err(Rejection::InsufficientPermissions(format!(
                    "holder {} waits for another principal",
                    op.holder
                )));
            }
            if let Some(id) = self.group_of(waiter) {
                return Err(Rejection::invalid(
                    "resource",
                    format!(
                        "holder {} waits for this resource in an AcquireMany (wait {id}): cancel that wait first",
                        op.holder
                    ),
                ));
            }
            if waiter.session != session {
                return Err(Rejection::invalid(
                    "session_id",
                    format!(
                        "holder {} already waits for this resource on another session (or none)",
                        op.holder
                    ),
                ));
            }
            // A retried or re-sent call joins the wait it already has.
            if op.wait_ms.is_some() {
                return Ok(AcquirePlan::Answer(self.queued_reply(
                    &op.resource,
                    position,
                    waiter.wait_id,
                    Refusal::ResourceUnavailable,
                )));
            }
            return Ok(AcquirePlan::Answer(Reply::Acquire(AcquireOutcome {
                queue_position: position,
                ..self.refused(&op.resource, Refusal::ResourceUnavailable)
            })));
        }
        if op.idempotency_key.is_some()
            && rs.leases.iter().any(|l| {
                l.idempotency_key.as_deref().map(Name::as_str) == op.idempotency_key.as_deref()
            })
        {
            return Err(Rejection::invalid(
                "idempotency_key",
                "already used by another holder on this resource",
            ));
        }
        // A lease on a session has no end of its own: every booking ahead is in its way.
        let reach_ms = if session.is_some() { u64::MAX } else { ttl_ms };
        let refusal = self.refusal_for(&op.resource, &op.holder, (op.mode, units, reach_ms));
        if let Some(refusal) = refusal {
            if let Some(wait_ms) = op.wait_ms {
                if let Some(id) = session {
                    self.session_room(id.get(), 1)?;
                }
                self.queue_room(ctx, op)?;
                return Ok(AcquirePlan::Queue {
                    units,
                    ttl_ms,
                    wait_ms,
                    refusal,
                });
            }
            return Ok(AcquirePlan::Answer(Reply::Acquire(
                self.refused(&op.resource, refusal),
            )));
        }
        let ad_hoc = rs.rare().registration.is_none();
        self.admit_holding(ctx, ctx.principal, ad_hoc, &op.metadata, Quota::Leases)?;
        if let Some(id) = session {
            self.session_room(id.get(), 1)?;
        }
        Ok(AcquirePlan::Grant { units, ttl_ms })
    }

    /// Why a new claim on `resource` by `holder` of (mode, units, reach) cannot be granted
    /// now: anyone waiting ahead, then [`State::blocked`].
    pub(super) fn refusal_for(
        &self,
        resource: &str,
        holder: &str,
        (mode, units, reach_ms): (Mode, u64, u64),
    ) -> Option<Refusal> {
        let rs = self.resources.get(resource)?;
        let now_wall_ms = self.clock.wall_ms();
        let in_own_window = rs
            .rare()
            .bookings
            .iter()
            .any(|b| b.holder == holder && b.covers(now_wall_ms));
        if rs.rare().waiters.is_empty() || in_own_window {
            self.blocked(resource, mode, units, reach_ms, holder)
        } else {
            // Nobody barges past a waiter, even into room the head cannot use (SPEC §4.1) —
            // except a booking's holder during its window, which the booking reserved for it
            // (SPEC §4.8), ahead of waiters whose leases would reach into it.
            Some(Refusal::ResourceUnavailable)
        }
    }

    /// The resource's argument rules for a claim of (mode, units, ttl): existence when
    /// registration is required, mode, ttl, metadata, units. Returns the ttl (the policy's
    /// default if none) and the units the grant draws (only shared leases of a resource with a
    /// pool draw any).
    pub(super) fn claim_terms(
        &self,
        ctx: &Ctx<'_>,
        resource: &str,
        (mode, units, ttl_ms): (Mode, u64, Option<u64>),
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<(u64, u64), Rejection> {
        let rs = self.resources.get(resource);
        if ctx.require_registration && rs.and_then(|rs| rs.rare().registration.as_ref()).is_none() {
            return Err(Rejection::ResourceNotFound(resource.to_string()));
        }
        let policy = self.policy_of(resource);
        if !policy.allows(mode) {
            return Err(Rejection::InvalidMode { mode });
        }
        let ttl_ms = ttl_ms.unwrap_or(policy.default_ttl_ms);
        check_ttl(policy, ttl_ms)?;
        policy::check_metadata(metadata, policy.max_metadata_bytes as usize)?;
        let units = if mode == Mode::Exclusive || policy.total_units == 0 {
            0
        } else {
            units.max(1)
        };
        if units > policy.total_units {
            return Err(Rejection::invalid(
                "units",
                format!(
                    "more than the resource's total_units ({})",
                    policy.total_units
                ),
            ));
        }
        Ok((ttl_ms, units))
    }

    /// Why a claim on `resource` (mode, units, ttl) by `holder` cannot be granted now, if it
    /// cannot: lock delay → incompatible holders → units → a booking of another holder it
    /// would extend into. The waiting room is the caller's to judge.
    pub(super) fn blocked(
        &self,
        resource: &str,
        mode: Mode,
        units: u64,
        ttl_ms: u64,
        holder: &str,
    ) -> Option<Refusal> {
        let rs = self.resources.get(resource)?;
        let policy = self.policy_of(resource);
        let now_ms = self.clock.now_ms();
        if now_ms < rs.rare().closed_until_ms {
            return Some(Refusal::LockDelay);
        }
        if !rs.leases.is_empty() {
            if mode == Mode::Exclusive || rs.leases.iter().any(|l| l.mode == Mode::Exclusive) {
                return Some(Refusal::ResourceUnavailable);
            }
            let total = policy.total_units;
            if total > 0 && units > total.saturating_sub(units_in_use(rs)) {
                return Some(Refusal::InsufficientUnits);
            }
            // Shared holders without a unit pool: at most max_holders at once.
            let cap = policy.max_holders as usize;
            if cap > 0 && rs.leases.len() >= cap {
                return Some(Refusal::ResourceUnavailable);
            }
        }
        self.booking_in_the_way(resource, holder, now_ms.saturating_add(ttl_ms), None)
            .map(|b| Refusal::ResourceBooked {
                start_wall_ms: b.start_wall_ms,
            })
    }

    /// A not-granted answer with the current holders.
    pub(super) fn refused(&self, resource: &str, refusal: Refusal) -> AcquireOutcome {
        AcquireOutcome {
            granted: false,
            lease: None,
            refusal: Some(refusal),
            holders: self.holders_of(resource),
            queue_position: 0,
            wait_id: None,
            closed_until_wall_ms: self.closed_until_for(resource, Some(refusal)),
        }
    }

    /// Installs a new live lease: tracked for expiry, recorded in history.
    pub(super) fn grant(
        &mut self,
        index: u64,
        actor: &str,
        lease: Lease,
        kind: EventKind,
    ) -> super::types::LeaseView {
        let (policy, ad_hoc) = self.policy_and_ad_hoc(&lease.resource);
        // A lease on a session is due with its session, not by itself.
        if lease.session.is_none() {
            (self.indexes).track_lease(&lease.resource, &lease, policy.renewal_grace_ms);
        }
        self.count_lease(&lease.resource, &lease, ad_hoc, 1);
        let view = self.live_view(&lease.resource, &lease);
        let event = Event::about(kind, &lease, None, Some(LeaseStatus::Active));
        let Lease {
            resource: name,
            held,
        } = lease;
        let rs = self.resource_entry(&name);
        rs.leases.push_lean(held);
        rs.revision = index;
        self.record(index, actor, &name, event);
        view
    }
}

/// Units the live leases draw from the pool. Saturates: a pool near `u64::MAX` must refuse, not
/// overflow (a panic in apply would stop every node on the same entry).
fn units_in_use(rs: &ResourceState) -> u64 {
    rs.leases
        .iter()
        .fold(0u64, |sum, l| sum.saturating_add(l.units))
}

fn granted(view: super::types::LeaseView) -> Reply {
    Reply::Acquire(AcquireOutcome::granted(view))
}
