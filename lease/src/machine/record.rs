//! History bookkeeping: every event an entry records, and both retention bounds (SPEC §4.11).

use std::sync::Arc;

use super::super::history::{self, Event};
use super::super::types::Name;
use super::State;

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
        let cost = history::event_cost(&event);
        let (position, dropped) = history::push(&mut rs.history, &mut rs.history_bytes, event);
        if let Some(recorded) = rs.history.back() {
            self.effects
                .events
                .push((Name::from(name), recorded.clone()));
        }
        self.retention.added(name, position, cost);
        for old in &dropped {
            self.retention
                .dropped(name, old.position(), history::event_cost(old));
            if let Some((revision, seq)) = rs.trimmed_through() {
                self.trims.remove(&(revision, Name::from(name), seq));
            }
            rs.set_trimmed_through(old.position());
            self.trims.insert((old.revision, Name::from(name), old.seq));
        }
        while self.retention.len() > self.history_total
            || self.retention.bytes() > self.history_total_bytes
        {
            let Some(oldest) = self.retention.oldest().map(str::to_string) else {
                break;
            };
            let Some(rs) = self.resources.get_mut(oldest.as_str()).map(Arc::make_mut) else {
                break;
            };
            match rs.history.pop_front() {
                Some(old) => {
                    let cost = history::event_cost(&old);
                    rs.history_bytes = rs.history_bytes.saturating_sub(cost as u32);
                    self.retention.dropped(&oldest, old.position(), cost);
                    rs.set_trimmed_through(old.position());
                    self.dropped_through = self.dropped_through.max(Some(old.position()));
                    let position = (old.revision, Name::from(oldest.as_str()), old.seq);
                    // What the per-resource bound dropped before this is covered now.
                    while self.trims.first().is_some_and(|t| *t <= position) {
                        self.trims.pop_first();
                    }
                    self.dropped_last = self.dropped_last.take().max(Some(position));
                }
                None => break,
            }
            if rs.idle() {
                let closed_until_ms = rs.rare().closed_until_ms;
                self.resources.remove(oldest.as_str());
                self.indexes.forget_closed(&oldest.into(), closed_until_ms);
            }
        }
    }
}
