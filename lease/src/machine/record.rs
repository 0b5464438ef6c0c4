//! History bookkeeping: every event an entry records, and both retention bounds (SPEC §4.11).

use std::sync::Arc;

use super::super::history::{self, Event, Logged};
use super::super::types::Name;
use super::cold::{cold_keeps, ColdStore};
use super::State;

/// Whether a resource of `resources` or `cold` keeps the event `logged` of the event log:
/// the log holds the events the bounds dropped until its cursor passes them. A resource keeps
/// its events from its oldest on, and a resource forgotten and made again starts past its old
/// events.
pub(crate) fn kept_by(resources: &super::ResourceMap, cold: &ColdStore, logged: &Logged) -> bool {
    match resources.get(&logged.resource) {
        Some(rs) => rs
            .history
            .front()
            .is_some_and(|k| k.position() <= logged.event.position()),
        None => cold_keeps(cold, logged),
    }
}

impl State {
    /// Appends an event to a resource's history and enforces both retention bounds; an ad-hoc
    /// resource left with nothing to remember is forgotten.
    pub(crate) fn record(&mut self, index: u64, actor: &str, name: &str, mut event: Event) {
        let wall_ms = self.clock.wall_ms();
        let Some(rs) = self.resources.get_mut(name).map(Arc::make_mut) else {
            return;
        };
        event.revision = index;
        event.at_wall_ms = wall_ms;
        event.actor = Name::from(actor);
        let (new, dropped) = history::push(&mut rs.history, &mut rs.history_bytes, &mut event);
        for old in &dropped {
            self.log.dropped(old.revision, old.cost.into());
            if let Some((revision, seq)) = rs.trimmed_through() {
                self.trims.remove(&(revision, Name::from(name), seq));
            }
            rs.set_trimmed_through(old.position());
            self.trims.insert((old.revision, Name::from(name), old.seq));
        }
        self.effects.events.push((Name::from(name), event.clone()));
        self.log.append(name, event, new.cost.into());
        while self.log.len() > self.history_total as u64
            || self.log.bytes() > self.history_total_bytes
        {
            let (resources, cold) = (&self.resources, &self.cold);
            let Some(oldest) = self.log.pop_oldest(|l| kept_by(resources, cold, l)) else {
                break;
            };
            self.forget_oldest(&oldest);
        }
    }

    /// The global bound drops `oldest`, the oldest event a resource keeps (the oldest
    /// retained); a resource left idle with none is forgotten.
    fn forget_oldest(&mut self, oldest: &Logged) {
        let resource = &oldest.resource;
        let position = oldest.event.position();
        let cost = u32::try_from(history::event_cost(&oldest.event)).unwrap_or(u32::MAX);
        match self.resources.get_mut(resource).map(Arc::make_mut) {
            Some(rs) => {
                let Some(old) = rs.history.pop_front() else {
                    return;
                };
                rs.history_bytes = rs.history_bytes.saturating_sub(old.cost);
                rs.set_trimmed_through(old.position());
                if rs.idle() {
                    let closed_until_ms = rs.rare().closed_until_ms;
                    self.resources.remove(resource);
                    self.indexes.forget_closed(resource, closed_until_ms);
                }
            }
            None => {
                if self.dropped_cold(oldest).is_none() {
                    return;
                }
            }
        }
        self.log.dropped(position.0, cost.into());
        self.dropped_through = self.dropped_through.max(Some(position));
        let position = (position.0, resource.clone(), position.1);
        // What the per-resource bound dropped before this is covered now.
        while self.trims.first().is_some_and(|t| *t <= position) {
            self.trims.pop_first();
        }
        self.dropped_last = self.dropped_last.take().max(Some(position));
    }
}
