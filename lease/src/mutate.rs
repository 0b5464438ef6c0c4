//! The rules that change a live lease: renew (SPEC §4.3), release (§4.5), transfer (§4.6).
//! Each first finds the lease and checks, in SPEC §3 order, that the caller may change it.

use super::command::{ReleaseOp, RenewOp, Reply, TransferOp};
use super::history::{Event, EventKind, Successor};
use super::machine::{check_name, check_names, check_ttl, Ctx, Ended, PushLean, State};
use super::policy;
use super::quota::{metadata_cost, Quota};
use super::types::{Held, Lease, LeaseId, LeaseStatus, Metadata, Name, Rejection};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The lease a renew, release or transfer names, and the token it claims.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    resource: &'a str,
    /// Empty = the holder's lease on the resource.
    lease_id: &'a str,
    holder: &'a str,
    fencing_token: u64,
}

macro_rules! target_of {
    ($($op:ty),*) => {$(
        impl<'a> From<&'a $op> for Target<'a> {
            fn from(op: &'a $op) -> Self {
                Target {
                    resource: &op.resource,
                    lease_id: &op.lease_id,
                    holder: &op.holder,
                    fencing_token: op.fencing_token,
                }
            }
        }
    )*};
}
target_of!(RenewOp, ReleaseOp, TransferOp);

impl State {
    /// Finds the live lease a mutation names and checks that the caller may change it:
    /// existence → holder and permission → fencing token.
    fn mutable_lease(&self, ctx: &Ctx<'_>, target: Target<'_>) -> Result<Lease, Rejection> {
        let Target {
            resource,
            lease_id,
            holder,
            fencing_token,
        } = target;
        check_names(resource, holder)?;
        let rs = self.resource_ref(resource);
        let rs = rs.as_deref();
        let wanted = LeaseId::parse(lease_id);
        let names = |l: &Held| {
            if lease_id.is_empty() {
                l.holder == holder
            } else {
                Some(l.lease_id()) == wanted
            }
        };
        // Existence: a live lease, or one that ended (a released one no longer exists).
        let (lease, ended) = match rs.and_then(|rs| rs.leases.iter().find(|l| names(l))) {
            Some(live) => (live, None),
            None => match rs.and_then(|rs| rs.ended.iter().rev().find(|e| names(&e.lease))) {
                Some(e) if e.status == LeaseStatus::Released => {
                    return Err(Rejection::LeaseNotFound(": it was released".into()))
                }
                Some(e) => (&e.lease.held, Some(e)),
                None => return Err(Rejection::LeaseNotFound(String::new())),
            },
        };
        if lease.holder != holder {
            return Err(Rejection::InsufficientPermissions(format!(
                "lease {} is held by another holder",
                lease.lease_id()
            )));
        }
        if !ctx.admin && lease.principal != ctx.principal {
            return Err(Rejection::InsufficientPermissions(format!(
                "only the lease's principal or an admin may change lease {}",
                lease.lease_id()
            )));
        }
        // Token: after a transfer only the successor's token is current.
        let current = ended
            .and_then(|e| e.superseded_by)
            .unwrap_or(lease.fencing_token);
        if ended.is_some_and(|e| e.superseded_by.is_some()) || current != fencing_token {
            return Err(Rejection::StaleFencingToken {
                expected: current,
                got: fencing_token,
            });
        }
        // State: a reclaimed lease is lost to its holder.
        if ended.is_some() {
            return Err(Rejection::LeaseExpired);
        }
        Ok(lease.to_lease(resource))
    }

    /// Renews a lease; with `metadata` (rules version 2), its metadata becomes that too.
    pub(super) fn renew(
        &mut self,
        ctx: &Ctx<'_>,
        op: &RenewOp,
        metadata: Option<&BTreeMap<String, String>>,
    ) -> Result<Reply, Rejection> {
        // A ttl the caller gave is an argument: SPEC §3 checks it (both bounds) before the lease.
        if let Some(ttl_ms) = op.ttl_ms {
            check_ttl(self.policy_of(&op.resource), ttl_ms)?;
        }
        if let Some(metadata) = metadata {
            let policy = self.policy_of(&op.resource);
            policy::check_metadata(metadata, policy.max_metadata_bytes as usize)?;
        }
        let mut lease = self.mutable_lease(ctx, op.into())?;
        if let Some(session) = lease.session {
            return Err(Rejection::invalid(
                "lease_id",
                format!(
                    "lease {} lives on session ses_{session}, which keeps it alive: renew the session",
                    lease.lease_id()
                ),
            ));
        }
        // The resource is looked up once here for its policy and bookings: at a million
        // resources each lookup is most of a microsecond.
        let rs = self.resources.get(op.resource.as_str());
        let policy = rs.map_or(&self.default_policy, |rs| self.policy_in(rs));
        let grace_ms = policy.renewal_grace_ms;
        // The lease's last ttl passed this (immutable) policy's bounds when it was set.
        let ttl_ms = op.ttl_ms.unwrap_or(lease.ttl_ms);
        let expires_at_ms = self.clock.now_ms().saturating_add(ttl_ms);
        let max_lifetime_ms = policy.max_lifetime_ms;
        if max_lifetime_ms > 0
            && expires_at_ms > lease.acquired_at_ms.saturating_add(max_lifetime_ms)
        {
            return Err(Rejection::LifetimeExceeded { max_lifetime_ms });
        }
        // A booking made after the lease was granted does not deny its renewals.
        let granted_at = Some(lease.fencing_token);
        let in_the_way = rs.and_then(|rs| {
            self.booking_in_the_way_of(rs, &lease.holder, expires_at_ms, granted_at)
        });
        if let Some(b) = in_the_way {
            return Err(Rejection::ResourceBooked {
                start_wall_ms: b.start_wall_ms,
            });
        }
        // New metadata counts against the lease's principal's quota, as an acquire's does
        // (an admin's own leases are held to none).
        let grown = metadata.map(|new| {
            let (old, new) = (metadata_cost(lease.metadata.iter()), metadata_cost(new));
            new as i64 - old as i64
        });
        if let Some(grown) = grown.filter(|grown| *grown > 0) {
            if !(ctx.quota_exempt() && lease.principal.as_str() == ctx.principal) {
                self.quotas
                    .admit_all(&lease.principal, &[(Quota::MetadataBytes, grown as u64)])?;
            }
        }
        let was = self.live_view(&op.resource, &lease).status;
        (self.indexes).untrack_lease(&op.resource, &lease, grace_ms);
        lease.expires_at_ms = expires_at_ms;
        lease.ttl_ms = ttl_ms;
        (self.indexes).track_lease(&op.resource, &lease, grace_ms);
        let mut event_metadata = Metadata::default();
        if let (Some(metadata), Some(grown)) = (metadata, grown) {
            if *metadata != *lease.metadata {
                lease.metadata = Metadata::from(metadata.clone());
                event_metadata = lease.metadata.clone();
            }
            self.quotas
                .add(&lease.principal, Quota::MetadataBytes, grown);
        }
        let view = self.live_view(&op.resource, &lease);
        let mut event = Event::about(EventKind::Renewed, &lease, Some(was), Some(view.status));
        // Watchers see metadata a renew changed (an acquire's event carries its own); a renew
        // that set what was there already costs the history nothing more than a plain one.
        event.metadata = event_metadata;
        self.replace_live(ctx.index, lease);
        self.record(ctx.index, ctx.principal, &op.resource, event);
        Ok(Reply::Lease(view))
    }

    pub(super) fn release(&mut self, ctx: &Ctx<'_>, op: &ReleaseOp) -> Result<Reply, Rejection> {
        let lease = self.mutable_lease(ctx, op.into())?;
        self.end_lease(
            ctx.index,
            ctx.principal,
            &op.resource,
            lease.lease_id(),
            LeaseStatus::Released,
        )
        .map(Reply::Lease)
        .ok_or_else(|| Rejection::LeaseNotFound(String::new()))
    }

    /// Hands the lease to `to_holder` in the same entry: no gap, expiry and lifetime start kept,
    /// a new lease whose token is this entry's index, so the old token dies as it commits.
    pub(super) fn transfer(&mut self, ctx: &Ctx<'_>, op: &TransferOp) -> Result<Reply, Rejection> {
        check_name("to_holder", &op.to_holder)?;
        if let Some(p) = &op.to_principal {
            check_name("to_principal", p)?;
        }
        if op.to_holder == op.holder {
            return Err(Rejection::invalid(
                "to_holder",
                "is already the lease's holder",
            ));
        }
        let mut old = self.mutable_lease(ctx, op.into())?;
        // Only an admin hands a lease to another principal: a client can put nothing on
        // another principal's quota.
        if let Some(to) = op.to_principal.as_deref() {
            if to != old.principal.as_str() && !ctx.admin {
                return Err(Rejection::InsufficientPermissions(format!(
                    "only an admin may transfer a lease to another principal ({to})"
                )));
            }
        }
        // The new holder's lease is its own, not on the old holder's session: it keeps the
        // expiry the session gave the old one.
        old.expires_at_ms = self.expiry_of(&old);
        if !self.policy_of(&op.resource).transferable {
            return Err(Rejection::NotTransferable(op.resource.clone()));
        }
        // The new holder may not hold the resource into another holder's booking either.
        if let Some(b) =
            self.booking_in_the_way(&op.resource, &op.to_holder, old.expires_at_ms, None)
        {
            return Err(Rejection::ResourceBooked {
                start_wall_ms: b.start_wall_ms,
            });
        }
        let rs = self.resources.get(op.resource.as_str());
        if let Some(other) = rs.and_then(|rs| rs.leases.iter().find(|l| l.holder == op.to_holder)) {
            return Err(Rejection::AlreadyHeld {
                mode: other.mode,
                units: other.units,
            });
        }
        let new = Lease {
            resource: old.resource.clone(),
            held: Held {
                position: self.next_position(),
                holder: op.to_holder.as_str().into(),
                principal: op
                    .to_principal
                    .as_deref()
                    .map_or_else(|| old.principal.clone(), Name::from),
                fencing_token: ctx.index,
                idempotency_key: None,
                session: None,
                ..old.held.clone()
            },
        };
        if new.principal != old.principal {
            let metadata = &new.metadata;
            let ad_hoc = self.is_ad_hoc(&op.resource);
            // The receiver's quota holds whoever hands it the lease.
            self.admit_for(&new.principal, &[ad_hoc], metadata, Quota::Leases)?;
        }
        let resource = op.resource.as_str();
        let was = self.live_view(resource, &old).status;
        self.untrack_due(resource, &old);
        self.track_due(resource, &new);
        let ad_hoc = self.is_ad_hoc(resource);
        self.count_lease(resource, &old, ad_hoc, -1);
        self.count_lease(resource, &new, ad_hoc, 1);
        let view = self.live_view(resource, &new);
        let now_ms = self.clock.now_ms();
        if let Some(rs) = self
            .resources
            .get_mut(op.resource.as_str())
            .map(Arc::make_mut)
        {
            rs.leases.retain(|l| l.lease_id() != old.lease_id());
            rs.leases.push_lean(new.held.clone());
            rs.revision = ctx.index;
        }
        let mut event = Event::about(
            EventKind::Transferred,
            &old,
            Some(was),
            Some(LeaseStatus::Transferred),
        );
        event.successor = Some(Box::new(Successor {
            holder: new.holder.clone(),
            lease_id: new.lease_id().to_name(),
            fencing_token: new.fencing_token,
        }));
        self.remember_ended(
            &op.resource,
            Ended {
                lease: old,
                status: LeaseStatus::Transferred,
                at_ms: now_ms,
                superseded_by: Some(new.fencing_token),
            },
        );
        self.record(ctx.index, ctx.principal, &op.resource, event);
        self.waiter_got_lease(ctx.index, ctx.principal, &op.resource, view.clone());
        Ok(Reply::Lease(view))
    }

    /// Replaces a live lease with its changed self.
    fn replace_live(&mut self, index: u64, lease: Lease) {
        if let Some(rs) = self.resources.get_mut(&lease.resource).map(Arc::make_mut) {
            rs.revision = index;
            if let Some(slot) = rs
                .leases
                .iter_mut()
                .find(|l| l.lease_id() == lease.lease_id())
            {
                *slot = lease.held;
            }
        }
    }
}
