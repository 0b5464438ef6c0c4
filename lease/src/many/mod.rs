//! Several resources at once (SPEC §4.25): `AcquireMany` grants every claim in one entry, or
//! none, and with `WAIT` holds one place in the waiting room of every resource it names.
//!
//! A multi-wait is one [`Waiter`] per room, all named by the queuing entry's index, and a
//! [`Group`] that ties them together. It is admitted in one entry, when it heads every room
//! and every claim fits; it ends (timeout, cancel, its session's end) in every room at once.
//! Every room orders its waits by the entry that queued them, so the oldest wait heads every
//! room it names and waits for holders only: no cycle of waits can form (no deadlock), and a
//! wait behind a multi-wait waits at most until that one is admitted or its timeout ends it.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::command::{AcquireManyOp, Reply};
use super::history::{Event, EventKind};
use super::machine::{check_name, Ctx, State};
use super::quota::Quota;
use super::types::{AcquireOutcome, LeaseView, Name, Refusal, Rejection};
use super::waiting::{WaitOutcome, Waiter};

mod group;

/// The most resources one `AcquireMany` may name.
pub const MAX_CLAIMS: usize = 64;
/// At most this many holders of each resource in a refused or waiting answer, and about
/// [`HOLDER_BYTES`] of them: the answer of 64 claims stays well under a message's 4 MiB.
pub const CLAIM_HOLDERS_SHOWN: usize = 10;
const HOLDER_BYTES: usize = 16 * 1024;

/// A multi-wait: whose, on which rooms (in the request's order), and the queuing request's
/// `request_id`, whose remembered reply becomes the wait's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub holder: Name,
    pub principal: Name,
    pub resources: Vec<Name>,
    pub request_id: Option<String>,
}

/// What an `AcquireMany` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManyOutcome {
    pub granted: bool,
    /// Granted: one lease per claim, in the request's order, all with the same token.
    pub leases: Vec<LeaseView>,
    /// Not granted: each claim, in the request's order, with what stands in its way.
    pub claims: Vec<ClaimOutcome>,
    /// A wait that ended without a grant: `wait_timeout` or `wait_cancelled`.
    pub refusal: Option<Refusal>,
    /// Set while the caller waits: the index of the queuing entry, which names the wait.
    pub wait_id: Option<u64>,
}

/// One claim of a refused or waiting `AcquireMany`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimOutcome {
    pub resource: String,
    /// Why this resource could not be granted now; None = it would have fit.
    pub refusal: Option<Refusal>,
    /// Its current holders.
    pub holders: Vec<LeaseView>,
    /// With WAIT: the caller's place in this room (1 = the head), or the place it had when
    /// its wait ended.
    pub queue_position: u32,
    /// A `lock_delay` refusal: when the resource opens again (wall-clock estimate), as the
    /// refusing entry saw it. Not encoded (`lease::unencoded`): a retry reads it again.
    #[serde(skip)]
    pub closed_until_wall_ms: Option<u64>,
}

impl ManyOutcome {
    pub(super) fn granted(leases: Vec<LeaseView>) -> Self {
        ManyOutcome {
            granted: true,
            leases,
            claims: Vec::new(),
            refusal: None,
            wait_id: None,
        }
    }

    /// A single acquire's answer that sums this one up: its first lease, or its refusal.
    pub fn summary(&self) -> AcquireOutcome {
        match self.leases.first() {
            Some(view) if self.granted => AcquireOutcome::granted(view.clone()),
            _ => {
                let first = self.claims.iter().find(|c| c.refusal.is_some());
                AcquireOutcome {
                    granted: false,
                    lease: None,
                    refusal: self.refusal.or_else(|| first.and_then(|c| c.refusal)),
                    holders: Vec::new(),
                    queue_position: self.claims.first().map_or(0, |c| c.queue_position),
                    wait_id: self.wait_id,
                    closed_until_wall_ms: match self.refusal {
                        Some(_) => None,
                        None => first.and_then(|c| c.closed_until_wall_ms),
                    },
                }
            }
        }
    }
}

impl State {
    /// SPEC §4.25's order: names, count, distinct → the session, if any (as an acquire on a
    /// session checks it) → each claim's argument rules → the holder's own leases (all held
    /// as asked: the same answer again; some: `already_held`) and waits (this same
    /// multi-wait: joined again; another: `invalid_argument`) → all fit, with nobody waiting
    /// ahead in any room: granted, one entry, one token → with `WAIT`, a place in every room.
    pub(super) fn acquire_many(
        &mut self,
        ctx: &Ctx<'_>,
        op: &AcquireManyOp,
    ) -> Result<Reply, Rejection> {
        check_name("holder", &op.holder)?;
        if op.claims.is_empty() {
            return Err(Rejection::invalid("claims", "name at least one resource"));
        }
        if op.claims.len() > MAX_CLAIMS {
            return Err(Rejection::invalid(
                "claims",
                format!("at most {MAX_CLAIMS} resources in one AcquireMany"),
            ));
        }
        let mut seen = BTreeSet::new();
        for claim in &op.claims {
            check_name("resource", &claim.resource)?;
            if !seen.insert(claim.resource.as_str()) {
                return Err(Rejection::invalid(
                    "claims",
                    format!("names resource {} twice", claim.resource),
                ));
            }
        }
        // Its waits are named by its entry's index: one multi-wait per entry.
        if op.wait_ms.is_some() && self.groups.contains_key(&ctx.index) {
            return Err(Rejection::invalid(
                "claims",
                "an AcquireMany that may wait commits in an entry of its own",
            ));
        }
        let (session, ttl_ms) = match &op.session_id {
            Some(id) => {
                let (id, ttl_ms) = self.session_terms(ctx, id, &op.holder, op.ttl_ms)?;
                (Some(id), Some(ttl_ms))
            }
            None => (None, op.ttl_ms),
        };
        let mut waiters = Vec::with_capacity(op.claims.len());
        for claim in &op.claims {
            if session.is_some() {
                self.session_lease_allowed(&claim.resource)?;
            }
            let (ttl_ms, units) = self.claim_terms(
                ctx,
                &claim.resource,
                (claim.mode, claim.units, ttl_ms),
                &op.metadata,
            )?;
            waiters.push(Waiter {
                holder: Name::from(op.holder.as_str()),
                principal: Name::from(ctx.principal),
                mode: claim.mode,
                units,
                ttl_ms,
                metadata: op.metadata.clone().into(),
                idempotency_key: None,
                wait_id: ctx.index,
                deadline_ms: self.clock.now_ms().saturating_add(op.wait_ms.unwrap_or(0)),
                request_id: None,
                session,
            });
        }
        if let Some(reply) = self.already_many(ctx, op, &waiters)? {
            return Ok(reply);
        }
        let refusals: Vec<Option<Refusal>> = op
            .claims
            .iter()
            .zip(&waiters)
            .map(|(claim, w)| self.claim_refusal(&claim.resource, w))
            .collect();
        let names: Vec<Name> = op
            .claims
            .iter()
            .map(|c| Name::from(c.resource.as_str()))
            .collect();
        let ad_hoc: Vec<bool> = names.iter().map(|r| self.is_ad_hoc(r)).collect();
        if refusals.iter().all(Option::is_none) {
            self.admit_holdings(ctx, ctx.principal, &ad_hoc, &op.metadata, Quota::Leases)?;
            if let Some(id) = session {
                self.session_room(id.get(), names.len())?;
            }
            let leases = names
                .iter()
                .zip(waiters)
                .map(|(name, waiter)| {
                    let lease = self.lease_from(ctx.index, name, waiter);
                    self.grant(ctx.index, ctx.principal, lease, EventKind::Acquired)
                })
                .collect();
            return Ok(Reply::Many(Box::new(ManyOutcome::granted(leases))));
        }
        if op.wait_ms.is_none() {
            let claims = self.claims_of(&names, &refusals, |_| 0);
            return Ok(Reply::Many(Box::new(ManyOutcome {
                granted: false,
                leases: Vec::new(),
                claims,
                refusal: None,
                wait_id: None,
            })));
        }
        if let Some(id) = session {
            self.session_room(id.get(), names.len())?;
        }
        for name in &names {
            let max_waiters = self.policy_of(name).max_waiters;
            let full = self
                .resources
                .get(name)
                .is_some_and(|rs| rs.rare().waiters.len() >= max_waiters as usize);
            if full {
                return Err(Rejection::WaitingRoomFull { max_waiters });
            }
        }
        self.admit_holdings(ctx, ctx.principal, &ad_hoc, &op.metadata, Quota::Waiters)?;
        for (name, waiter) in names.iter().zip(waiters) {
            let event = Event::about_waiter(EventKind::Queued, &waiter);
            self.indexes.track_wait(name, &waiter);
            self.count_waiter(name, &waiter, 1);
            let rs = self.resource_entry(name);
            rs.rare_mut().waiters.push_back(waiter);
            rs.revision = ctx.index;
            self.record(ctx.index, ctx.principal, name, event);
        }
        self.groups.insert(
            ctx.index,
            Arc::new(Group {
                holder: Name::from(op.holder.as_str()),
                principal: Name::from(ctx.principal),
                resources: names,
                request_id: ctx.request_id.map(str::to_string),
            }),
        );
        Ok(Reply::Many(Box::new(
            self.many_waiting(ctx.index, refusals),
        )))
    }

    /// What the holder already has among the claims: every one held as asked, by one grant
    /// (rules 3), answers those leases again; this same multi-wait answers its places again
    /// (a retried or re-sent call).
    fn already_many(
        &self,
        ctx: &Ctx<'_>,
        op: &AcquireManyOp,
        claims: &[Waiter],
    ) -> Result<Option<Reply>, Rejection> {
        // Whose the holdings are first (for every claim), then whether they are as asked.
        let owned: Vec<_> = op
            .claims
            .iter()
            .zip(claims)
            .filter_map(|(claim, asked)| {
                let rs = self.resources.get(claim.resource.as_str())?;
                Some((
                    claim,
                    asked,
                    rs.leases.iter().find(|l| l.holder == op.holder)?,
                ))
            })
            .collect();
        if let Some((claim, _, _)) = owned
            .iter()
            .find(|(_, _, own)| !ctx.admin && own.principal != ctx.principal)
        {
            return Err(Rejection::InsufficientPermissions(format!(
                "holder {} holds {} for another principal",
                op.holder, claim.resource
            )));
        }
        let mut held = Vec::new();
        for (claim, asked, own) in owned {
            if own.mode != asked.mode || own.units != asked.units || own.session != asked.session {
                return Err(Rejection::AlreadyHeld {
                    mode: own.mode,
                    units: own.units,
                });
            }
            held.push(self.live_view(&claim.resource, own));
        }
        if !held.is_empty() {
            // From rules 3 only leases one grant gave (one token) are this call's answer again:
            // leases granted apart never make one `AcquireMany`'s answer.
            let one_grant = self.rules < crate::rules::MANY_ONE_GRANT
                || held
                    .iter()
                    .all(|v| v.lease.fencing_token == held[0].lease.fencing_token);
            if held.len() == op.claims.len() && one_grant {
                return Ok(Some(Reply::Many(Box::new(ManyOutcome::granted(held)))));
            }
            let view = &held[0].lease;
            return Err(Rejection::AlreadyHeld {
                mode: view.mode,
                units: view.units,
            });
        }
        for claim in &op.claims {
            let Some((_, waiter)) = self.waiting(&claim.resource, &op.holder) else {
                continue;
            };
            if !ctx.admin && waiter.principal != ctx.principal {
                return Err(Rejection::InsufficientPermissions(format!(
                    "holder {} waits for {} for another principal",
                    op.holder, claim.resource
                )));
            }
            let same = self.groups.get(&waiter.wait_id).is_some_and(|g| {
                g.holder == op.holder
                    && g.resources.len() == op.claims.len()
                    && g.resources
                        .iter()
                        .zip(&op.claims)
                        .all(|(r, c)| *r == c.resource)
            }) && waiter.session == claims[0].session;
            if !same {
                return Err(Rejection::invalid(
                    "claims",
                    format!(
                        "holder {} already waits for resource {}",
                        op.holder, claim.resource
                    ),
                ));
            }
            let refusals = op
                .claims
                .iter()
                .zip(claims)
                .map(|(c, w)| self.claim_refusal(&c.resource, w))
                .collect();
            let mut outcome = self.many_waiting(waiter.wait_id, refusals);
            if op.wait_ms.is_none() {
                outcome.wait_id = None;
            }
            return Ok(Some(Reply::Many(Box::new(outcome))));
        }
        Ok(None)
    }

    /// Why `claim` on `resource` cannot be granted now, if it cannot.
    fn claim_refusal(&self, resource: &str, claim: &Waiter) -> Option<Refusal> {
        let reach_ms = match claim.session {
            Some(_) => u64::MAX,
            None => claim.ttl_ms,
        };
        self.refusal_for(resource, &claim.holder, (claim.mode, claim.units, reach_ms))
    }

    /// The answer of a multi-wait `wait_id` that waits: its place in every room.
    fn many_waiting(&self, wait_id: u64, refusals: Vec<Option<Refusal>>) -> ManyOutcome {
        let names = self
            .groups
            .get(&wait_id)
            .map(|g| g.resources.clone())
            .unwrap_or_default();
        let claims = self.claims_of(&names, &refusals, |name| {
            self.resources.get(name).map_or(0, |rs| {
                rs.rare()
                    .waiters
                    .iter()
                    .position(|w| w.wait_id == wait_id)
                    .map_or(0, |at| at as u32 + 1)
            })
        });
        ManyOutcome {
            granted: false,
            leases: Vec::new(),
            claims,
            refusal: None,
            wait_id: Some(wait_id),
        }
    }

    fn claims_of(
        &self,
        names: &[Name],
        refusals: &[Option<Refusal>],
        position: impl Fn(&str) -> u32,
    ) -> Vec<ClaimOutcome> {
        names
            .iter()
            .zip(refusals)
            .map(|(name, refusal)| ClaimOutcome {
                resource: name.to_string(),
                refusal: *refusal,
                holders: self.claim_holders(name),
                queue_position: position(name),
                closed_until_wall_ms: self.closed_until_for(name, *refusal),
            })
            .collect()
    }

    /// The holders a claim's answer shows.
    pub(super) fn claim_holders(&self, resource: &str) -> Vec<LeaseView> {
        self.holders_within(resource, CLAIM_HOLDERS_SHOWN, HOLDER_BYTES)
    }
}
