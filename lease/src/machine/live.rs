//! The state in a snapshot of format 9 (rules version 3) or 10 (rules version 4: the same,
//! with the open chunk of cold values after the live section): its live section, what the heap
//! holds (hot resources with where their events are, the cold resources' stubs, the event
//! log's and the exactly-once table's own fields, sessions, groups, quotas), then the archive
//! entries the state reads, as the archive holds them. Writing one copies those entries; it
//! decodes no event, record or cold resource. Reading one puts the entries in an archive
//! and builds on the heap only what the live section names, after checking that every entry
//! it reads is there and decodes; the exactly-once records are counted from their chunks as
//! their index is built again.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::super::dedup::{DedupLoaded, DedupWriting};
use super::super::history::{LogLoaded, LogWriting, Position};
use super::cold::{ColdLoaded, ColdParts, ColdStore, StubList};
use super::resource::{KeptList, LoadedLive, Writing};
use super::{Dedup, EventLog, State};
use crate::archive::{chunk_key, Archive, Space};
use crate::lease_clock::LeaseClock;
use crate::many::Group;
use crate::policy::Policy;
use crate::quota::Quotas;
use crate::session::Session;
use crate::types::Name;

/// The live section as it is written, borrowed from the state.
#[derive(Serialize)]
pub(crate) struct LiveWriting<'a> {
    clock: &'a LeaseClock,
    default_policy: &'a Policy,
    resources: HotResources<'a>,
    dedup: DedupWriting<'a>,
    dropped_through: Option<(u64, u32)>,
    quotas: &'a Quotas,
    dropped_last: &'a Option<Position>,
    sessions: &'a OrdMap<u64, Arc<Session>>,
    groups: &'a OrdMap<u64, Arc<Group>>,
    log: LogWriting<'a>,
    cold: ColdParts<StubList<'a>>,
}

/// The live section as it is read: the same fields, in the same order.
#[derive(Deserialize)]
pub(crate) struct LiveLoaded {
    clock: LeaseClock,
    default_policy: Policy,
    resources: LiveResources,
    dedup: DedupLoaded,
    dropped_through: Option<(u64, u32)>,
    quotas: Quotas,
    dropped_last: Option<Position>,
    sessions: OrdMap<u64, Arc<Session>>,
    groups: OrdMap<u64, Arc<Group>>,
    log: LogLoaded,
    cold: ColdLoaded,
}

/// The hot resources, each with where its events are.
struct HotResources<'a>(&'a super::ResourceMap);

impl Serialize for HotResources<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, rs)| {
            let history = KeptList(&rs.history);
            (name, Writing { name, rs, history })
        }))
    }
}

/// The hot resources, read.
struct LiveResources(super::ResourceMap);

impl<'de> Deserialize<'de> for LiveResources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Resources;
        impl<'de> Visitor<'de> for Resources {
            type Value = LiveResources;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of resources")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut resources = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1 << 16));
                while let Some((name, LoadedLive(rs))) = map.next_entry::<Name, LoadedLive>()? {
                    resources.push((name, Arc::new(rs)));
                }
                // Built at once, in buckets three quarters full.
                Ok(LiveResources(resources.into_iter().collect()))
            }
        }
        deserializer.deserialize_map(Resources)
    }
}

/// What a writer is told of each archive entry (space, key, value); it returns whether to
/// go on.
pub(crate) type VisitEntry<'a> = &'a mut dyn FnMut(Space, &[u8], &[u8]) -> bool;

/// An archive entry the state reads that its archive does not hold: the snapshot is broken.
#[derive(Debug)]
pub struct MissingEntry(pub(crate) Space, pub(crate) u64);

impl fmt::Display for MissingEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry {} of {:?} is not in the snapshot", self.1, self.0)
    }
}

impl std::error::Error for MissingEntry {}

/// Visits the entries numbered `wanted` (ascending) of `space`, in one ordered scan over
/// their range; stops at the first `visit` that returns false. A wanted number the archive
/// does not hold is an error.
fn visit_numbered(
    archive: &dyn Archive,
    space: Space,
    wanted: &[u64],
    visit: VisitEntry<'_>,
) -> Result<bool, MissingEntry> {
    let (Some(first), Some(last)) = (wanted.first(), wanted.last()) else {
        return Ok(true);
    };
    let (from, to) = (chunk_key(*first), chunk_key(*last));
    let mut wanted = wanted.iter().copied().peekable();
    let (mut missing, mut stopped) = (None, false);
    let range = (Bound::Included(&from[..]), Bound::Included(&to[..]));
    archive.scan(space, range.0, range.1, false, &mut |key, value| {
        let Ok(at) = <[u8; 8]>::try_from(key).map(u64::from_be_bytes) else {
            return true;
        };
        match wanted.peek().copied() {
            None => false,
            Some(next) if next > at => true,
            Some(next) if next < at => {
                missing = Some(next);
                false
            }
            Some(_) => {
                wanted.next();
                stopped = !visit(space, key, value);
                !stopped && wanted.peek().is_some()
            }
        }
    });
    if stopped {
        return Ok(false);
    }
    match missing.or_else(|| wanted.next()) {
        Some(seq) => Err(MissingEntry(space, seq)),
        None => Ok(true),
    }
}

/// The numbers of the archive entries the parts of a state read, by space, each ascending.
fn wanted(dedup: &Dedup, log: &EventLog, cold: &ColdStore) -> [(Space, Vec<u64>); SPACES] {
    [
        (Space::ExactlyOnce, dedup.archived_chunks()),
        (Space::Events, log.archived_chunks()),
        (Space::Cold, cold.archived_values()),
        (Space::ColdChunks, cold.archived_chunks()),
    ]
}

/// The archive's spaces a state reads.
const SPACES: usize = 4;

/// Visits the entries `wanted` names, space after space (each in its archive), until `visit`
/// returns false.
fn visit_wanted(
    archives: [&dyn Archive; SPACES],
    wanted: &[(Space, Vec<u64>); SPACES],
    visit: VisitEntry<'_>,
) -> Result<(), MissingEntry> {
    for (archive, (space, numbers)) in archives.into_iter().zip(wanted) {
        if !visit_numbered(archive, *space, numbers, visit)? {
            break;
        }
    }
    Ok(())
}

/// The archive entries a state reads, by space: what a node's own snapshot (the live section
/// alone) needs beside it, and what is added to it to send it whole.
pub struct Wanted([(Space, Vec<u64>); SPACES]);

impl Wanted {
    /// Visits them in `archive`, as [`State::each_archived`] does.
    pub(crate) fn each(
        &self,
        archive: &dyn Archive,
        visit: VisitEntry<'_>,
    ) -> Result<(), MissingEntry> {
        visit_wanted([archive; SPACES], &self.0, visit)
    }
}

impl State {
    /// The live section of format 9.
    pub(crate) fn live(&self) -> LiveWriting<'_> {
        LiveWriting {
            clock: &self.clock,
            default_policy: &self.default_policy,
            resources: HotResources(&self.resources),
            dedup: self.dedup.live(),
            dropped_through: self.dropped_through,
            quotas: &self.quotas,
            dropped_last: &self.dropped_last,
            sessions: &self.sessions,
            groups: &self.groups,
            log: self.log.live(),
            cold: self.cold.live(),
        }
    }

    /// Visits the archive entries this state reads (exactly-once chunks, event chunks, cold
    /// values: each space in key order), until `visit` returns false; an entry the archive
    /// does not hold is an error.
    pub(crate) fn each_archived(&self, visit: VisitEntry<'_>) -> Result<(), MissingEntry> {
        let wanted = wanted(&self.dedup, &self.log, &self.cold);
        visit_wanted(self.archives(), &wanted, visit)
    }

    /// The open chunk of cold values (rules version 4), which format 10 carries.
    pub(crate) fn open_cold_chunk(&self) -> &[Vec<u8>] {
        self.cold.open_chunk()
    }

    /// The archive of each of [`wanted`]'s spaces.
    fn archives(&self) -> [&dyn Archive; SPACES] {
        let cold = self.cold.archive();
        [self.dedup.archive(), self.log.archive(), cold, cold]
    }

    /// The archive entries this state reads ([`Wanted`]).
    pub fn wanted(&self) -> Wanted {
        Wanted(wanted(&self.dedup, &self.log, &self.cold))
    }

    /// Removes from the archive the entries below this state's next numbers that it does
    /// not read: what a node that stopped before removing what an older state forgot left
    /// there (entries from those numbers on, apply writes again as it replays). Safe beside
    /// apply, which writes only from those numbers on. Returns how many went, or the first
    /// entry the state reads that the archive lacks (a node's own snapshot is loaded without
    /// reading every entry: this scan is where a lost one is found).
    pub fn remove_strays(&self) -> Result<usize, MissingEntry> {
        let wanted = wanted(&self.dedup, &self.log, &self.cold);
        let archives = self.archives();
        let ends = [
            self.dedup.next_number(),
            self.log.next_number(),
            self.cold.next_number(),
            self.cold.next_chunk(),
        ];
        let mut removed = 0;
        for ((archive, (space, numbers)), end) in archives.into_iter().zip(&wanted).zip(ends) {
            let mut wanted = numbers.iter().copied().peekable();
            let (mut strays, mut missing) = (Vec::new(), None);
            let end = chunk_key(end);
            archive.scan(
                *space,
                Bound::Unbounded,
                Bound::Excluded(&end),
                false,
                &mut |key, _| {
                    let at = <[u8; 8]>::try_from(key).map(u64::from_be_bytes).ok();
                    while let (Some(next), Some(at)) = (wanted.peek().copied(), at) {
                        if next >= at {
                            break;
                        }
                        missing = missing.or(Some(next));
                        wanted.next();
                    }
                    match at.is_some() && wanted.peek() == at.as_ref() {
                        true => {
                            wanted.next();
                        }
                        false => strays.push(key.to_vec()),
                    }
                    true
                },
            );
            if let Some(lost) = missing.or_else(|| wanted.next()) {
                return Err(MissingEntry(*space, lost));
            }
            removed += strays.len();
            for key in strays {
                archive.remove(*space, &key);
            }
        }
        Ok(removed)
    }

    /// The state a format-9 or 10 live section describes (`open`: the open cold chunk's
    /// slots format 10 carries after it), its entries in `archive`. Checked
    /// whole before it is used: every entry it reads there and decoding, its places within
    /// its chunks, its counts; what its exactly-once records cost is counted from them.
    /// A node's own snapshot (`own`: the live section it wrote, over its own archive) is not
    /// read entry by entry again: only the exactly-once chunks are, to index them.
    pub(crate) fn from_live(
        live: LiveLoaded,
        open: Vec<Vec<u8>>,
        rules: u32,
        archive: Arc<dyn Archive>,
        own: bool,
    ) -> anyhow::Result<State> {
        let mut state = State {
            clock: live.clock,
            resources: live.resources.0,
            dedup: Dedup::from_live(live.dedup, archive.clone()),
            log: EventLog::from_live(live.log, archive.clone()),
            cold: ColdStore::from_live(live.cold, open, archive),
            dropped_through: live.dropped_through,
            quotas: live.quotas,
            dropped_last: live.dropped_last,
            sessions: live.sessions,
            groups: live.groups,
            ..State::with_default_policy(live.default_policy)
        };
        // The exactly-once chunks are read (and checked) by the index built again.
        let mut bad = None;
        if !own {
            let named = state.cold.named_slots();
            state.each_archived(&mut |space, key, value| {
                let decodes = match space {
                    Space::Events => EventLog::decodes(value),
                    Space::Cold => ColdStore::decodes(value),
                    Space::ColdChunks => ColdStore::chunk_holds(&named, key, value),
                    _ => true,
                };
                if !decodes {
                    bad = Some(format!("entry {key:?} of {space:?} does not decode"));
                }
                decodes
            })?;
        }
        let checked = match bad {
            Some(bad) => Err(bad),
            None => (state.log.check_loaded())
                .and_then(|()| state.cold.check_loaded(&state.resources, rules))
                .and_then(|()| state.dedup.index_again()),
        };
        let exactly_once =
            checked.map_err(|why| anyhow::anyhow!("snapshot of the live state: {why}"))?;
        Ok(state.rebuilt_with(Some(exactly_once)).with_rules(rules))
    }
}
