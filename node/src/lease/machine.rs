//! The replicated state and the one function that changes it.
//!
//! [`apply`] is the only entry that modifies [`State`]. It is pure: the same state and entry
//! give the same reply and the same next state on every node. The entry's log index is the
//! fencing token of whatever it grants, and the lease clock advances only by the leader's stamp.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::clock::{LeaderKey, LeaseClock};
use super::command::{AcquireOp, Command, Op, Proposal, ReleaseOp, RenewOp, Reply};
use super::dedup::{Dedup, Seen};
use super::policy::{self, Policy, DEDUP_WINDOW_MS, MIN_TTL_MS};
use super::types::{AcquireOutcome, Lease, LeaseStatus, LeaseView, Mode, Refusal, Rejection};

/// The lease a renew or release names, and the token it claims.
#[derive(Clone, Copy)]
struct Target<'a> {
    resource: &'a str,
    lease_id: &'a str,
    holder: &'a str,
    fencing_token: u64,
}

impl<'a> From<&'a RenewOp> for Target<'a> {
    fn from(op: &'a RenewOp) -> Self {
        Target {
            resource: &op.resource,
            lease_id: &op.lease_id,
            holder: &op.holder,
            fencing_token: op.fencing_token,
        }
    }
}

impl<'a> From<&'a ReleaseOp> for Target<'a> {
    fn from(op: &'a ReleaseOp) -> Self {
        Target {
            resource: &op.resource,
            lease_id: &op.lease_id,
            holder: &op.holder,
            fencing_token: op.fencing_token,
        }
    }
}

/// Where an entry sits in the log: its index (the fencing token of its grants) and its writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryMeta {
    pub index: u64,
    pub leader: LeaderKey,
}

/// The last tenure of a resource that ended, so its holder learns how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub lease: Lease,
    pub status: LeaseStatus,
    pub at_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceState {
    pub lease: Option<Lease>,
    pub ended: Option<Ended>,
    /// The index of the newest entry that changed this resource.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub(super) clock: LeaseClock,
    pub(super) default_policy: Policy,
    pub(super) resources: BTreeMap<String, ResourceState>,
    pub(super) dedup: Dedup,
    /// Ended ad-hoc tenures, oldest first, forgotten once older than the retention window.
    pub(super) forget: VecDeque<(u64, String, u64)>,
    /// (expires_at + grace, resource) of every live lease: the next reclaim is the first.
    #[serde(skip)]
    pub(super) due: BTreeSet<(u64, String)>,
}

impl Default for State {
    fn default() -> Self {
        Self::with_default_policy(Policy::ad_hoc())
    }
}

/// Applies one command entry. Never panics on any input: bad input is a `Rejected` reply.
pub fn apply(state: &mut State, meta: EntryMeta, command: &Command) -> Reply {
    let Command::V1(proposal) = command;
    state.clock.observe(meta.leader, &proposal.stamp);
    let now_ms = state.clock.now_ms();
    state.dedup.prune(now_ms);
    let reclaimed = state.settle_due(meta.index);
    state.forget_old(now_ms);

    let Some(request_id) = proposal.request_id.as_deref() else {
        return state.execute(meta.index, proposal, reclaimed);
    };
    match state
        .dedup
        .check(&proposal.principal, request_id, &proposal.op)
    {
        Seen::Retry(reply) => reply,
        Seen::Conflict => Reply::Rejected(Rejection::invalid(
            "request_id",
            "already used with a different request",
        )),
        Seen::New => {
            let reply = state.execute(meta.index, proposal, reclaimed);
            state.dedup.remember(
                &proposal.principal,
                request_id,
                proposal.op.clone(),
                reply.clone(),
                now_ms,
            );
            reply
        }
    }
}

impl State {
    pub fn with_default_policy(default_policy: Policy) -> Self {
        State {
            clock: LeaseClock::default(),
            default_policy,
            resources: BTreeMap::new(),
            dedup: Dedup::default(),
            forget: VecDeque::new(),
            due: BTreeSet::new(),
        }
    }

    /// Rebuilds the derived indexes after deserializing a snapshot.
    pub fn restored(mut self) -> Self {
        let due = self
            .resources
            .iter()
            .filter_map(|(name, rs)| {
                let grace_ms = self.policy_of(name).renewal_grace_ms;
                rs.lease
                    .as_ref()
                    .map(|l| (l.expires_at_ms + grace_ms, name.clone()))
            })
            .collect();
        self.due = due;
        self
    }

    pub fn clock(&self) -> &LeaseClock {
        &self.clock
    }

    pub fn live_leases(&self) -> usize {
        self.due.len()
    }

    /// The lease-clock instant at which the next live lease is due for reclaim.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.due.first().map(|(due_ms, _)| *due_ms)
    }

    /// Up to `limit` live leases due at or before `at_ms`, as (resource, fencing token).
    pub fn due_by(&self, at_ms: u64, limit: usize) -> Vec<(String, u64)> {
        self.due
            .iter()
            .take_while(|(due_ms, _)| *due_ms <= at_ms)
            .take(limit)
            .filter_map(|(_, name)| {
                let lease = self.resources.get(name)?.lease.as_ref()?;
                Some((name.clone(), lease.fencing_token))
            })
            .collect()
    }

    pub(super) fn policy_of(&self, _resource: &str) -> &Policy {
        &self.default_policy
    }

    pub(super) fn live_view(&self, lease: &Lease) -> LeaseView {
        let now_ms = self.clock.now_ms();
        LeaseView {
            lease: lease.clone(),
            status: if now_ms < lease.expires_at_ms {
                LeaseStatus::Active
            } else {
                LeaseStatus::Grace
            },
            expires_wall_ms: self.clock.wall_of(lease.expires_at_ms),
            remaining_ms: lease.expires_at_ms.saturating_sub(now_ms),
        }
    }

    pub(super) fn ended_view(&self, ended: &Ended) -> LeaseView {
        LeaseView {
            lease: ended.lease.clone(),
            status: ended.status,
            expires_wall_ms: self.clock.wall_of(ended.lease.expires_at_ms),
            remaining_ms: 0,
        }
    }

    fn execute(&mut self, index: u64, proposal: &Proposal, reclaimed: Vec<LeaseView>) -> Reply {
        match &proposal.op {
            Op::Acquire(op) => self.acquire(index, &proposal.principal, op),
            Op::Renew(op) => self.renew(index, &proposal.principal, proposal.admin, op),
            Op::Release(op) => self.release(index, &proposal.principal, proposal.admin, op),
            Op::Reclaim { .. } | Op::Tick => Reply::Reclaimed(reclaimed),
        }
    }

    /// Reclaims every live lease whose expiry and grace have passed on the lease clock.
    fn settle_due(&mut self, index: u64) -> Vec<LeaseView> {
        let now_ms = self.clock.now_ms();
        let mut reclaimed = Vec::new();
        while let Some((due_ms, name)) = self.due.first().cloned() {
            if due_ms > now_ms {
                break;
            }
            self.due.remove(&(due_ms, name.clone()));
            if let Some(view) = self.end_lease(index, &name, LeaseStatus::Reclaimed) {
                reclaimed.push(view);
            }
        }
        reclaimed
    }

    /// Ends the resource's live lease with `status`; returns how it looked when it ended.
    fn end_lease(&mut self, index: u64, name: &str, status: LeaseStatus) -> Option<LeaseView> {
        let now_ms = self.clock.now_ms();
        let grace_ms = self.policy_of(name).renewal_grace_ms;
        let rs = self.resources.get_mut(name)?;
        let lease = rs.lease.take()?;
        self.due
            .remove(&(lease.expires_at_ms + grace_ms, name.to_string()));
        self.forget
            .push_back((now_ms, name.to_string(), lease.fencing_token));
        let ended = Ended {
            lease,
            status,
            at_ms: now_ms,
        };
        rs.revision = index;
        let view = LeaseView {
            lease: ended.lease.clone(),
            status,
            expires_wall_ms: self.clock.wall_of(ended.lease.expires_at_ms),
            remaining_ms: 0,
        };
        rs.ended = Some(ended);
        Some(view)
    }

    /// Forgets ad-hoc resources whose last tenure ended longer than the retention window ago.
    fn forget_old(&mut self, now_ms: u64) {
        while let Some((at_ms, _, _)) = self.forget.front() {
            if at_ms.saturating_add(DEDUP_WINDOW_MS) > now_ms {
                break;
            }
            let Some((_, name, token)) = self.forget.pop_front() else {
                break;
            };
            let idle = self.resources.get(&name).is_some_and(|rs| {
                rs.lease.is_none()
                    && rs
                        .ended
                        .as_ref()
                        .is_some_and(|e| e.lease.fencing_token == token)
            });
            if idle {
                self.resources.remove(&name);
            }
        }
    }

    fn acquire(&mut self, index: u64, principal: &str, op: &AcquireOp) -> Reply {
        if let Err(rejection) = check_names(&op.resource, &op.holder) {
            return Reply::Rejected(rejection);
        }
        let policy = self.policy_of(&op.resource);
        if !policy.allows(op.mode) {
            return Reply::Rejected(Rejection::InvalidMode { mode: op.mode });
        }
        let ttl_ms = op.ttl_ms.unwrap_or(policy.default_ttl_ms);
        if let Err(rejection) = check_ttl(policy, ttl_ms) {
            return Reply::Rejected(rejection);
        }
        if policy::metadata_bytes(&op.metadata) > policy.max_metadata_bytes as usize {
            return Reply::Rejected(Rejection::invalid(
                "metadata",
                format!(
                    "over {} bytes of keys and values",
                    policy.max_metadata_bytes
                ),
            ));
        }
        let units = if op.mode == Mode::Exclusive {
            0
        } else {
            op.units.max(1)
        };
        let grace_ms = policy.renewal_grace_ms;

        if let Some(current) = self
            .resources
            .get(&op.resource)
            .and_then(|rs| rs.lease.as_ref())
        {
            if current.holder == op.holder {
                if current.mode == op.mode && current.units == units {
                    let view = self.live_view(current);
                    return Reply::Acquire(AcquireOutcome {
                        granted: true,
                        lease: Some(view),
                        refusal: None,
                        holders: vec![],
                    });
                }
                return Reply::Rejected(Rejection::AlreadyHeld {
                    mode: current.mode,
                    units: current.units,
                });
            }
            if op.idempotency_key.is_some() && current.idempotency_key == op.idempotency_key {
                return Reply::Rejected(Rejection::invalid(
                    "idempotency_key",
                    "already used by another holder on this resource",
                ));
            }
            let holders = vec![self.live_view(current)];
            return Reply::Acquire(AcquireOutcome {
                granted: false,
                lease: None,
                refusal: Some(Refusal::ResourceUnavailable),
                holders,
            });
        }

        let now_ms = self.clock.now_ms();
        let lease = Lease {
            lease_id: format!("lse_{index}_0"),
            resource: op.resource.clone(),
            holder: op.holder.clone(),
            principal: principal.to_string(),
            mode: op.mode,
            units,
            fencing_token: index,
            acquired_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
            ttl_ms,
            acquired_wall_ms: self.clock.wall_ms(),
            metadata: op.metadata.clone(),
            idempotency_key: op.idempotency_key.clone(),
        };
        self.due
            .insert((lease.expires_at_ms + grace_ms, op.resource.clone()));
        let view = self.live_view(&lease);
        let rs = self.resources.entry(op.resource.clone()).or_default();
        rs.lease = Some(lease);
        rs.revision = index;
        Reply::Acquire(AcquireOutcome {
            granted: true,
            lease: Some(view),
            refusal: None,
            holders: vec![],
        })
    }

    /// Finds the live lease a renew/release names and checks, in SPEC §3 order, that the
    /// caller may mutate it: existence → holder and permission → fencing token.
    fn mutable_lease(
        &self,
        principal: &str,
        admin: bool,
        target: Target<'_>,
    ) -> Result<&Lease, Rejection> {
        let Target {
            resource,
            lease_id,
            holder,
            fencing_token,
        } = target;
        check_names(resource, holder)?;
        let rs = self.resources.get(resource);
        let names = |l: &Lease| {
            if lease_id.is_empty() {
                l.holder == holder
            } else {
                l.lease_id == lease_id
            }
        };
        let Some(lease) = rs.and_then(|rs| rs.lease.as_ref()).filter(|l| names(l)) else {
            return Err(
                match rs
                    .and_then(|rs| rs.ended.as_ref())
                    .filter(|e| names(&e.lease))
                {
                    Some(ended) if ended.status == LeaseStatus::Released => {
                        Rejection::LeaseNotFound(": it was released".into())
                    }
                    Some(_) => Rejection::LeaseExpired,
                    None => Rejection::LeaseNotFound(String::new()),
                },
            );
        };
        if lease.holder != holder {
            return Err(Rejection::InsufficientPermissions(format!(
                "lease {} is held by another holder",
                lease.lease_id
            )));
        }
        if !admin && lease.principal != principal {
            return Err(Rejection::InsufficientPermissions(format!(
                "only the lease's principal or an admin may change lease {}",
                lease.lease_id
            )));
        }
        if lease.fencing_token != fencing_token {
            return Err(Rejection::StaleFencingToken {
                expected: lease.fencing_token,
                got: fencing_token,
            });
        }
        Ok(lease)
    }

    fn renew(&mut self, index: u64, principal: &str, admin: bool, op: &RenewOp) -> Reply {
        // A ttl the caller gave is an argument: SPEC §3 checks it (both bounds) before the lease.
        if let Some(ttl_ms) = op.ttl_ms {
            if let Err(rejection) = check_ttl(self.policy_of(&op.resource), ttl_ms) {
                return Reply::Rejected(rejection);
            }
        }
        let lease = match self.mutable_lease(principal, admin, op.into()) {
            Ok(lease) => lease,
            Err(rejection) => return Reply::Rejected(rejection),
        };
        let policy = self.policy_of(&op.resource);
        let ttl_ms = op.ttl_ms.unwrap_or(lease.ttl_ms);
        if let Err(rejection) = check_ttl(policy, ttl_ms) {
            return Reply::Rejected(rejection);
        }
        let now_ms = self.clock.now_ms();
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        let max_lifetime_ms = policy.max_lifetime_ms;
        if max_lifetime_ms > 0
            && expires_at_ms > lease.acquired_at_ms.saturating_add(max_lifetime_ms)
        {
            return Reply::Rejected(Rejection::LifetimeExceeded { max_lifetime_ms });
        }
        let grace_ms = policy.renewal_grace_ms;
        let old_due = (lease.expires_at_ms + grace_ms, op.resource.clone());
        self.due.remove(&old_due);
        self.due
            .insert((expires_at_ms + grace_ms, op.resource.clone()));
        let Some(rs) = self.resources.get_mut(&op.resource) else {
            return Reply::Rejected(Rejection::LeaseNotFound(String::new()));
        };
        rs.revision = index;
        let Some(lease) = rs.lease.as_mut() else {
            return Reply::Rejected(Rejection::LeaseNotFound(String::new()));
        };
        lease.expires_at_ms = expires_at_ms;
        lease.ttl_ms = ttl_ms;
        let lease = lease.clone();
        Reply::Lease(self.live_view(&lease))
    }

    fn release(&mut self, index: u64, principal: &str, admin: bool, op: &ReleaseOp) -> Reply {
        if let Err(rejection) = self.mutable_lease(principal, admin, op.into()) {
            return Reply::Rejected(rejection);
        }
        match self.end_lease(index, &op.resource, LeaseStatus::Released) {
            Some(view) => Reply::Lease(view),
            None => Reply::Rejected(Rejection::LeaseNotFound(String::new())),
        }
    }
}

fn check_names(resource: &str, holder: &str) -> Result<(), Rejection> {
    if !policy::valid_name(resource) {
        return Err(Rejection::invalid(
            "resource",
            "must be 1-128 bytes of [A-Za-z0-9_.:/-]",
        ));
    }
    if !policy::valid_name(holder) {
        return Err(Rejection::invalid(
            "holder",
            "must be 1-128 bytes of [A-Za-z0-9_.:/-]",
        ));
    }
    Ok(())
}

fn check_ttl(policy: &Policy, ttl_ms: u64) -> Result<(), Rejection> {
    let max_ms = policy.ttl_ceiling_ms();
    if ttl_ms < MIN_TTL_MS || ttl_ms > max_ms {
        return Err(Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: MIN_TTL_MS,
            max_ms,
        });
    }
    Ok(())
}
