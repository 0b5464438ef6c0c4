//! Snapshot formats 3 to 6, read into the current state (and, in tests, written, to test the
//! readers). Format 7 is the current state's own encoding, format 8 the same with the rules
//! version before it (`encoding`).

use std::sync::Arc;

use serde::Deserialize;

use crate::lease_clock::LeaseClock;
use crate::machine::resource::{ResourceStateV4, ResourceStateV5};
use crate::machine::State;
use crate::policy::{Policy, PolicyV1};
use crate::quota::QuotasV5;
use crate::types::Name;

impl State {
    /// A state as snapshot format 6 holds it: no multi-waits.
    pub fn from_format_6(body: &[u8]) -> postcard::Result<State> {
        #[derive(Deserialize)]
        struct Format6 {
            clock: LeaseClock,
            default_policy: Policy,
            #[serde(deserialize_with = "crate::machine::load_resources")]
            resources: crate::machine::ResourceMap,
            dedup: crate::dedup::Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: crate::quota::Quotas,
            dropped_last: Option<crate::history::Position>,
            sessions: imbl::OrdMap<u64, Arc<crate::session::Session>>,
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
            dedup: crate::dedup::Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: QuotasV5,
            dropped_last: Option<crate::history::Position>,
        }
        let old: Format5 = postcard::from_bytes(body)?;
        let resources = old
            .resources
            .into_iter()
            .map(|(name, rs)| {
                let rs = crate::machine::loaded(&name, rs.0);
                (name, rs)
            })
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
            dedup: crate::dedup::Format4,
            dropped_through: Option<(u64, u32)>,
        }
        let old: Format4 = postcard::from_bytes(body)?;
        let resources = old
            .resources
            .into_iter()
            .map(|(name, rs)| {
                let rs = crate::machine::loaded(&name, rs.0);
                (name, rs)
            })
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
    #[cfg(feature = "testkit")]
    pub fn format_4_body(&self, version: u32, dedup: &impl serde::Serialize) -> Vec<u8> {
        use std::collections::VecDeque;

        use serde::Serialize;

        use crate::bookings::BookingV1;
        use crate::history::EventV5;
        use crate::machine::resource::{NamedLeases, StoredResource};
        use crate::machine::Ended;
        use crate::waiting::Waiter;

        type Old<'a> = StoredResource<
            NamedLeases<'a>,
            &'a [Ended],
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
        let reader = self.log.reader();
        let all: Vec<_> = self
            .all_resources_from(std::ops::Bound::Unbounded)
            .collect();
        let resources = all
            .iter()
            .map(|(name, rs)| {
                let rare = rs.rare();
                let old = Old {
                    registration: rare.registration.as_deref().map(PolicyV1::from),
                    leases: NamedLeases(name, &rs.leases),
                    ended: &rs.ended[..],
                    revision: rs.revision,
                    closed_until_ms: rare.closed_until_ms,
                    history: reader
                        .events(name, &rs.history)
                        .map(|e| EventV5::from(&e))
                        .collect(),
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
    #[cfg(feature = "testkit")]
    pub fn format_5_body(&self) -> Vec<u8> {
        use std::collections::VecDeque;

        use serde::Serialize;

        use crate::bookings::Booking;
        use crate::history::{EventV5, Position};
        use crate::machine::resource::{NamedLeases, StoredResource};
        use crate::machine::Ended;
        use crate::waiting::Waiter;

        type Old<'a> = StoredResource<
            NamedLeases<'a>,
            &'a [Ended],
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
            dedup: &'a crate::dedup::Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: (Nine, Vec<(Name, Nine)>),
            dropped_last: &'a Option<Position>,
        }
        let nine = |o: &crate::quota::Overrides| {
            let mut nine = [None; 9];
            nine.copy_from_slice(&o.0[..9]);
            nine
        };
        let reader = self.log.reader();
        let all: Vec<_> = self
            .all_resources_from(std::ops::Bound::Unbounded)
            .collect();
        let resources = all
            .iter()
            .map(|(name, rs)| {
                let rare = rs.rare();
                let old = Old {
                    registration: rare.registration.as_deref(),
                    leases: NamedLeases(name, &rs.leases),
                    ended: &rs.ended[..],
                    revision: rs.revision,
                    closed_until_ms: rare.closed_until_ms,
                    history: reader
                        .events(name, &rs.history)
                        .map(|e| EventV5::from(&e))
                        .collect(),
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
    #[cfg(feature = "testkit")]
    pub fn format_6_body(&self) -> Vec<u8> {
        use serde::Serialize;

        use crate::dedup::Dedup;
        use crate::history::Position;
        use crate::machine::Resources;
        use crate::quota::Quotas;
        use crate::session::Session;

        #[derive(Serialize)]
        struct Format6<'a> {
            clock: &'a LeaseClock,
            default_policy: &'a Policy,
            resources: Resources<'a>,
            dedup: &'a Dedup,
            dropped_through: Option<(u64, u32)>,
            quotas: &'a Quotas,
            dropped_last: &'a Option<Position>,
            sessions: &'a imbl::OrdMap<u64, Arc<Session>>,
        }
        let old = Format6 {
            clock: &self.clock,
            default_policy: &self.default_policy,
            resources: Resources(self),
            dedup: &self.dedup,
            dropped_through: self.dropped_through,
            quotas: &self.quotas,
            dropped_last: &self.dropped_last,
            sessions: &self.sessions,
        };
        postcard::to_allocvec(&(6u32, old)).expect("plain data encodes")
    }
}
