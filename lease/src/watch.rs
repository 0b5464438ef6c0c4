//! What a watch reads from the state (SPEC §4.12): the retained events of one resource or of
//! every resource under a prefix, after a cursor, in one order that live events follow too.
//!
//! Order: by revision, then resource name, then the event's seq within its resource. An entry
//! that touches several resources records their events under one revision, so a watcher that
//! resumes "after revision R" never splits an entry.

use std::ops::Bound;
use std::sync::Arc;

use super::history::{Event, EventKind};
use super::machine::{kept_by, State};
use super::query::event_bytes;
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

type Scoped = Vec<(Name, Arc<super::machine::ResourceState>)>;

impl State {
    fn scoped(&self, scope: &Scope) -> Scoped {
        match scope {
            Scope::Resource(name) => self
                .resource_ref(name)
                .map(|rs| (Name::from(name.as_str()), rs))
                .into_iter()
                .collect(),
            Scope::Prefix(prefix) => self
                .all_resources_from(Bound::Included(Name::from(prefix.as_str())))
                .take_while(|(name, _)| name.starts_with(prefix.as_str()))
                .collect(),
        }
    }

    /// The newest revision of `scope` retention dropped an event of (0 = none): a watch that
    /// starts before it would miss events. A resource the state forgot (or never saw) may
    /// have had events up to the global watermark.
    fn compacted_through(&self, scope: &Scope, resources: &Scoped) -> u64 {
        resources
            .iter()
            .filter_map(|(_, rs)| rs.trimmed_through())
            .chain(self.forgotten_watermark(scope, resources))
            .max()
            .map_or(0, |(revision, _)| revision)
    }

    /// What the global bound dropped, for a scope that may cover resources the state forgot.
    fn forgotten_watermark(&self, scope: &Scope, resources: &Scoped) -> Option<(u64, u32)> {
        match scope {
            Scope::Resource(_) if !resources.is_empty() => None,
            _ => self.dropped_through,
        }
    }

    /// Where a watch "from the oldest retained event" starts.
    pub fn watch_origin(&self, scope: &Scope) -> Cursor {
        let through = match scope {
            Scope::Resource(_) => self.compacted_through(scope, &self.scoped(scope)),
            Scope::Prefix(prefix) => self.prefix_compacted_through(prefix),
        };
        Cursor::after_revision(through)
    }

    /// The newest revision retention dropped an event of that a watch of `prefix` could have
    /// wanted: what the global bound dropped (any resource), and the per-resource bound's
    /// drops under the prefix. O(per-resource drops newer than the global ones).
    fn prefix_compacted_through(&self, prefix: &str) -> u64 {
        let global = self
            .dropped_last
            .as_ref()
            .map_or(0, |(revision, _, _)| *revision);
        let own = self
            .trims
            .iter()
            .rev()
            .find(|(_, name, _)| name.starts_with(prefix))
            .map_or(0, |(revision, _, _)| *revision);
        global.max(own)
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
        self.watch_page(scope, cursor, kinds, limit, usize::MAX)
            .map(|(events, _)| events)
    }

    /// A page of what a watch delivers next: at most `limit` events and about `max_bytes`
    /// (one event at least), and whether more follow. Reads only what it returns (and, for a
    /// prefix, the events of other resources in between), never every retained event.
    pub fn watch_page(
        &self,
        scope: &Scope,
        cursor: &Cursor,
        kinds: &[EventKind],
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<(Name, Event)>, bool), Rejection> {
        let wanted = |e: &Event| kinds.is_empty() || kinds.contains(&e.kind);
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut take = |name: &Name, e: &Event| -> bool {
            if page.len() >= limit || (bytes >= max_bytes && !page.is_empty()) {
                return false;
            }
            bytes += event_bytes(e);
            page.push((name.clone(), e.clone()));
            true
        };
        let mut more = false;
        match scope {
            Scope::Resource(_) => {
                let resources = self.scoped(scope);
                self.check_compacted(scope, &resources, cursor)?;
                'all: for (name, rs) in resources {
                    // Histories are oldest first: skip what the cursor has passed.
                    let from = rs
                        .history
                        .partition_point(|k| !cursor.before_position(&name, k.position()));
                    let reader = self.log.reader();
                    for e in reader
                        .events(&name, rs.history.range_from(from))
                        .filter(wanted)
                    {
                        if !take(&name, &e) {
                            more = true;
                            break 'all;
                        }
                    }
                }
            }
            Scope::Prefix(prefix) => {
                let global = self
                    .dropped_last
                    .as_ref()
                    .is_some_and(|(revision, name, seq)| {
                        cursor.before_position(name, (*revision, *seq))
                    });
                let own = self
                    .trims
                    .range((start_of(cursor), Bound::Unbounded))
                    .any(|(_, name, _)| name.starts_with(prefix.as_str()));
                if global || own {
                    return Err(Rejection::Compacted {
                        oldest: self.prefix_compacted_through(prefix) + 1,
                    });
                }
                self.log.visit_from(start_of(cursor), |l| {
                    let ours = l.resource.starts_with(prefix.as_str());
                    if !ours || !kept_by(&self.resources, &self.cold, l) || !wanted(&l.event) {
                        return true;
                    }
                    if !take(&l.resource, &l.event) {
                        more = true;
                        return false;
                    }
                    true
                });
            }
        }
        Ok((page, more))
    }

    /// `compacted` if retention dropped an event of `resources` after `cursor` — compared by
    /// position, so a cursor in the middle of a revision notices a drop later in it too.
    fn check_compacted(
        &self,
        scope: &Scope,
        resources: &Scoped,
        cursor: &Cursor,
    ) -> Result<(), Rejection> {
        let dropped_after_cursor = resources.iter().any(|(name, rs)| {
            rs.trimmed_through()
                .is_some_and(|p| cursor.before_position(name, p))
        }) || self
            .forgotten_watermark(scope, resources)
            .is_some_and(|(revision, _)| revision > cursor.revision);
        if dropped_after_cursor {
            return Err(Rejection::Compacted {
                oldest: self.compacted_through(scope, resources) + 1,
            });
        }
        Ok(())
    }
}

/// The first delivery position after `cursor`.
fn start_of(cursor: &Cursor) -> Bound<(u64, Name, u32)> {
    match &cursor.within {
        None => Bound::Included((cursor.revision.saturating_add(1), Name::default(), 0)),
        Some((name, seq)) => Bound::Excluded((cursor.revision, Name::from(name.as_str()), *seq)),
    }
}
