//! The replicated record of every lifecycle event of a resource (SPEC §4.11), and its bounds.
//!
//! Each resource keeps its events oldest first. Retention keeps the newest
//! [`PER_RESOURCE`] events of each resource and [`TOTAL`] in all, dropping the oldest first;
//! an ad-hoc resource with no lease and no retained event is forgotten (see `machine`).

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::machine::PushLean;
use super::types::{Lease, LeaseStatus, Metadata, Mode, Name};

/// Newest events kept per resource, and at most what they cost ([`event_cost`]).
pub const PER_RESOURCE: usize = 10_000;
pub const PER_RESOURCE_BYTES: u32 = 8 << 20;
/// Events kept in all, and at most what they cost.
pub const TOTAL: usize = 1_000_000;
pub const TOTAL_BYTES: u64 = 256 << 20;
/// What an event costs in memory besides its metadata: the event and its index entry.
pub const EVENT_BYTES: u64 = 192;
/// The actor of events no caller caused (reclaims).
pub const SYSTEM_ACTOR: &str = "tenure";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventKind {
    Registered,
    Acquired,
    Queued,
    Admitted,
    WaitTimedOut,
    WaitCancelled,
    Renewed,
    Released,
    Transferred,
    Reclaimed,
    Booked,
    BookingCancelled,
}

/// The lease that took over in a transfer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Successor {
    pub holder: Name,
    pub lease_id: Name,
    pub fencing_token: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The index of the entry that caused the event.
    pub revision: u64,
    /// Position among the resource's events of the same revision.
    pub seq: u32,
    pub kind: EventKind,
    /// The leader's wall clock in the entry's stamp.
    pub at_wall_ms: u64,
    pub actor: Name,
    pub holder: Name,
    pub lease_id: Name,
    pub fencing_token: u64,
    pub from: Option<LeaseStatus>,
    pub to: Option<LeaseStatus>,
    /// The metadata an acquire set; empty on other events (a renew cannot change it).
    pub metadata: Metadata,
    pub mode: Mode,
    pub units: u64,
    pub successor: Option<Box<Successor>>,
    /// The session the lease lives on (SPEC §4.24), by the index that names it (`ses_<n>`).
    #[serde(default)]
    pub session: Option<std::num::NonZeroU64>,
}

/// An event as snapshot formats before 6 hold it: without a session.
#[derive(Deserialize)]
#[cfg_attr(any(test, feature = "testkit"), derive(Serialize))]
pub struct EventV5 {
    revision: u64,
    seq: u32,
    kind: EventKind,
    at_wall_ms: u64,
    actor: Name,
    holder: Name,
    lease_id: Name,
    fencing_token: u64,
    from: Option<LeaseStatus>,
    to: Option<LeaseStatus>,
    metadata: Metadata,
    mode: Mode,
    units: u64,
    successor: Option<Box<Successor>>,
}

#[cfg(any(test, feature = "testkit"))]
impl From<&Event> for EventV5 {
    fn from(e: &Event) -> Self {
        EventV5 {
            revision: e.revision,
            seq: e.seq,
            kind: e.kind,
            at_wall_ms: e.at_wall_ms,
            actor: e.actor.clone(),
            holder: e.holder.clone(),
            lease_id: e.lease_id.clone(),
            fencing_token: e.fencing_token,
            from: e.from,
            to: e.to,
            metadata: e.metadata.clone(),
            mode: e.mode,
            units: e.units,
            successor: e.successor.clone(),
        }
    }
}

impl From<EventV5> for Event {
    fn from(old: EventV5) -> Self {
        Event {
            revision: old.revision,
            seq: old.seq,
            kind: old.kind,
            at_wall_ms: old.at_wall_ms,
            actor: old.actor,
            holder: old.holder,
            lease_id: old.lease_id,
            fencing_token: old.fencing_token,
            from: old.from,
            to: old.to,
            metadata: old.metadata,
            mode: old.mode,
            units: old.units,
            successor: old.successor,
            session: None,
        }
    }
}

impl Event {
    /// An event about `lease`; `record` fills in revision, seq, time and actor.
    pub fn about(
        kind: EventKind,
        lease: &Lease,
        from: Option<LeaseStatus>,
        to: Option<LeaseStatus>,
    ) -> Self {
        Event {
            holder: lease.holder.clone(),
            lease_id: lease.lease_id().to_name(),
            fencing_token: lease.fencing_token,
            from,
            to,
            metadata: if kind == EventKind::Acquired {
                lease.metadata.clone()
            } else {
                Metadata::default()
            },
            mode: lease.mode,
            units: lease.units,
            session: lease.session,
            ..Event::of_resource(kind)
        }
    }

    /// An event about the resource itself (registration).
    pub fn of_resource(kind: EventKind) -> Self {
        Event {
            revision: 0,
            seq: 0,
            kind,
            at_wall_ms: 0,
            actor: Name::default(),
            holder: Name::default(),
            lease_id: Name::default(),
            fencing_token: 0,
            from: None,
            to: None,
            metadata: Metadata::default(),
            mode: Mode::Exclusive,
            units: 0,
            successor: None,
            session: None,
        }
    }

    /// Where the event sorts among all events: (revision, seq).
    pub fn position(&self) -> (u64, u32) {
        (self.revision, self.seq)
    }
}

/// Every retained event across resources in delivery order — (revision, resource, seq), the
/// order watches deliver in — so oldest first: what the global bound drops, and what a
/// prefix watch reads from, in O(events read). Derived from the resources' own lists, so it
/// is rebuilt after a snapshot load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    oldest_first: BTreeSet<(u64, Name, u32)>,
    /// What the retained events cost, all together.
    bytes: u64,
}

/// What one retained event costs: [`EVENT_BYTES`] and its metadata, each entry with its
/// overhead (as a principal's metadata quota counts it).
pub fn event_cost(event: &Event) -> u64 {
    EVENT_BYTES + super::quota::metadata_cost(event.metadata.iter())
}

/// What a resource's retained events cost (saturating: the bound is far below).
pub fn bytes_of(events: &VecDeque<Event>) -> u32 {
    let total: u64 = events.iter().map(event_cost).sum();
    u32::try_from(total).unwrap_or(u32::MAX)
}

/// A position in delivery order: (revision, resource, seq).
pub type Position = (u64, Name, u32);

impl Retention {
    pub fn len(&self) -> usize {
        self.oldest_first.len()
    }

    pub fn is_empty(&self) -> bool {
        self.oldest_first.is_empty()
    }

    pub fn rebuild<'a>(
        resources: impl IntoIterator<Item = (&'a Name, &'a VecDeque<Event>)>,
    ) -> Self {
        let mut bytes = 0;
        let mut oldest_first = BTreeSet::new();
        for (name, events) in resources {
            for e in events {
                bytes += event_cost(e);
                oldest_first.insert((e.revision, name.clone(), e.seq));
            }
        }
        Retention {
            oldest_first,
            bytes,
        }
    }

    pub fn added(&mut self, resource: &str, (revision, seq): (u64, u32), cost: u64) {
        if self
            .oldest_first
            .insert((revision, Name::from(resource), seq))
        {
            self.bytes += cost;
        }
    }

    pub fn dropped(&mut self, resource: &str, (revision, seq): (u64, u32), cost: u64) {
        if self
            .oldest_first
            .remove(&(revision, Name::from(resource), seq))
        {
            self.bytes = self.bytes.saturating_sub(cost);
        }
    }

    /// What the retained events cost.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The resource whose event is the oldest retained.
    pub fn oldest(&self) -> Option<&str> {
        self.oldest_first.first().map(|(_, name, _)| name.as_str())
    }

    /// The retained positions from `start` on, in delivery order.
    pub fn from(&self, start: std::ops::Bound<Position>) -> impl Iterator<Item = &Position> {
        self.oldest_first.range((start, std::ops::Bound::Unbounded))
    }
}

/// Appends `event` to a resource's list (whose events cost `bytes`), numbering it within its
/// revision; returns its position and the events the per-resource bounds dropped (never the
/// new one).
pub fn push(
    events: &mut VecDeque<Event>,
    bytes: &mut u32,
    mut event: Event,
) -> ((u64, u32), Vec<Event>) {
    event.seq = match events.back() {
        Some(last) if last.revision == event.revision => last.seq + 1,
        _ => 0,
    };
    let position = event.position();
    *bytes = bytes.saturating_add(event_cost(&event) as u32);
    events.push_lean(event);
    let mut dropped = Vec::new();
    while events.len() > PER_RESOURCE || (*bytes > PER_RESOURCE_BYTES && events.len() > 1) {
        if let Some(old) = events.pop_front() {
            *bytes = bytes.saturating_sub(event_cost(&old) as u32);
            dropped.push(old);
        }
    }
    (position, dropped)
}
