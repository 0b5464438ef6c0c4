//! Bookings (SPEC §4.8): reservations of future windows `[start, start + duration)` of a
//! resource. Bookings of one resource never overlap, and no lease of another holder may
//! extend into a booked window. Windows are wall-clock times judged by the leader's stamp in
//! the entry: a scheduling promise to the precision of clock sync, not a fencing guarantee.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::command::{BookOp, CancelBookingOp, Reply};
use super::history::{Event, EventKind};
use super::machine::{check_names, Ctx, ResourceState, State};
use super::policy::{MAX_TTL_CEILING_MS, MIN_TTL_MS};
use super::quota::Quota;
use super::types::{Name, Rejection};

/// How far ahead a window may start.
pub const MAX_BOOKING_LEAD_MS: u64 = 366 * 24 * 3600 * 1000;
/// Bookings one resource keeps (each acquire and renew looks through them).
pub const MAX_BOOKINGS: usize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    pub holder: Name,
    pub principal: Name,
    /// Unix milliseconds.
    pub start_wall_ms: u64,
    pub duration_ms: u64,
    /// The index of the entry that booked it.
    pub revision: u64,
    /// Made by the old rule (before SPEC §4.8 kept bookings from being used against a
    /// holder): it denies renewals of every other holder's lease into its window, also of
    /// leases granted before it. A booking made since denies only grants made after it (and
    /// renewals of those). (A format-2 snapshot's JSON, from before, has no such field.)
    #[serde(default = "made_before_the_rule")]
    pub denies_earlier_leases: bool,
}

fn made_before_the_rule() -> bool {
    true
}

/// A booking as snapshots of format 3 and 4 hold it (before the rule of SPEC §4.8 that a
/// booking never denies renewals of a lease granted before it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingV1 {
    pub holder: Name,
    pub principal: Name,
    pub start_wall_ms: u64,
    pub duration_ms: u64,
    pub revision: u64,
}

#[cfg(any(test, feature = "testkit"))]
impl From<&Booking> for BookingV1 {
    fn from(b: &Booking) -> BookingV1 {
        BookingV1 {
            holder: b.holder.clone(),
            principal: b.principal.clone(),
            start_wall_ms: b.start_wall_ms,
            duration_ms: b.duration_ms,
            revision: b.revision,
        }
    }
}

impl From<BookingV1> for Booking {
    fn from(old: BookingV1) -> Booking {
        Booking {
            holder: old.holder,
            principal: old.principal,
            start_wall_ms: old.start_wall_ms,
            duration_ms: old.duration_ms,
            revision: old.revision,
            denies_earlier_leases: true,
        }
    }
}

impl Booking {
    pub fn end_wall_ms(&self) -> u64 {
        self.start_wall_ms.saturating_add(self.duration_ms)
    }

    /// Whether the window is open at `wall_ms`.
    pub fn covers(&self, wall_ms: u64) -> bool {
        self.start_wall_ms <= wall_ms && wall_ms < self.end_wall_ms()
    }

    fn overlaps(&self, from_wall_ms: u64, until_wall_ms: u64) -> bool {
        self.start_wall_ms < until_wall_ms && from_wall_ms < self.end_wall_ms()
    }

    fn event(&self, kind: EventKind) -> Event {
        Event {
            holder: self.holder.clone(),
            metadata: BTreeMap::from([
                ("start_unix_ms".to_string(), self.start_wall_ms.to_string()),
                ("duration_ms".to_string(), self.duration_ms.to_string()),
            ])
            .into(),
            ..Event::of_resource(kind)
        }
    }
}

impl ResourceState {
    /// The first booking of another holder that a claim on the resource over the wall-clock
    /// span `[from, until)` would extend into. `granted_at`: the claim renews a lease granted
    /// by that entry, which a booking made after it does not deny (unless made by the old
    /// rule, `denies_earlier_leases`).
    pub(super) fn booked_against(
        &self,
        holder: &str,
        from_wall_ms: u64,
        until_wall_ms: u64,
        granted_at: Option<u64>,
    ) -> Option<&Booking> {
        let denies = |b: &Booking| {
            b.denies_earlier_leases || granted_at.is_none_or(|token| b.revision < token)
        };
        self.rare()
            .bookings
            .iter()
            .find(|b| b.holder != holder && b.overlaps(from_wall_ms, until_wall_ms) && denies(b))
    }
}

impl State {
    /// The booking of another holder that `holder` would extend into by holding `resource`
    /// until the lease-clock instant `expires_at_ms` and its renewal grace (which also holds
    /// the resource).
    pub(super) fn booking_in_the_way(
        &self,
        resource: &str,
        holder: &str,
        expires_at_ms: u64,
        granted_at: Option<u64>,
    ) -> Option<&Booking> {
        let rs = self.resources.get(resource)?;
        self.booking_in_the_way_of(rs, holder, expires_at_ms, granted_at)
    }

    /// [`State::booking_in_the_way`], of the resource state `rs` at hand.
    pub(super) fn booking_in_the_way_of<'a>(
        &'a self,
        rs: &'a ResourceState,
        holder: &str,
        expires_at_ms: u64,
        granted_at: Option<u64>,
    ) -> Option<&'a Booking> {
        if rs.rare().bookings.is_empty() {
            return None;
        }
        let grace_ms = self.policy_in(rs).renewal_grace_ms;
        let until_wall_ms = self.clock.wall_of(expires_at_ms.saturating_add(grace_ms));
        rs.booked_against(holder, self.clock.wall_ms(), until_wall_ms, granted_at)
    }

    /// Books a window: argument checks → whether the resource may be booked → a lease of
    /// another holder that reaches into it → an overlapping booking → the principal's quota.
    /// `legacy`: an entry from before bookings needed a bookable resource (`Op::BookV1`),
    /// applied by the rules of then: every resource bookable, and the booking denies renewals
    /// of earlier leases.
    pub(super) fn book(
        &mut self,
        ctx: &Ctx<'_>,
        op: &BookOp,
        legacy: bool,
    ) -> Result<Reply, Rejection> {
        check_names(&op.resource, &op.holder)?;
        if op.duration_ms < MIN_TTL_MS || op.duration_ms > MAX_TTL_CEILING_MS {
            return Err(Rejection::invalid(
                "duration",
                format!("must be between {MIN_TTL_MS} ms and {MAX_TTL_CEILING_MS} ms"),
            ));
        }
        let now_wall_ms = self.clock.wall_ms();
        let end_wall_ms = op.start_wall_ms.saturating_add(op.duration_ms);
        if end_wall_ms <= now_wall_ms {
            return Err(Rejection::invalid("start", "the window has already ended"));
        }
        if op.start_wall_ms > now_wall_ms.saturating_add(MAX_BOOKING_LEAD_MS) {
            return Err(Rejection::invalid(
                "start",
                "must be less than 366 days ahead",
            ));
        }
        if ctx.require_registration
            && self
                .resources
                .get(op.resource.as_str())
                .and_then(|rs| rs.rare().registration.as_ref())
                .is_none()
        {
            return Err(Rejection::ResourceNotFound(op.resource.clone()));
        }
        let registered = self
            .resources
            .get(op.resource.as_str())
            .is_some_and(|rs| rs.rare().registration.is_some());
        let bookable = match registered {
            true => self.policy_of(&op.resource).bookable,
            false => op.ad_hoc_bookable,
        };
        if !legacy && !bookable {
            return Err(Rejection::NotBookable(op.resource.clone()));
        }
        let grace_ms = self.policy_of(&op.resource).renewal_grace_ms;
        if let Some(rs) = self.resources.get(op.resource.as_str()) {
            // A lease on a session has no end of its own: it holds into every window.
            if let Some(l) = rs.leases.iter().find(|l| {
                l.holder != op.holder
                    && (l.session.is_some()
                        || self.clock.wall_of(l.expires_at_ms.saturating_add(grace_ms))
                            > op.start_wall_ms)
            }) {
                return Err(Rejection::HeldIntoWindow {
                    holder: l.holder.to_string(),
                });
            }
            if let Some(b) = rs
                .rare()
                .bookings
                .iter()
                .find(|b| b.overlaps(op.start_wall_ms, end_wall_ms))
            {
                return Err(Rejection::BookingOverlaps {
                    holder: b.holder.to_string(),
                    start_wall_ms: b.start_wall_ms,
                });
            }
            if rs.rare().bookings.len() >= MAX_BOOKINGS {
                return Err(Rejection::BookingsFull { max: MAX_BOOKINGS });
            }
        }
        let none = BTreeMap::new();
        self.admit_holding(ctx, ctx.principal, !registered, &none, Quota::Bookings)?;
        let booking = Booking {
            holder: op.holder.as_str().into(),
            principal: Name::from(ctx.principal),
            start_wall_ms: op.start_wall_ms,
            duration_ms: op.duration_ms,
            revision: ctx.index,
            denies_earlier_leases: legacy,
        };
        let event = booking.event(EventKind::Booked);
        self.count_booking(&op.resource, &booking, 1);
        self.indexes
            .track_booking(&op.resource, booking.end_wall_ms());
        let rs = self.resource_entry(&op.resource);
        let at = rs
            .rare()
            .bookings
            .partition_point(|b| b.start_wall_ms < booking.start_wall_ms);
        rs.rare_mut().bookings.insert(at, booking.clone());
        rs.revision = ctx.index;
        self.record(ctx.index, ctx.principal, &op.resource, event);
        Ok(Reply::Booking(booking))
    }

    /// Cancels the holder's booking that starts at `start`: its principal or an admin only.
    pub(super) fn cancel_booking(
        &mut self,
        ctx: &Ctx<'_>,
        op: &CancelBookingOp,
    ) -> Result<Reply, Rejection> {
        check_names(&op.resource, &op.holder)?;
        let rs = self.resources.get(op.resource.as_str());
        let at = rs
            .and_then(|rs| {
                rs.rare()
                    .bookings
                    .iter()
                    .position(|b| b.holder == op.holder && b.start_wall_ms == op.start_wall_ms)
            })
            .ok_or(Rejection::BookingNotFound)?;
        let rs = self
            .resources
            .get_mut(op.resource.as_str())
            .map(Arc::make_mut)
            .ok_or(Rejection::BookingNotFound)?;
        if !ctx.admin && rs.rare().bookings[at].principal != ctx.principal {
            return Err(Rejection::InsufficientPermissions(
                "only the booking's principal or an admin may cancel it".into(),
            ));
        }
        let booking = rs.rare_mut().bookings.remove(at);
        rs.revision = ctx.index;
        self.count_booking(&op.resource, &booking, -1);
        self.indexes
            .untrack_booking(&op.resource, booking.end_wall_ms());
        self.effects.touched.insert(op.resource.as_str().into());
        self.record(
            ctx.index,
            ctx.principal,
            &op.resource,
            booking.event(EventKind::BookingCancelled),
        );
        Ok(Reply::Booking(booking))
    }

    /// Forgets bookings whose window has ended by the entry's wall stamp; their resources
    /// may now admit waiters.
    pub(super) fn settle_bookings(&mut self) {
        let now_wall_ms = self.clock.wall_ms();
        while let Some(resource) = self.indexes.take_booking_ended(now_wall_ms) {
            let mut ended = Vec::new();
            if let Some(rs) = self.resources.get_mut(&resource).map(Arc::make_mut) {
                let (gone, kept) = std::mem::take(&mut rs.rare_mut().bookings)
                    .into_iter()
                    .partition(|b| b.end_wall_ms() <= now_wall_ms);
                rs.rare_mut().bookings = kept;
                ended = gone;
            }
            for booking in &ended {
                self.count_booking(&resource, booking, -1);
            }
            self.effects.touched.insert(resource);
        }
    }
}
