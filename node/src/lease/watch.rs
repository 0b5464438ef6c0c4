//! What a watch reads from the state (SPEC §4.12): the retained events of one resource or of
//! every resource under a prefix, after a cursor, in one order that live events follow too.
//!
//! Order: by revision, then resource name, then the event's seq within its resource. An entry
//! that touches several resources records their events under one revision, so a watcher that
//! resumes "after revision R" never splits an entry.

use std::ops::Bound;

use super::history::{Event, EventKind};
use super::machine::State;
use super::types::{Name, Rejection};

/// What a watch covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Resource(String),
    /// Every resource whose name starts with this (empty = all).
    Prefix(String),
}

impl Scope {
    pub fn covers(&self, resource: &str) -> bool {
        match self {
            Scope::Resource(name) => name == resource,
            Scope::Prefix(prefix) => resource.starts_with(prefix.as_str()),
        }
    }
}

/// Where a watcher is: every event up to here was delivered (or filtered out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub revision: u64,
    /// Within `revision`: the resource and seq of the last event delivered; None = the whole
    /// revision is behind the cursor.
    pub within: Option<(String, u32)>,
}

impl Ord for Cursor {
    /// Further along is greater; the end of a revision is past every event in it.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |c: &Cursor| (c.revision, c.within.is_none(), c.within.clone());
        key(self).cmp(&key(other))
    }
}

impl PartialOrd for Cursor {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Cursor {
    /// Every event of revisions up to and including `revision`.
    pub fn after_revision(revision: u64) -> Self {
        Cursor {
            revision,
            within: None,
        }
    }

    pub fn at(resource: &str, event: &Event) -> Self {
        Cursor {
            revision: event.revision,
            within: Some((resource.to_string(), event.seq)),
        }
    }

    /// Whether `event` of `resource` comes after the cursor.
    pub fn before(&self, resource: &str, event: &Event) -> bool {
        self.before_position(resource, event.position())
    }

    /// Whether the event of `resource` at (revision, seq) comes after the cursor.
    pub fn before_position(&self, resource: &str, (revision, seq): (u64, u32)) -> bool {
        match &self.within {
            None => revision > self.revision,
            Some((name, at)) => (revision, resource, seq) > (self.revision, name.as_str(), *at),
        }
    }
}

/// The order events are delivered in.
pub fn order_key<'a>(resource: &'a str, event: &Event) -> (u64, &'a str, u32) {
    (event.revision, resource, event.seq)
}

type Scoped<'a> = Vec<(&'a Name, &'a super::machine::ResourceState)>;

impl State {
    fn scoped(&self, scope: &Scope) -> Scoped<'_> {
        match scope {
            Scope::Resource(name) => self
                .resources
                .get_key_value(name.as_str())
                .map(|(name, rs)| (name, &**rs))
                .into_iter()
                .collect(),
            Scope::Prefix(prefix) => self
                .resources
                .range::<_, Name>((
                    Bound::Included(Name::from(prefix.as_str())),
                    Bound::Unbounded,
                ))
                .take_while(|(name, _)| name.starts_with(prefix.as_str()))
                .map(|(name, rs)| (name, &**rs))
                .collect(),
        }
    }

    /// The newest revision of `scope` retention dropped an event of (0 = none): a watch that
    /// starts before it would miss events. A resource the state forgot (or never saw) may
    /// have had events up to the global watermark.
    fn compacted_through(&self, scope: &Scope, resources: &Scoped<'_>) -> u64 {
        resources
            .iter()
            .filter_map(|(_, rs)| rs.trimmed_through())
            .chain(self.forgotten_watermark(scope, resources))
            .max()
            .map_or(0, |(revision, _)| revision)
    }

    /// What the global bound dropped, for a scope that may cover resources the state forgot.
    fn forgotten_watermark(&self, scope: &Scope, resources: &Scoped<'_>) -> Option<(u64, u32)> {
        match scope {
            Scope::Resource(_) if !resources.is_empty() => None,
            _ => self.dropped_through,
        }
    }

    /// Where a watch "from the oldest retained event" starts.
    pub fn watch_origin(&self, scope: &Scope) -> Cursor {
        Cursor::after_revision(self.compacted_through(scope, &self.scoped(scope)))
    }

    /// Up to `limit` retained events of `scope` after `cursor`, in delivery order, or
    /// `compacted` with the oldest revision still complete when retention dropped any event
    /// the watcher has not seen.
    pub fn watch_events(
        &self,
        scope: &Scope,
        cursor: &Cursor,
        kinds: &[EventKind],
        limit: usize,
    ) -> Result<Vec<(Name, Event)>, Rejection> {
        let resources = self.scoped(scope);
        // Compacted if retention dropped an event after the cursor — compared by position, so
        // a cursor in the middle of a revision notices a drop later in that revision too.
        let dropped_after_cursor = resources.iter().any(|(name, rs)| {
            rs.trimmed_through()
                .is_some_and(|p| cursor.before_position(name, p))
        }) || self
            .forgotten_watermark(scope, &resources)
            .is_some_and(|(revision, _)| revision > cursor.revision);
        if dropped_after_cursor {
            return Err(Rejection::Compacted {
                oldest: self.compacted_through(scope, &resources) + 1,
            });
        }
        let mut events: Vec<(&Name, &Event)> = Vec::new();
        for (name, rs) in resources {
            // Histories are oldest first: skip what the cursor has passed.
            let from = rs.history.partition_point(|e| !cursor.before(name, e));
            events.extend(
                rs.history
                    .range(from..)
                    .filter(|e| kinds.is_empty() || kinds.contains(&e.kind))
                    .map(|e| (name, e)),
            );
        }
        events.sort_by(|a, b| order_key(a.0, a.1).cmp(&order_key(b.0, b.1)));
        events.truncate(limit);
        Ok(events
            .into_iter()
            .map(|(name, e)| (name.clone(), e.clone()))
            .collect())
    }
}
