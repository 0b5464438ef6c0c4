//! One resource's state: its live and ended leases, its history, and what most resources never
//! use (a registration, a lock delay, waiters, bookings) behind one pointer; and the form
//! snapshots store it in.

use std::collections::VecDeque;
use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use thin_vec::ThinVec;

use super::super::bookings::{Booking, BookingV1};
use super::super::history::{self, Event, EventV5, Kept, KeptEvents};
use super::super::policy::{Policy, PolicyV1};
use super::super::types::{Held, Lease, LeaseId, LeaseStatus, Name};
use super::super::waiting::Waiter;

/// A tenure that ended, so its holder learns how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub lease: Lease,
    pub status: LeaseStatus,
    pub at_ms: u64,
    /// Transfers: the fencing token of the lease that took over.
    #[serde(default)]
    pub superseded_by: Option<u64>,
}

/// One resource. Its one live lease (most resources hold one) and its one retained event
/// (most keep their grant's) are inline; what most resources never use (a registration, a
/// lock delay, waiters, bookings) sits behind one pointer. At a million one-lease resources,
/// one allocation of 224 bytes each, where three took 256. Stored (snapshots) with every
/// field in place, as [`StoredResource`].
#[derive(Clone, Debug, Default)]
pub struct ResourceState {
    /// Live leases (active or in grace), in grant order, without the resource's name.
    pub leases: Leases,
    /// The newest ended leases, oldest first, at most [`ENDED_KEPT`](super::ENDED_KEPT): a
    /// `ThinVec`, one word, no allocation while empty (most live resources have none).
    pub ended: ThinVec<Ended>,
    /// The index of the newest entry that changed this resource.
    pub revision: u64,
    /// Where its retained events are in the state's event log, oldest first (the first inline).
    pub history: KeptEvents,
    /// The (revision, seq) of the newest event retention dropped: paging past it is
    /// `compacted` ([`ResourceState::trimmed_through`]). Not rare: once the global bound drops
    /// events, every new resource starts with it. Revisions are log indexes, never 0, so this
    /// is 16 bytes instead of 24, and the whole state fits an allocation of 224 with its `Arc`.
    trimmed_revision: Option<NonZeroU64>,
    trimmed_seq: u32,
    /// What the retained events cost ([`history::event_cost`]): bounded per resource by
    /// [`history::PER_RESOURCE_BYTES`]. Derived (counted again when a snapshot loads).
    pub(crate) history_bytes: u32,
    rare: Option<Box<Rare>>,
}

/// A resource's live leases. Most resources hold one: it lives inside the resource, where a
/// `Vec` would put it in an allocation of its own.
pub type Leases = SmallVec<[Held; 1]>;

// With its `Arc`'s two counts, mimalloc's class of 224 bytes: one allocation for a resource,
// its one lease and its one event's position, where the resource (112), its lease (128) and
// the position (16) took three, 256 bytes.
const _: () = assert!(std::mem::size_of::<ResourceState>() <= 208);

/// A (revision, seq) position as [`ResourceState`] keeps it.
pub(super) fn packed((revision, seq): (u64, u32)) -> Option<(NonZeroU64, u32)> {
    NonZeroU64::new(revision).map(|revision| (revision, seq))
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rare {
    /// The registered policy; None = ad hoc, under the default policy.
    pub registration: Option<Box<Policy>>,
    /// Lock delay: nothing is granted before this lease-clock instant.
    pub closed_until_ms: u64,
    /// The waiting room, head first.
    pub waiters: VecDeque<Waiter>,
    /// Bookings whose window has not ended, by start.
    pub bookings: Vec<Booking>,
}

const NOTHING_RARE: &Rare = &Rare {
    registration: None,
    closed_until_ms: 0,
    waiters: VecDeque::new(),
    bookings: Vec::new(),
};

impl ResourceState {
    pub fn lease(&self, lease_id: LeaseId) -> Option<&Held> {
        self.leases.iter().find(|l| l.lease_id() == lease_id)
    }

    /// The (revision, seq) of the newest event retention dropped.
    pub fn trimmed_through(&self) -> Option<(u64, u32)> {
        self.trimmed_revision
            .map(|revision| (revision.get(), self.trimmed_seq))
    }

    pub(crate) fn set_trimmed_through(&mut self, position: (u64, u32)) {
        self.set_trimmed(packed(position));
    }

    pub(super) fn set_trimmed(&mut self, trimmed: Option<(NonZeroU64, u32)>) {
        self.trimmed_revision = trimmed.map(|(revision, _)| revision);
        self.trimmed_seq = trimmed.map_or(0, |(_, seq)| seq);
    }

    /// The registration, lock delay, waiting room and bookings.
    pub fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(NOTHING_RARE)
    }

    /// The same, to change.
    pub fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_default()
    }

    /// Nothing to remember: an ad-hoc resource in this state is forgotten.
    pub(super) fn idle(&self) -> bool {
        let rare = self.rare();
        rare.registration.is_none()
            && self.leases.is_empty()
            && self.history.is_empty()
            && rare.waiters.is_empty()
            && rare.bookings.is_empty()
    }
}

impl PartialEq for ResourceState {
    fn eq(&self, other: &Self) -> bool {
        self.leases == other.leases
            && self.ended == other.ended
            && self.revision == other.revision
            && self.history == other.history
            && self.trimmed_through() == other.trimmed_through()
            && self.rare() == other.rare()
    }
}

impl Eq for ResourceState {}

/// A resource as snapshots store it: every field in place, in this order (postcard's encoding
/// follows it; format 2's JSON names the fields).
#[derive(Serialize, Deserialize)]
pub(crate) struct StoredResource<L, E, H, P, W, B> {
    pub(crate) registration: Option<P>,
    pub(crate) leases: L,
    pub(crate) ended: E,
    pub(crate) revision: u64,
    pub(crate) closed_until_ms: u64,
    pub(crate) history: H,
    #[serde(default)]
    pub(crate) trimmed_through: Option<(u64, u32)>,
    #[serde(default)]
    pub(crate) waiters: W,
    #[serde(default)]
    pub(crate) bookings: B,
}

/// A resource's live leases as snapshots store them: each with the resource's name in place.
pub(crate) struct NamedLeases<'a>(pub(crate) &'a Name, pub(crate) &'a [Held]);

impl Serialize for NamedLeases<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.1.iter().map(|held| held.named(self.0)))
    }
}

/// A stored live lease, read without its resource's name (the resource map's key holds it).
pub(crate) struct Unnamed(Held);

impl<'de> Deserialize<'de> for Unnamed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Lease::deserialize(deserializer).map(|lease| Unnamed(lease.held))
    }
}

/// A resource as a snapshot writes it, named `name`, with its events (read from the state's
/// event log).
pub(crate) struct Writing<'a, H> {
    pub(crate) name: &'a Name,
    pub(crate) rs: &'a ResourceState,
    pub(crate) history: H,
}

impl<H: Serialize> Serialize for Writing<'_, H> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (rs, rare) = (self.rs, self.rs.rare());
        StoredResource {
            registration: rare.registration.as_deref(),
            leases: NamedLeases(self.name, &rs.leases),
            ended: &rs.ended,
            revision: rs.revision,
            closed_until_ms: rare.closed_until_ms,
            history: &self.history,
            trimmed_through: rs.trimmed_through(),
            waiters: &rare.waiters,
            bookings: &rare.bookings,
        }
        .serialize(serializer)
    }
}

/// A stored resource with its registration of type `P`, bookings of type `B` and events of
/// type `E`: the current ones, or those of an older snapshot format.
type Stored<P, B, E> =
    StoredResource<Vec<Unnamed>, ThinVec<Ended>, Vec<E>, Box<P>, VecDeque<Waiter>, Vec<B>>;

/// A resource as a snapshot holds it, read: its state, and its events for the state's event
/// log (`State::restored` puts them there).
pub(crate) struct Loaded(pub(crate) ResourceState, pub(crate) Vec<Event>);

impl<'de> Deserialize<'de> for Loaded {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Stored::<Policy, Booking, Event>::deserialize(deserializer).map(ResourceState::from_stored)
    }
}

/// Where a resource's events are, as a snapshot of format 9 holds it: (revision, seq, cost)
/// of each, oldest first.
pub(crate) struct KeptList<'a>(pub(crate) &'a KeptEvents);

impl Serialize for KeptList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|k| (k.revision, k.seq, k.cost)))
    }
}

/// A resource as a snapshot of format 9 holds it, read: where its events are, not the events.
pub(crate) struct LoadedLive(pub(crate) ResourceState);

impl<'de> Deserialize<'de> for LoadedLive {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = Stored::<Policy, Booking, (u64, u32, u32)>::deserialize(deserializer)?;
        let (mut rs, kept) = ResourceState::parts_of(stored);
        rs.history_bytes = kept
            .iter()
            .fold(0u32, |bytes, &(_, _, cost)| bytes.saturating_add(cost));
        // Exactly sized, as apply keeps it (`PushLean`): not a first growth to four.
        rs.history = KeptEvents::from_exact(kept.into_iter().map(|(revision, seq, cost)| Kept {
            revision,
            seq,
            cost,
        }));
        Ok(LoadedLive(rs))
    }
}

/// A resource as snapshot format 5 holds it (events without a session).
pub(crate) struct ResourceStateV5(pub(crate) Loaded);

impl<'de> Deserialize<'de> for ResourceStateV5 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Stored::<Policy, Booking, EventV5>::deserialize(deserializer)
            .map(|stored| ResourceStateV5(ResourceState::from_stored(stored)))
    }
}

/// A resource as snapshot formats 3 and 4 hold it (policies without `bookable` and
/// `max_holders`, bookings that deny earlier leases), read into the current form.
pub(crate) struct ResourceStateV4(pub(crate) Loaded);

impl<'de> Deserialize<'de> for ResourceStateV4 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Stored::<PolicyV1, BookingV1, EventV5>::deserialize(deserializer)
            .map(|stored| ResourceStateV4(ResourceState::from_stored(stored)))
    }
}

impl ResourceState {
    fn from_stored<P: Into<Policy>, B: Into<Booking>, E: Into<Event>>(
        stored: Stored<P, B, E>,
    ) -> Loaded {
        let (rs, events) = ResourceState::parts_of(stored);
        Loaded(rs, events.into_iter().map(Into::into).collect())
    }

    /// A stored resource, and its history as stored (events, or where they are).
    fn parts_of<P: Into<Policy>, B: Into<Booking>, H>(stored: Stored<P, B, H>) -> (Self, Vec<H>) {
        let rare = Rare {
            registration: stored.registration.map(|p| Box::new((*p).into())),
            closed_until_ms: stored.closed_until_ms,
            waiters: stored.waiters,
            bookings: stored.bookings.into_iter().map(Into::into).collect(),
        };
        let mut rs = ResourceState {
            // An `Unnamed` is a `Held`: one lease stays inline.
            leases: stored
                .leases
                .into_iter()
                .map(|Unnamed(held)| held)
                .collect(),
            ended: stored.ended,
            revision: stored.revision,
            history: KeptEvents::default(),
            trimmed_revision: None,
            trimmed_seq: 0,
            history_bytes: 0,
            rare: (rare != *NOTHING_RARE).then(|| Box::new(rare)),
        };
        rs.set_trimmed(stored.trimmed_through.and_then(packed));
        (rs, stored.history)
    }

    /// Keeps `event` (of this resource, loaded) where it is in the log, as apply did.
    pub(crate) fn keep_loaded(&mut self, event: &Event) -> Kept {
        let kept = Kept {
            revision: event.revision,
            seq: event.seq,
            cost: u32::try_from(history::event_cost(event)).unwrap_or(u32::MAX),
        };
        self.history_bytes = self.history_bytes.saturating_add(kept.cost);
        self.history.push_lean(kept);
        kept
    }
}
