//! What the state counts against each principal's quotas: its leases, waiters, bookings and
//! ad-hoc resources, as they come and go; and `SetQuota`.

use std::collections::BTreeMap;

use super::{metadata_cost, Quota, Quotas};
use crate::bookings::Booking;
use crate::command::{Reply, SetQuotaOp};
use crate::machine::{check_name, Ctx, State};
use crate::types::{Held, Metadata, Name, Rejection};
use crate::waiting::Waiter;

/// What a principal's lease, waiter or booking holds, counted (`sign` 1) or freed (-1).
fn hold(
    quotas: &mut Quotas,
    principal: &str,
    metadata: &Metadata,
    ad_hoc: bool,
    what: Quota,
    sign: i64,
) {
    let bytes = metadata_cost(metadata.iter()) as i64;
    quotas.add_all(
        principal,
        &[
            (what, sign),
            (Quota::MetadataBytes, sign * bytes),
            (Quota::AdHocResources, if ad_hoc { sign } else { 0 }),
        ],
    );
}

impl State {
    /// Refuses a new `what` (a lease, waiter or booking) of `principal` on `resource`, with
    /// `metadata`, past any of the principal's quotas it would count against. What an admin
    /// makes for itself is not held to them ([`Ctx::quota_exempt`]: not `anonymous`), and
    /// still counts.
    pub(crate) fn admit_holding(
        &self,
        ctx: &Ctx<'_>,
        principal: &str,
        ad_hoc: bool,
        metadata: &BTreeMap<String, String>,
        what: Quota,
    ) -> Result<(), Rejection> {
        self.admit_holdings(ctx, principal, &[ad_hoc], metadata, what)
    }

    /// [`State::admit_holding`] for one new `what` on each of several resources at once, each
    /// ad hoc or not, all with `metadata`.
    pub(crate) fn admit_holdings(
        &self,
        ctx: &Ctx<'_>,
        principal: &str,
        ad_hoc: &[bool],
        metadata: &BTreeMap<String, String>,
        what: Quota,
    ) -> Result<(), Rejection> {
        if ctx.quota_exempt() {
            return Ok(());
        }
        self.admit_for(principal, ad_hoc, metadata, what)
    }

    /// [`State::admit_holdings`] whoever calls: a lease transferred to `principal` is held to
    /// its quotas whatever the caller's role.
    pub(crate) fn admit_for(
        &self,
        principal: &str,
        ad_hoc: &[bool],
        metadata: &BTreeMap<String, String>,
        what: Quota,
    ) -> Result<(), Rejection> {
        let count = ad_hoc.len() as u64;
        self.quotas.admit_all(
            principal,
            &[
                (what, count),
                (
                    Quota::MetadataBytes,
                    metadata_cost(metadata).saturating_mul(count),
                ),
                (
                    Quota::AdHocResources,
                    ad_hoc.iter().filter(|a| **a).count() as u64,
                ),
            ],
        )
    }

    /// Whether `resource` runs ad hoc (under no registration).
    pub(crate) fn is_ad_hoc(&self, resource: &str) -> bool {
        self.resources
            .get(resource)
            .is_none_or(|rs| rs.rare().registration.is_none())
    }

    /// A live lease begins (`sign` 1) or ends (-1) on a resource that is `ad_hoc` or not:
    /// counted, and indexed for listings.
    pub(crate) fn count_lease(&mut self, resource: &str, lease: &Held, ad_hoc: bool, sign: i64) {
        self.attach_lease(resource, lease, sign);
        self.indexes.list(resource, lease, sign);
        let principal = &lease.principal;
        hold(
            &mut self.quotas,
            principal,
            &lease.metadata,
            ad_hoc,
            Quota::Leases,
            sign,
        );
    }

    /// A wait begins (`sign` 1) or ends (-1).
    pub(crate) fn count_waiter(&mut self, resource: &str, waiter: &Waiter, sign: i64) {
        self.attach_wait(resource, waiter.session, waiter.wait_id, sign);
        let ad_hoc = self.is_ad_hoc(resource);
        let principal = &waiter.principal;
        hold(
            &mut self.quotas,
            principal,
            &waiter.metadata,
            ad_hoc,
            Quota::Waiters,
            sign,
        );
    }

    /// A booking is made (`sign` 1) or ends (-1).
    pub(crate) fn count_booking(&mut self, resource: &str, booking: &Booking, sign: i64) {
        let ad_hoc = self.is_ad_hoc(resource);
        let none = Metadata::default();
        hold(
            &mut self.quotas,
            &booking.principal,
            &none,
            ad_hoc,
            Quota::Bookings,
            sign,
        );
    }

    /// `resource` is being registered: what waits or is booked on it no longer keeps an
    /// ad-hoc resource alive. (A resource with live leases cannot be registered.)
    pub(crate) fn no_longer_ad_hoc(&mut self, resource: &str) {
        let Some(rs) = self.resources.get(resource) else {
            return;
        };
        if rs.rare().registration.is_some() {
            return;
        }
        let rare = rs.rare();
        let principals: Vec<Name> = (rare.waiters.iter().map(|w| w.principal.clone()))
            .chain(rare.bookings.iter().map(|b| b.principal.clone()))
            .collect();
        for principal in principals {
            self.quotas.add(&principal, Quota::AdHocResources, -1);
        }
    }

    /// Counts what every principal holds again (a loaded snapshot); with `exactly_once`, what each one's
    /// exactly-once records cost is that (a format-9 snapshot carries it), else it is
    /// counted from the records.
    pub(crate) fn recount_usage_with(&mut self, exactly_once: Option<Vec<(Name, u64)>>) {
        let State {
            quotas,
            dedup,
            resources,
            ..
        } = self;
        quotas.clear_usage();
        match exactly_once {
            Some(usage) => {
                for (principal, bytes) in usage {
                    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
                    quotas.add(&principal, Quota::ExactlyOnceBytes, bytes);
                }
            }
            None => dedup.recount(|(principal, bytes)| {
                // Records converted from format 4 belong to nobody: they count in the total
                // only.
                if !principal.is_empty() {
                    quotas.add(principal, Quota::ExactlyOnceBytes, bytes);
                }
            }),
        }
        for rs in resources.values() {
            let rare = rs.rare();
            let ad_hoc = rare.registration.is_none();
            for l in &rs.leases {
                hold(quotas, &l.principal, &l.metadata, ad_hoc, Quota::Leases, 1);
            }
            for w in &rare.waiters {
                hold(quotas, &w.principal, &w.metadata, ad_hoc, Quota::Waiters, 1);
            }
            for b in &rare.bookings {
                let none = Metadata::default();
                hold(quotas, &b.principal, &none, ad_hoc, Quota::Bookings, 1);
            }
        }
        for session in self.sessions.values() {
            let bytes = metadata_cost(session.metadata.iter()) as i64;
            let changes = [(Quota::Sessions, 1), (Quota::MetadataBytes, bytes)];
            self.quotas.add_all(&session.principal, &changes);
        }
    }

    /// Changes quotas: an admin's call.
    pub(crate) fn set_quota(&mut self, ctx: &Ctx<'_>, op: &SetQuotaOp) -> Result<Reply, Rejection> {
        if let Some(principal) = &op.principal {
            check_name("principal", principal)?;
        }
        if !ctx.admin {
            return Err(Rejection::InsufficientPermissions(
                "only an admin may change quotas".into(),
            ));
        }
        self.quotas.set(op.principal.as_deref(), &op.changes);
        Ok(Reply::Quota(Box::new(
            self.quotas.view(op.principal.as_deref()),
        )))
    }
}
