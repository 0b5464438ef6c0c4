//! The replicated state and the one function that changes it.
//!
//! [`apply`] is the only entry that modifies [`State`]. It is pure: the same state and entry
//! give the same reply and the same next state on every node. The entry's log index is the
//! fencing token of whatever it grants, and the lease clock advances only by the leader's stamp.
//! The rules themselves live in `grant` (register, acquire) and `mutate` (renew, release,
//! transfer). Here: the state (this file) and its resources (`resource`), the dispatch
//! (`apply`), expiry and the ends of leases (`reclaim`), history bookkeeping (`record`), the
//! holder and principal index (`index`), snapshots (`snapshot`), and the argument checks the
//! rules share (`checks`).

mod apply;
mod buckets;
mod checks;
mod cold;
mod index;
mod indexes;
mod live;
mod packed;
mod precheck;
mod reclaim;
mod record;
pub(crate) mod resource;
mod snapshot;
mod stored;

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use imbl::OrdMap;
use serde::Deserialize;

use super::dedup::Dedup;
use super::history::{self, Event, EventLog};
use super::lease_clock::{LeaderKey, LeaseClock};
use super::many::Group;
use super::policy::Policy;
use super::quota::Quotas;
use super::session::Session;
use super::types::{Held, Lease, LeaseStatus, LeaseView, Name};
use super::waiting::WaitOutcome;

pub use apply::apply;
pub use checks::check_name;
pub(super) use checks::{check_names, check_ttl};
use indexes::Indexes;
pub(crate) use live::{LiveLoaded, VisitEntry};
pub use live::{MissingEntry, Wanted};
pub use precheck::FRESH_MS;
#[cfg(test)]
pub(crate) use precheck::HELD_MARGIN_MS;
pub use reclaim::RECLAIMS_PER_ENTRY;
pub(crate) use record::kept_by;
use resource::packed;
pub use resource::{Ended, Rare, ResourceState};
#[cfg(feature = "testkit")]
pub(crate) use stored::Resources;
pub(crate) use stored::{decoding, load_resources, loaded};

/// Ended leases remembered per resource, so a late caller learns how its lease ended.
pub const ENDED_KEPT: usize = 8;

/// Appending without doubling. Most resources hold one lease, a few ended ones and a few
/// events; `Vec`'s first growth to four would leave three quarters of each of those
/// allocations empty, about 1.5 KB per resource, a third of the state at a million leases.
/// Growth by half keeps appends amortized O(1).
pub(super) trait PushLean<T> {
    fn push_lean(&mut self, item: T);
}

impl<T> PushLean<T> for Vec<T> {
    fn push_lean(&mut self, item: T) {
        if self.len() == self.capacity() {
            self.reserve_exact((self.len() / 2).max(1));
        }
        self.push(item);
    }
}

impl<T> PushLean<T> for thin_vec::ThinVec<T> {
    fn push_lean(&mut self, item: T) {
        if self.len() == self.capacity() {
            self.reserve_exact((self.len() / 2).max(1));
        }
        self.push(item);
    }
}

impl<A: smallvec::Array> PushLean<A::Item> for smallvec::SmallVec<A> {
    fn push_lean(&mut self, item: A::Item) {
        if self.len() == self.capacity() {
            self.reserve_exact((self.len() / 2).max(1));
        }
        self.push(item);
    }
}

impl<T> PushLean<T> for VecDeque<T> {
    fn push_lean(&mut self, item: T) {
        if self.len() == self.capacity() {
            self.reserve_exact((self.len() / 2).max(1));
        }
        self.push_back(item);
    }
}

/// Where an entry sits in the log: its index (the fencing token of its grants) and its writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryMeta {
    pub index: u64,
    pub leader: LeaderKey,
}

/// What a rule needs to know about the entry it runs in.
pub(super) struct Ctx<'a> {
    pub index: u64,
    pub principal: &'a str,
    pub admin: bool,
    pub require_registration: bool,
    /// The entry's exactly-once key, if it has one.
    pub request_id: Option<&'a str>,
}

impl Ctx<'_> {
    /// Whether what the caller makes for itself is held to no per-principal quota: an admin
    /// of the token file's. With auth off every caller is the admin `anonymous`, held to the
    /// quotas like a client (SPEC §4.17).
    pub fn quota_exempt(&self) -> bool {
        self.admin && self.principal != crate::quota::ANONYMOUS
    }
}

/// The hot resources by name, each shared with a snapshot's copy until apply changes it.
pub(crate) type ResourceMap = buckets::Buckets<Arc<ResourceState>>;

#[derive(Debug, Deserialize)]
pub struct State {
    pub(super) clock: LeaseClock,
    pub(super) default_policy: Policy,
    /// A persistent map with shared resource states: a snapshot takes an O(1) copy and
    /// encodes it while apply goes on, and apply then copies only the buckets and resource
    /// states it changes (`Arc::make_mut`).
    #[serde(deserialize_with = "stored::load_resources")]
    pub(super) resources: ResourceMap,
    pub(crate) dedup: Dedup,
    /// What apply keeps beside the replicated fields to find what time decides next, and
    /// listings (`indexes`): derived, rebuilt on load.
    #[serde(skip)]
    pub(crate) indexes: Indexes,
    /// The retained events of every resource (`history::log`): each resource keeps where
    /// its own are. Written in snapshots inside each resource.
    #[serde(skip)]
    pub(super) log: EventLog,
    /// Idle resources, in the archive (`cold`): written in snapshots among the others.
    #[serde(skip)]
    pub(super) cold: cold::ColdStore,
    /// The (revision, seq) of the newest event the global bound dropped: a resource created
    /// after that (perhaps a forgotten one, used again) may have had events up to it.
    #[serde(default)]
    pub(super) dropped_through: Option<(u64, u32)>,
    /// Quotas per principal: the limits replicated, the usage derived.
    #[serde(default)]
    pub(crate) quotas: Quotas,
    /// The delivery position of the newest event the global bound dropped (it drops in
    /// delivery order): a prefix watch behind it is `compacted`.
    #[serde(default)]
    pub(super) dropped_last: Option<history::Position>,
    /// The delivery positions of what the per-resource bound dropped, newer than
    /// `dropped_last`: the other way a prefix watch can miss events.
    #[serde(skip)]
    pub(super) trims: BTreeSet<history::Position>,
    /// The global bound on retained events: [`history::TOTAL`]; tests lower it.
    #[serde(skip, default = "history_total")]
    pub(super) history_total: usize,
    /// The global bound on what they cost: [`history::TOTAL_BYTES`]; tests lower it.
    #[serde(skip, default = "history_total_bytes")]
    pub(super) history_total_bytes: u64,
    /// What the entry being applied did besides its reply.
    #[serde(skip)]
    pub(super) effects: Effects,
    /// Live sessions (SPEC §4.24) by the index of the entry that created each (`ses_<index>`).
    /// Persistent, like `resources`: a snapshot's copy is O(1).
    #[serde(default)]
    pub(crate) sessions: OrdMap<u64, Arc<Session>>,
    /// Multi-waits (SPEC §4.25) by the index of the entry that queued each.
    #[serde(default)]
    pub(crate) groups: OrdMap<u64, Arc<Group>>,
    /// The rules version the cluster runs (SPEC §4.26, `crate::rules`). Not in the state's
    /// own encoding: a snapshot of format 8 carries it beside the state, format 7 means 1.
    #[serde(skip, default = "first_rules")]
    pub(super) rules: u32,
}

fn first_rules() -> u32 {
    crate::rules::FIRST
}

/// The side effects of applying one entry, for the node to publish: the events it recorded
/// (watchers) and the waits it decided (blocked calls). Cleared when the next entry applies;
/// not part of the replicated state, so two states compare equal whatever their effects.
#[derive(Clone, Debug, Default)]
pub struct Effects {
    /// (resource, event) in the order recorded.
    pub events: Vec<(Name, Event)>,
    pub waits: Vec<WaitOutcome>,
    /// Resources whose capacity may have grown: their waiters are considered.
    pub(super) touched: BTreeSet<Name>,
    /// Leases granted so far by this entry: the `<position>` of the next `lse_<index>_<position>`.
    pub(super) granted: u32,
    /// Due leases this entry reclaimed in its own time (see [`RECLAIMS_PER_ENTRY`]).
    pub(super) reclaimed: usize,
}

impl PartialEq for Effects {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Effects {}

fn history_total() -> usize {
    history::TOTAL
}

fn history_total_bytes() -> u64 {
    history::TOTAL_BYTES
}

impl Default for State {
    fn default() -> Self {
        Self::with_default_policy(Policy::ad_hoc())
    }
}

impl State {
    pub fn with_default_policy(default_policy: Policy) -> Self {
        // One archive for all that the state keeps there.
        let archive: std::sync::Arc<dyn crate::archive::Archive> =
            std::sync::Arc::new(crate::archive::MemArchive::default());
        State {
            clock: LeaseClock::default(),
            default_policy,
            resources: ResourceMap::default(),
            dedup: Dedup::in_archive(archive.clone()),
            indexes: Indexes::default(),
            log: EventLog::in_archive(archive.clone()),
            cold: cold::ColdStore::in_archive(archive),
            dropped_through: None,
            quotas: Quotas::default(),
            dropped_last: None,
            trims: BTreeSet::new(),
            history_total: history::TOTAL,
            history_total_bytes: history::TOTAL_BYTES,
            effects: Effects::default(),
            sessions: OrdMap::new(),
            groups: OrdMap::new(),
            rules: crate::rules::FIRST,
        }
    }

    /// The rules version the cluster runs (SPEC §4.26).
    pub fn rules(&self) -> u32 {
        self.rules
    }

    /// The state with the rules version a snapshot carries beside it.
    pub fn with_rules(mut self, rules: u32) -> Self {
        self.rules = rules;
        self
    }

    /// The resource `name`, created if the state does not know it. A new resource counts as
    /// trimmed through every event the global bound has dropped, so a history cursor kept
    /// from a forgotten resource of the same name answers `compacted`, never a silent gap; a
    /// prefix watch counts that trim as a snapshot loaded here would (`restored`).
    pub(super) fn resource_entry(&mut self, name: &str) -> &mut ResourceState {
        self.warm(name);
        let dropped_through = self.dropped_through;
        if let (false, Some((revision, seq))) = (self.resources.contains_key(name), dropped_through)
        {
            let position = (revision, Name::from(name), seq);
            if Some(&position) > self.dropped_last.as_ref() {
                self.trims.insert(position);
            }
        }
        Arc::make_mut(self.resources.get_or_insert_with(name, || {
            let mut rs = ResourceState::default();
            rs.set_trimmed(dropped_through.and_then(packed));
            Arc::new(rs)
        }))
    }

    /// The quotas: the limits replicated, each principal's usage.
    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    /// The exactly-once records.
    pub fn dedup(&self) -> &Dedup {
        &self.dedup
    }

    /// Moves what this state keeps in its archive (`crate::archive`) into `archive`, an
    /// empty one: a node's own, on disk, for a state just loaded.
    pub fn move_into_archive(&mut self, archive: std::sync::Arc<dyn crate::archive::Archive>) {
        self.dedup.move_into(archive.clone());
        self.log.move_into(archive.clone());
        self.cold.move_into(archive);
    }

    /// What this state has forgotten of its archive since the last cut: taken now, so that
    /// it leaves the archive once every copy that may still read it is gone
    /// ([`Forgotten::remove`]). A node cuts it with the copy it keeps as its snapshot, and
    /// removes it once that snapshot is the one it starts from.
    pub fn forgotten(&self) -> Forgotten {
        use crate::archive::Space;
        let cold = self.cold.take_gone();
        let archive = self.cold.archive_shared();
        Forgotten {
            exactly_once_below: (self.dedup.archive_shared(), self.dedup.forgotten_below()),
            gone: [
                (
                    self.log.archive_shared(),
                    Space::Events,
                    self.log.take_gone(),
                ),
                (archive.clone(), Space::Cold, cold.values),
                (archive, Space::ColdChunks, cold.chunks),
            ],
        }
    }

    pub fn clock(&self) -> &LeaseClock {
        &self.clock
    }

    pub fn live_leases(&self) -> usize {
        self.indexes.live_leases()
    }

    /// Waiters in all waiting rooms.
    pub fn waiters(&self) -> usize {
        self.indexes.waiters()
    }

    /// What the last applied entry did besides its reply: its events and decided waits.
    pub fn effects(&self) -> &Effects {
        &self.effects
    }

    /// Takes the last applied entry's effects (the node publishes them once).
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// The position of the next lease this entry grants: its id is `lse_<index>_<position>`.
    pub(super) fn next_position(&mut self) -> u32 {
        let position = self.effects.granted;
        self.effects.granted += 1;
        position
    }

    /// Events retained in all resources' histories.
    pub fn retained_events(&self) -> usize {
        self.log.len() as usize
    }

    /// The lease-clock instant at which the next live lease is due for reclaim, or the next
    /// wait times out, or a lock delay ends that waiters wait behind.
    pub fn next_due_ms(&self) -> Option<u64> {
        let reclaim = self.indexes.next_lease_due_ms();
        reclaim
            .into_iter()
            .chain(self.next_wait_due_ms())
            .chain(self.next_session_due_ms())
            .min()
    }

    /// Up to `limit` live leases due at or before `at_ms`, as (resource, fencing token).
    pub fn due_by(&self, at_ms: u64, limit: usize) -> Vec<(String, u64)> {
        self.indexes
            .leases_due_by(at_ms)
            .take(limit)
            .filter_map(|(name, lease_id)| {
                let lease = self.resources.get(name)?.lease(lease_id)?;
                Some((name.to_string(), lease.fencing_token))
            })
            .collect()
    }

    /// The policy of `resource` and whether it runs ad hoc, in one lookup.
    pub(super) fn policy_and_ad_hoc(&self, resource: &str) -> (&Policy, bool) {
        match self
            .resources
            .get(resource)
            .and_then(|rs| rs.rare().registration.as_deref())
        {
            Some(policy) => (policy, false),
            None => (&self.default_policy, true),
        }
    }

    pub(super) fn policy_of(&self, resource: &str) -> &Policy {
        match self.resources.get(resource) {
            Some(rs) => self.policy_in(rs),
            None => &self.default_policy,
        }
    }

    /// The policy of resource state `rs`: its registration's, or the default.
    pub(super) fn policy_in<'a>(&'a self, rs: &'a ResourceState) -> &'a Policy {
        rs.rare()
            .registration
            .as_deref()
            .unwrap_or(&self.default_policy)
    }

    /// The live lease `lease` of `resource`, as replies show it.
    pub(super) fn live_view(&self, resource: &str, lease: &Held) -> LeaseView {
        let mut lease = lease.to_lease(resource);
        lease.expires_at_ms = self.expiry_of(&lease);
        timed(lease, &self.clock)
    }

    pub(super) fn ended_view(&self, ended: &Ended) -> LeaseView {
        LeaseView {
            lease: ended.lease.clone(),
            status: ended.status,
            expires_wall_ms: self.clock.wall_of(ended.lease.expires_at_ms),
            remaining_ms: 0,
        }
    }
}

/// What a state had forgotten of its archive when it was cut ([`State::forgotten`]).
pub struct Forgotten {
    /// The exactly-once chunks below this number (in their archive) are passed.
    exactly_once_below: (std::sync::Arc<dyn crate::archive::Archive>, u64),
    /// The event chunks, cold values and chunks of them no longer read, each in its archive.
    gone: [(
        std::sync::Arc<dyn crate::archive::Archive>,
        crate::archive::Space,
        Vec<u64>,
    ); 3],
}

impl Forgotten {
    /// Removes it from the archive. Only once no copy of the state from before the cut reads
    /// the archive any more: on a node, once a snapshot from the cut on is the one it keeps
    /// and no older one is being sent.
    pub fn remove(&self) {
        use crate::archive::{chunk_key, remove_chunks_below, Space};
        let (archive, below) = &self.exactly_once_below;
        remove_chunks_below(&**archive, Space::ExactlyOnce, *below);
        for (archive, space, seqs) in &self.gone {
            for seq in seqs {
                archive.remove(*space, &chunk_key(*seq));
            }
        }
    }
}

/// A live lease (its `expires_at_ms` its own or its session's) as replies show it when the
/// lease clock reads `clock`.
pub(super) fn timed(lease: Lease, clock: &LeaseClock) -> LeaseView {
    let (now_ms, expires_at_ms) = (clock.now_ms(), lease.expires_at_ms);
    LeaseView {
        status: if now_ms < expires_at_ms {
            LeaseStatus::Active
        } else {
            LeaseStatus::Grace
        },
        expires_wall_ms: clock.wall_of(expires_at_ms),
        remaining_ms: expires_at_ms.saturating_sub(now_ms),
        lease,
    }
}
