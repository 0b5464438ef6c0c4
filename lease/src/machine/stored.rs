//! The state as a snapshot body holds it: written with each resource's events read from the
//! event log, read with them handed to [`State::restored_with`]; and what makes two states
//! equal (the same events, wherever each keeps them).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserializer, Serialize, Serializer};

use super::super::history::{Event, Reader};
use super::resource::{Loaded, Writing};
use super::{ResourceState, State};
use crate::types::Name;

thread_local! {
    /// The events of the resources a decode has read so far ([`decoding`]).
    static LOADED: RefCell<Vec<(Name, Event)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `decode` and returns what it returned with the events of the resources it read, for
/// [`State::restored_with`]: a resource is read without the state's event log at hand.
pub(crate) fn decoding<T>(decode: impl FnOnce() -> T) -> (T, Vec<(Name, Event)>) {
    LOADED.with(|l| l.borrow_mut().clear());
    let decoded = decode();
    (
        decoded,
        LOADED.with(|l| std::mem::take(&mut *l.borrow_mut())),
    )
}

/// A resource just read, with its events: keeps the state, sets the events aside.
pub(crate) fn loaded(name: &Name, Loaded(rs, events): Loaded) -> Arc<ResourceState> {
    LOADED.with(|l| {
        l.borrow_mut()
            .extend(events.into_iter().map(|e| (name.clone(), e)))
    });
    Arc::new(rs)
}

/// Reads the resources of a snapshot (a map of name to resource), their events set aside.
pub(crate) fn load_resources<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<super::ResourceMap, D::Error> {
    struct Resources;
    impl<'de> Visitor<'de> for Resources {
        type Value = super::ResourceMap;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of resources")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut resources = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1 << 16));
            while let Some((name, resource)) = map.next_entry::<Name, Loaded>()? {
                let rs = loaded(&name, resource);
                resources.push((name, rs));
            }
            // Built at once, in buckets three quarters full.
            Ok(resources.into_iter().collect())
        }
    }
    deserializer.deserialize_map(Resources)
}

/// A resource's events, read from the log as a snapshot writes them.
pub(crate) struct EventsOf<'a> {
    pub(crate) reader: &'a Reader<'a>,
    pub(crate) name: &'a str,
    pub(crate) kept: &'a crate::history::KeptEvents,
}

impl Serialize for EventsOf<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.kept.len()))?;
        for kept in self.kept {
            match self.reader.get(self.name, kept.position()) {
                Some(event) => seq.serialize_element(&event)?,
                None => {
                    return Err(serde::ser::Error::custom(format!(
                        "event {:?} of {} is not in the event log",
                        kept.position(),
                        self.name
                    )))
                }
            }
        }
        seq.end()
    }
}

/// The resources of a state, hot and cold, as a snapshot writes them: each with its events.
pub(crate) struct Resources<'a>(pub(crate) &'a State);

impl Serialize for Resources<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let state = self.0;
        let reader = state.log.reader();
        let mut map = serializer.serialize_map(Some(state.resources.len() + state.cold.len()))?;
        for (name, rs) in state.all_resources_from(std::ops::Bound::Unbounded) {
            let history = EventsOf {
                reader: &reader,
                name: &name,
                kept: &rs.history,
            };
            map.serialize_entry(
                &name,
                &Writing {
                    name: &name,
                    rs: &rs,
                    history,
                },
            )?;
        }
        map.end()
    }
}

/// The replicated fields, in the order the derived `Deserialize` reads them.
impl Serialize for State {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("State", 9)?;
        state.serialize_field("clock", &self.clock)?;
        state.serialize_field("default_policy", &self.default_policy)?;
        state.serialize_field("resources", &Resources(self))?;
        state.serialize_field("dedup", &self.dedup)?;
        state.serialize_field("dropped_through", &self.dropped_through)?;
        state.serialize_field("quotas", &self.quotas)?;
        state.serialize_field("dropped_last", &self.dropped_last)?;
        state.serialize_field("sessions", &self.sessions)?;
        state.serialize_field("groups", &self.groups)?;
        state.end()
    }
}

/// Two states are equal when their fields are and their resources keep the same events,
/// wherever each keeps them (the effects of the last entry are not state, nor are the bounds
/// tests lower).
impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.clock == other.clock
            && self.default_policy == other.default_policy
            && self.same_resources(other)
            && self.dedup == other.dedup
            && self.indexes == other.indexes
            && self.dropped_through == other.dropped_through
            && self.quotas == other.quotas
            && self.dropped_last == other.dropped_last
            && self.trims == other.trims
            && self.sessions == other.sessions
            && self.groups == other.groups
            && self.rules == other.rules
            && self.log.len() == other.log.len()
            && self.log.bytes() == other.log.bytes()
    }
}

impl Eq for State {}

impl State {
    /// Whether every resource, hot or cold, stands the same here and in `other`, its events
    /// included, wherever each keeps them.
    fn same_resources(&self, other: &State) -> bool {
        let (mine, theirs) = (self.log.reader(), other.log.reader());
        let all = std::ops::Bound::Unbounded;
        let mut others = other.all_resources_from(all.clone());
        for (name, rs) in self.all_resources_from(all) {
            let Some((other_name, other_rs)) = others.next() else {
                return false;
            };
            if name != other_name || rs != other_rs {
                return false;
            }
            let same = rs.history.iter().all(|k| {
                let a = mine.get(&name, k.position());
                a.is_some() && a == theirs.get(&name, k.position())
            });
            if !same {
                return false;
            }
        }
        others.next().is_none()
    }
}
