//! The replicated record of every lifecycle event of a resource (SPEC §4.11), and its bounds.
//!
//! Each resource keeps where its events are, oldest first ([`Kept`]); the events themselves
//! are in the event log in the archive (`log`). Retention keeps the newest [`PER_RESOURCE`]
//! events of each resource and [`TOTAL`] in all, dropping the oldest first; an ad-hoc
//! resource with no lease and no retained event is forgotten (see `machine`).

mod kept;
mod log;

use serde::{Deserialize, Serialize};

use super::types::{Held, LeaseStatus, Metadata, Mode, Name};
pub use kept::{KeptEvents, KeptIter};
pub use log::Kept;
#[cfg(test)]
pub(crate) use log::CHUNK;
pub(crate) use log::{EventLog, Logged, Reader};
pub(crate) use log::{LogLoaded, LogWriting};

/// Newest events kept per resource, and at most what they cost ([`event_cost`]).
pub const PER_RESOURCE: usize = 10_000;
pub const PER_RESOURCE_BYTES: u32 = 8 << 20;
/// Events kept in all, and at most what they cost.
pub const TOTAL: usize = 1_000_000;
pub const TOTAL_BYTES: u64 = 256 << 20;
/// What an event counts against the bounds besides its metadata: what it cost on the heap
/// when events were kept there. Replies depend on what the bounds keep, so it stays.
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
        lease: &Held,
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

/// What one retained event costs: [`EVENT_BYTES`] and its metadata, each entry with its
/// overhead (as a principal's metadata quota counts it).
pub fn event_cost(event: &Event) -> u64 {
    EVENT_BYTES + super::quota::metadata_cost(event.metadata.iter())
}

/// A position in delivery order: (revision, resource, seq).
pub type Position = (u64, Name, u32);

/// Numbers `event` within its revision after a resource's newest kept event, and keeps it
/// there (its events cost `bytes`); returns where it is and the oldest events the
/// per-resource bounds dropped (never the new one).
pub fn push(kept: &mut KeptEvents, bytes: &mut u32, event: &mut Event) -> (Kept, Vec<Kept>) {
    event.seq = match kept.back() {
        Some(last) if last.revision == event.revision => last.seq + 1,
        _ => 0,
    };
    let cost = event_cost(event);
    let new = Kept {
        revision: event.revision,
        seq: event.seq,
        cost: u32::try_from(cost).unwrap_or(u32::MAX),
    };
    *bytes = bytes.saturating_add(new.cost);
    kept.push_lean(new);
    let mut dropped = Vec::new();
    while kept.len() > PER_RESOURCE || (*bytes > PER_RESOURCE_BYTES && kept.len() > 1) {
        if let Some(old) = kept.pop_front() {
            *bytes = bytes.saturating_sub(old.cost);
            dropped.push(old);
        }
    }
    (new, dropped)
}
