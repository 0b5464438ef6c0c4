//! The state as snapshots hold it: the O(1) copy a snapshot encodes, the readers of older
//! formats, and the derived indexes rebuilt on load.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;

use super::super::history::Retention;
use super::super::lease_clock::LeaseClock;
use super::super::policy::{Policy, PolicyV1};
use super::super::quota::QuotasV5;
use super::super::types::Name;
use super::super::waiting::wait_due_key;
use super::resource::{ResourceStateV4, ResourceStateV5};
use super::{due_key, LeaseIndex, State};

impl State {
    /// What a snapshot holds: the replicated fields, without the derived indexes (loading
    /// rebuilds them). O(1): the resources and the exactly-once records are persistent
    /// maps, shared with this state until apply changes them.
    pub fn snapshot_copy(&self) -> State {
        State {
            clock: self.clock.clone(),
            resources: self.resources.clone(),
            dedup: self.dedup.clone(),
            dropped_through: self.dropped_through,
            quotas: self.quotas.replicated(),
            dropped_last: self.dropped_last.clone(),
            sessions: self.sessions.clone(),
            groups: self.groups.clone(),
            history_total: self.history_total,
            history_total_bytes: self.history_total_bytes,
            rules: self.rules,
            ..State::with_default_policy(self.default_policy.clone())
        }
    }

    /// A state as snapshot format 6 holds it: no multi-waits.
    pub fn from_format_6(body: &[u8]) -> postcard::Result<State> {
        #[derive(Deserialize)]
        struct Format6 {
            clock: LeaseClock,
            default_policy: Policy,
            resources: imbl::OrdMap<Name, Arc<super::ResourceState>>,
            dedup: super::super::dedup::Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: super::super::quota::Quotas,
            dropped_last: Option<super::super::history::Position>,
            sessions: imbl::OrdMap<u64, Arc<super::super::session::Session>>,
        }
        let old: Format6 = postcard::from_bytes(body)?;
        Ok(State {
            clock: old.clock,
            resources: old.resources,
            dedup: old.dedup,
            dropped_through: old.dropped_through,
            quotas: old.quotas,
            dropped_last: old.dropped_last,
            sessions: old.sessions,
            ..State::with_default_policy(old.default_policy)
        })
    }

    /// A state as snapshot format 5 holds it: no sessions, events without one, nine quotas.
    pub fn from_format_5(body: &[u8]) -> postcard::Result<State> {
        #[derive(Deserialize)]
        struct Format5 {
            clock: LeaseClock,
            default_policy: Policy,
            resources: Vec<(Name, ResourceStateV5)>,
            dedup: super::super::dedup::Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: QuotasV5,
            dropped_last: Option<super::super::history::Position>,
        }
        let old: Format5 = postcard::from_bytes(body)?;
        let resources = old
            .resources
            .into_iter()
            .map(|(name, rs)| (name, Arc::new(rs.0)))
            .collect();
        Ok(State {
            clock: old.clock,
            resources,
            dedup: old.dedup,
            dropped_through: old.dropped_through,
            quotas: old.quotas.into(),
            dropped_last: old.dropped_last,
            ..State::with_default_policy(old.default_policy)
        })
    }

    /// A state as snapshot formats 3 and 4 hold it: exactly-once records with whole replies
    /// and no principal, no quotas.
    pub fn from_format_4(body: &[u8]) -> postcard::Result<State> {
        #[derive(Deserialize)]
        struct Format4 {
            clock: LeaseClock,
            default_policy: PolicyV1,
            resources: Vec<(Name, ResourceStateV4)>,
            dedup: super::super::dedup::Format4,
            dropped_through: Option<(u64, u32)>,
        }
        let old: Format4 = postcard::from_bytes(body)?;
        let resources = old
            .resources
            .into_iter()
            .map(|(name, rs)| (name, Arc::new(rs.0)))
            .collect();
        // Ad-hoc resources are not bookable unless a booking says which node allows it.
        let default_policy = Policy {
            bookable: false,
            ..old.default_policy.into()
        };
        Ok(State {
            clock: old.clock,
            resources,
            dedup: old.dedup.into(),
            dropped_through: old.dropped_through,
            ..State::with_default_policy(default_policy)
        })
    }

    /// The body of a format-3 or 4 snapshot of this state, with `dedup` as those formats
    /// held it (tests of the reader).
    #[cfg(test)]
    pub(crate) fn format_4_body(&self, version: u32, dedup: &impl serde::Serialize) -> Vec<u8> {
        use std::collections::VecDeque;

        use serde::Serialize;

        use super::super::bookings::BookingV1;
        use super::super::history::EventV5;
        use super::super::types::Lease;
        use super::super::waiting::Waiter;
        use super::resource::StoredResource;
        use super::Ended;

        type Old<'a> = StoredResource<
            &'a Vec<Lease>,
            &'a Vec<Ended>,
            Vec<EventV5>,
            PolicyV1,
            &'a VecDeque<Waiter>,
            Vec<BookingV1>,
        >;
        #[derive(Serialize)]
        struct Format4<'a, D> {
            clock: &'a LeaseClock,
            default_policy: PolicyV1,
            resources: Vec<(&'a Name, Old<'a>)>,
            dedup: &'a D,
            dropped_through: Option<(u64, u32)>,
        }
        let resources = self
            .resources
            .iter()
            .map(|(name, rs)| {
                let rare = rs.rare();
                let old = Old {
                    registration: rare.registration.as_deref().map(PolicyV1::from),
                    leases: &rs.leases,
                    ended: &rs.ended,
                    revision: rs.revision,
                    closed_until_ms: rare.closed_until_ms,
                    history: rs.history.iter().map(EventV5::from).collect(),
                    trimmed_through: rs.trimmed_through(),
                    waiters: &rare.waiters,
                    bookings: rare.bookings.iter().map(BookingV1::from).collect(),
                };
                (name, old)
            })
            .collect();
        let old = Format4 {
            clock: &self.clock,
            default_policy: PolicyV1::from(&self.default_policy),
            resources,
            dedup,
            dropped_through: self.dropped_through,
        };
        postcard::to_allocvec(&(version, old)).expect("plain data encodes")
    }

    /// The body of a format-5 snapshot of this state (tests of the reader): no sessions,
    /// events without one, nine quotas.
    #[cfg(test)]
    pub(crate) fn format_5_body(&self) -> Vec<u8> {
        use std::collections::VecDeque;

        use serde::Serialize;

        use super::super::bookings::Booking;
        use super::super::history::{EventV5, Position};
        use super::super::types::Lease;
        use super::super::waiting::Waiter;
        use super::resource::StoredResource;
        use super::Ended;

        type Old<'a> = StoredResource<
            &'a Vec<Lease>,
            &'a Vec<Ended>,
            Vec<EventV5>,
            &'a Policy,
            &'a VecDeque<Waiter>,
            &'a Vec<Booking>,
        >;
        type Nine = [Option<u64>; 9];
        #[derive(Serialize)]
        struct Format5<'a> {
            clock: &'a LeaseClock,
            default_policy: &'a Policy,
            resources: Vec<(&'a Name, Old<'a>)>,
            dedup: &'a super::super::dedup::Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: (Nine, Vec<(Name, Nine)>),
            dropped_last: &'a Option<Position>,
        }
        let nine = |o: &super::super::quota::Overrides| {
            let mut nine = [None; 9];
            nine.copy_from_slice(&o.0[..9]);
            nine
        };
        let resources = self
            .resources
            .iter()
            .map(|(name, rs)| {
                let rare = rs.rare();
                let old = Old {
                    registration: rare.registration.as_deref(),
                    leases: &rs.leases,
                    ended: &rs.ended,
                    revision: rs.revision,
                    closed_until_ms: rare.closed_until_ms,
                    history: rs.history.iter().map(EventV5::from).collect(),
                    trimmed_through: rs.trimmed_through(),
                    waiters: &rare.waiters,
                    bookings: &rare.bookings,
                };
                (name, old)
            })
            .collect();
        let old = Format5 {
            clock: &self.clock,
            default_policy: &self.default_policy,
            resources,
            dedup: &self.dedup,
            dropped_through: self.dropped_through,
            quotas: (
                nine(&self.quotas.settings(None)),
                self.quotas
                    .principals_with_settings()
                    .map(|(p, o)| (p.clone(), nine(o)))
                    .collect(),
            ),
            dropped_last: &self.dropped_last,
        };
        postcard::to_allocvec(&(5u32, old)).expect("plain data encodes")
    }

    /// The body of a format-6 snapshot of this state (tests of the reader): no multi-waits.
    #[cfg(test)]
    pub(crate) fn format_6_body(&self) -> Vec<u8> {
        use serde::Serialize;

        use super::super::dedup::Dedup;
        use super::super::history::Position;
        use super::super::quota::Quotas;
        use super::super::session::Session;
        use super::ResourceState;

        #[derive(Serialize)]
        struct Format6<'a> {
            clock: &'a LeaseClock,
            default_policy: &'a Policy,
            resources: &'a imbl::OrdMap<Name, Arc<ResourceState>>,
            dedup: &'a Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: &'a Quotas,
            dropped_last: &'a Option<Position>,
            sessions: &'a imbl::OrdMap<u64, Arc<Session>>,
        }
        let old = Format6 {
            clock: &self.clock,
            default_policy: &self.default_policy,
            resources: &self.resources,
            dedup: &self.dedup,
            dropped_through: self.dropped_through,
            quotas: &self.quotas,
            dropped_last: &self.dropped_last,
            sessions: &self.sessions,
        };
        postcard::to_allocvec(&(6u32, old)).expect("plain data encodes")
    }

    /// Rebuilds the derived indexes after deserializing a snapshot.
    pub fn restored(mut self) -> Self {
        // First: each lease names its session again, and a lease on a session is not due.
        self.restore_sessions();
        let mut due = BTreeSet::new();
        let mut wait_due = BTreeSet::new();
        let mut reopen = BTreeSet::new();
        let mut booking_ends = BTreeSet::new();
        let mut by_holder = LeaseIndex::default();
        let mut by_principal = LeaseIndex::default();
        for (name, rs) in &self.resources {
            let grace_ms = self.policy_of(name).renewal_grace_ms;
            for l in &rs.leases {
                if l.session.is_none() {
                    due.insert(due_key(l, grace_ms));
                }
                by_holder.insert(&l.holder, l);
                by_principal.insert(&l.principal, l);
            }
            for w in &rs.rare().waiters {
                wait_due.insert(wait_due_key(name, w));
            }
            for b in &rs.rare().bookings {
                booking_ends.insert((b.end_wall_ms(), name.clone()));
            }
            if rs.rare().closed_until_ms > self.clock.now_ms() {
                reopen.insert((rs.rare().closed_until_ms, name.clone()));
            }
        }
        self.recount_usage();
        self.due = due;
        self.wait_due = wait_due;
        self.reopen = reopen;
        self.booking_ends = booking_ends;
        self.by_holder = by_holder;
        self.by_principal = by_principal;
        self.retention = Retention::rebuild(self.resources.iter().map(|(n, rs)| (n, &rs.history)));
        if self.dropped_last.is_none() {
            // A format before the position was kept: every resource of that revision counts
            // as dropped (`~` sorts after every name), so a watch is told `compacted` rather
            // than miss an event.
            self.dropped_last = self
                .dropped_through
                .map(|(revision, seq)| (revision, Name::from("~"), seq));
        }
        // A trim newer than the global watermark is the per-resource bound's.
        self.trims = self
            .resources
            .iter()
            .filter_map(|(name, rs)| {
                let (revision, seq) = rs.trimmed_through()?;
                let position = (revision, name.clone(), seq);
                (Some(&position) > self.dropped_last.as_ref()).then_some(position)
            })
            .collect();
        self
    }
}
