//! The replicated state and the one function that changes it.
//!
//! [`apply`] is the only entry that modifies [`State`]. It is pure: the same state and entry
//! give the same reply and the same next state on every node. The entry's log index is the
//! fencing token of whatever it grants, and the lease clock advances only by the leader's stamp.
//! The rules themselves live in `grant` (register, acquire) and `mutate` (renew, release,
//! transfer); this file holds the state, the dispatch, expiry and history bookkeeping.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::num::NonZeroU64;
use std::sync::Arc;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use super::bookings::{Booking, BookingV1};
use super::command::{BookOp, Command, CreateOp, Op, Proposal, Reply};
use super::dedup::{Dedup, Seen};
use super::history::{self, Event, EventKind, Retention};
use super::lease_clock::{LeaderKey, LeaseClock};
use super::policy::{self, Policy, PolicyV1};
use super::quota::{Quota, Quotas};
use super::types::{lease_order, Lease, LeaseStatus, LeaseView, Name, Rejection};
use super::waiting::{wait_due_key, WaitOutcome, Waiter};

/// Ended leases remembered per resource, so a late caller learns how its lease ended.
pub const ENDED_KEPT: usize = 8;

/// Due leases one entry reclaims at most, besides those of the resources its commands name: a
/// mass expiry is reclaimed over several entries (the leader proposes a `Reclaim` while any
/// lease is due), so that no entry holds the state for long. A lease past its grace that
/// waits for its turn holds nothing: a command on its resource reclaims it first, and reads
/// judge expiry by the clock.
pub const RECLAIMS_PER_ENTRY: usize = 1024;

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

/// One resource. What most resources never use (a registration, a lock delay, waiters,
/// bookings) sits behind one pointer: at a million one-lease resources that
/// is ≈ 100 bytes each. Stored (snapshots) with every field in place, as [`StoredResource`].
#[derive(Clone, Debug, Default)]
pub struct ResourceState {
    /// Live leases (active or in grace), in grant order.
    pub leases: Vec<Lease>,
    /// The newest ended leases, oldest first, at most [`ENDED_KEPT`] (a `Vec`: a few entries,
    /// and a word smaller than a `VecDeque`).
    pub ended: Vec<Ended>,
    /// The index of the newest entry that changed this resource.
    pub revision: u64,
    /// Retained events, oldest first.
    pub history: VecDeque<Event>,
    /// The (revision, seq) of the newest event retention dropped: paging past it is
    /// `compacted` ([`ResourceState::trimmed_through`]). Not rare: once the global bound drops
    /// events, every new resource starts with it. Revisions are log indexes, never 0, so this
    /// is 16 bytes instead of 24, and the whole state fits an allocation of 128 with its `Arc`.
    trimmed_revision: Option<NonZeroU64>,
    trimmed_seq: u32,
    /// What the retained events cost ([`history::event_cost`]): bounded per resource by
    /// [`history::PER_RESOURCE_BYTES`]. Derived (counted again when a snapshot loads).
    pub(super) history_bytes: u32,
    rare: Option<Box<Rare>>,
}

/// A (revision, seq) position as [`ResourceState`] keeps it.
fn packed((revision, seq): (u64, u32)) -> Option<(NonZeroU64, u32)> {
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
    pub fn lease(&self, lease_id: &str) -> Option<&Lease> {
        self.leases.iter().find(|l| l.lease_id == lease_id)
    }

    /// The (revision, seq) of the newest event retention dropped.
    pub fn trimmed_through(&self) -> Option<(u64, u32)> {
        self.trimmed_revision
            .map(|revision| (revision.get(), self.trimmed_seq))
    }

    pub(super) fn set_trimmed_through(&mut self, position: (u64, u32)) {
        self.set_trimmed(packed(position));
    }

    fn set_trimmed(&mut self, trimmed: Option<(NonZeroU64, u32)>) {
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
    fn idle(&self) -> bool {
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
struct StoredResource<L, E, H, P, W, B> {
    registration: Option<P>,
    leases: L,
    ended: E,
    revision: u64,
    closed_until_ms: u64,
    history: H,
    #[serde(default)]
    trimmed_through: Option<(u64, u32)>,
    #[serde(default)]
    waiters: W,
    #[serde(default)]
    bookings: B,
}

impl Serialize for ResourceState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let rare = self.rare();
        StoredResource {
            registration: rare.registration.as_deref(),
            leases: &self.leases,
            ended: &self.ended,
            revision: self.revision,
            closed_until_ms: rare.closed_until_ms,
            history: &self.history,
            trimmed_through: self.trimmed_through(),
            waiters: &rare.waiters,
            bookings: &rare.bookings,
        }
        .serialize(serializer)
    }
}

/// A stored resource with its registration of type `P` and bookings of type `B`: the
/// current ones, or those of an older snapshot format.
type Stored<P, B> =
    StoredResource<Vec<Lease>, Vec<Ended>, VecDeque<Event>, Box<P>, VecDeque<Waiter>, Vec<B>>;

impl<'de> Deserialize<'de> for ResourceState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Stored::<Policy, Booking>::deserialize(deserializer).map(ResourceState::from_stored)
    }
}

/// A resource as snapshot formats 3 and 4 hold it (policies without `bookable` and
/// `max_holders`, bookings that deny earlier leases), read into the current form.
pub(super) struct ResourceStateV4(pub(super) ResourceState);

impl<'de> Deserialize<'de> for ResourceStateV4 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Stored::<PolicyV1, BookingV1>::deserialize(deserializer)
            .map(|stored| ResourceStateV4(ResourceState::from_stored(stored)))
    }
}

impl ResourceState {
    fn from_stored<P: Into<Policy>, B: Into<Booking>>(stored: Stored<P, B>) -> ResourceState {
        let rare = Rare {
            registration: stored.registration.map(|p| Box::new((*p).into())),
            closed_until_ms: stored.closed_until_ms,
            waiters: stored.waiters,
            bookings: stored.bookings.into_iter().map(Into::into).collect(),
        };
        let history_bytes = history::bytes_of(&stored.history);
        let mut rs = ResourceState {
            leases: stored.leases,
            ended: stored.ended,
            revision: stored.revision,
            history: stored.history,
            trimmed_revision: None,
            trimmed_seq: 0,
            history_bytes,
            rare: (rare != *NOTHING_RARE).then(|| Box::new(rare)),
        };
        rs.set_trimmed(stored.trimmed_through.and_then(packed));
        rs
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub(super) clock: LeaseClock,
    pub(super) default_policy: Policy,
    /// A persistent map with shared resource states: a snapshot takes an O(1) copy and
    /// encodes it while apply goes on, and apply then copies only the map nodes and resource
    /// states it changes (`Arc::make_mut`).
    pub(super) resources: OrdMap<Name, Arc<ResourceState>>,
    pub(crate) dedup: Dedup,
    /// (expires_at + grace, resource, lease_id) of every live lease: the next reclaim is first.
    #[serde(skip)]
    pub(super) due: BTreeSet<(u64, Name, Name)>,
    #[serde(skip)]
    pub(super) retention: Retention,
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
    /// (timeout, resource, wait_id) of every waiter: the next wait timeout is first.
    #[serde(skip)]
    pub(super) wait_due: BTreeSet<(u64, Name, u64)>,
    /// (lock delay end, resource) of resources a reclaim closed, until the delay ends: they
    /// admit their waiters then.
    #[serde(skip)]
    pub(super) reopen: BTreeSet<(u64, Name)>,
    /// (window end, resource) of every booking: ended windows are forgotten.
    #[serde(skip)]
    pub(super) booking_ends: BTreeSet<(u64, Name)>,
    /// The live leases of each holder and of each principal, in `ListLeases` order.
    #[serde(skip)]
    pub(super) by_holder: LeaseIndex,
    #[serde(skip)]
    pub(super) by_principal: LeaseIndex,
    /// What the entry being applied did besides its reply.
    #[serde(skip)]
    pub(super) effects: Effects,
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

/// Applies one command entry. Never panics on any input: bad input is a `Rejected` reply.
pub fn apply(state: &mut State, meta: EntryMeta, command: &Command) -> Reply {
    // Effects belong to the entry: lease ids `lse_<index>_<k>` number on across a batch.
    state.effects = Effects::default();
    match command {
        Command::V1(proposal) => apply_proposal(state, meta, proposal),
        Command::Batch(proposals) => Reply::Batch(
            proposals
                .iter()
                .map(|proposal| apply_proposal(state, meta, proposal))
                .collect(),
        ),
    }
}

fn apply_proposal(state: &mut State, meta: EntryMeta, proposal: &Proposal) -> Reply {
    state.clock.observe(meta.leader, &proposal.stamp);
    let now_ms = state.clock.now_ms();
    let quotas = &mut state.quotas;
    state
        .dedup
        .prune(now_ms, |(p, n)| quotas.add(p, Quota::ExactlyOnceBytes, n));
    // Time first: reclaims, wait timeouts, lock delays and bookings that ended by now, and
    // the waiters that lets in, all before the command sees the resource.
    let reclaimed = state.settle_due(meta.index);
    state.settle_waits(meta.index);
    state.settle_bookings();
    if let Some(name) = proposal.op.resource_key() {
        state.settle_resource(meta.index, name);
    }
    state.admit_touched(meta.index);
    let ctx = Ctx {
        index: meta.index,
        principal: &proposal.principal,
        admin: proposal.admin,
        require_registration: proposal.require_registration,
        request_id: proposal.request_id.as_deref(),
    };

    let reply = match ctx.request_id.filter(|_| proposal.op.exactly_once()) {
        None => state.execute(&ctx, proposal, reclaimed),
        Some(request_id) => match state
            .dedup
            .check(&proposal.principal, request_id, &proposal.op)
        {
            Seen::Retry(kept) => state.rebuild(kept, &proposal.op),
            Seen::Conflict => Reply::Rejected(Rejection::invalid(
                "request_id",
                "already used with a different request",
            )),
            Seen::New(ticket) => {
                // Past its budget (or the table's), a principal's new request ids are refused:
                // nothing is done, nothing is remembered.
                // An admin is held to the table's bound only (see `admit_holding`).
                let room = state.dedup.room().and_then(|()| match ctx.admin {
                    true => Ok(()),
                    false => state
                        .quotas
                        .admit(ctx.principal, Quota::ExactlyOnceBytes, 1),
                });
                match room {
                    Err(refused) => Reply::Rejected(refused),
                    Ok(()) => {
                        let reply = state.execute(&ctx, proposal, reclaimed);
                        let cost = state.dedup.remember(ctx.principal, ticket, &reply, now_ms);
                        state
                            .quotas
                            .add(ctx.principal, Quota::ExactlyOnceBytes, cost);
                        reply
                    }
                }
            }
        },
    };
    // Capacity the command freed goes to the waiting room in this same entry (SPEC §4.5, §4.7).
    state.admit_touched(meta.index);
    reply
}

impl State {
    pub fn with_default_policy(default_policy: Policy) -> Self {
        State {
            clock: LeaseClock::default(),
            default_policy,
            resources: OrdMap::new(),
            dedup: Dedup::default(),
            due: BTreeSet::new(),
            retention: Retention::default(),
            dropped_through: None,
            quotas: Quotas::default(),
            dropped_last: None,
            trims: BTreeSet::new(),
            history_total: history::TOTAL,
            history_total_bytes: history::TOTAL_BYTES,
            wait_due: BTreeSet::new(),
            reopen: BTreeSet::new(),
            booking_ends: BTreeSet::new(),
            by_holder: LeaseIndex::default(),
            by_principal: LeaseIndex::default(),
            effects: Effects::default(),
        }
    }

    /// The resource `name`, created if the state does not know it. A new resource counts as
    /// trimmed through every event the global bound has dropped, so a history cursor kept
    /// from a forgotten resource of the same name answers `compacted`, never a silent gap.
    pub(super) fn resource_entry(&mut self, name: &str) -> &mut ResourceState {
        let dropped_through = self.dropped_through;
        Arc::make_mut(self.resources.entry(Name::from(name)).or_insert_with(|| {
            let mut rs = ResourceState::default();
            rs.set_trimmed(dropped_through.and_then(packed));
            Arc::new(rs)
        }))
    }

    /// What a snapshot holds: the replicated fields, without the derived indexes (loading
    /// rebuilds them). O(1): the resources and the exactly-once records are persistent
    /// maps, shared with this state until apply changes them.
    pub fn snapshot_copy(&self) -> State {
        State {
            clock: self.clock.clone(),
            resources: self.resources.clone(),
            dedup: self.dedup.clone(),
            dropped_through: self.dropped_through,
            quotas: self.quotas.replicated(),
            dropped_last: self.dropped_last.clone(),
            history_total: self.history_total,
            history_total_bytes: self.history_total_bytes,
            ..State::with_default_policy(self.default_policy.clone())
        }
    }

    /// A state as snapshot formats 3 and 4 hold it: exactly-once records with whole replies
    /// and no principal, no quotas.
    pub fn from_format_4(body: &[u8]) -> postcard::Result<State> {
        #[derive(Deserialize)]
        struct Format4 {
            clock: LeaseClock,
            default_policy: PolicyV1,
            resources: Vec<(Name, ResourceStateV4)>,
            dedup: super::dedup::Format4,
            dropped_through: Option<(u64, u32)>,
        }
        let old: Format4 = postcard::from_bytes(body)?;
        let resources = old
            .resources
            .into_iter()
            .map(|(name, rs)| (name, Arc::new(rs.0)))
            .collect();
        // Ad-hoc resources are not bookable unless a booking says which node allows it.
        let default_policy = Policy {
            bookable: false,
            ..old.default_policy.into()
        };
        Ok(State {
            clock: old.clock,
            resources,
            dedup: old.dedup.into(),
            dropped_through: old.dropped_through,
            ..State::with_default_policy(default_policy)
        })
    }

    /// The body of a format-3 or 4 snapshot of this state, with `dedup` as those formats
    /// held it (tests of the reader).
    #[cfg(test)]
    pub(crate) fn format_4_body(&self, version: u32, dedup: &impl Serialize) -> Vec<u8> {
        type Old<'a> = StoredResource<
            &'a Vec<Lease>,
            &'a Vec<Ended>,
            &'a VecDeque<Event>,
            PolicyV1,
            &'a VecDeque<Waiter>,
            Vec<BookingV1>,
        >;
        #[derive(Serialize)]
        struct Format4<'a, D> {
            clock: &'a LeaseClock,
            default_policy: PolicyV1,
            resources: Vec<(&'a Name, Old<'a>)>,
            dedup: &'a D,
            dropped_through: Option<(u64, u32)>,
        }
        let resources = self
            .resources
            .iter()
            .map(|(name, rs)| {
                let rare = rs.rare();
                let old = Old {
                    registration: rare.registration.as_deref().map(PolicyV1::from),
                    leases: &rs.leases,
                    ended: &rs.ended,
                    revision: rs.revision,
                    closed_until_ms: rare.closed_until_ms,
                    history: &rs.history,
                    trimmed_through: rs.trimmed_through(),
                    waiters: &rare.waiters,
                    bookings: rare.bookings.iter().map(BookingV1::from).collect(),
                };
                (name, old)
            })
            .collect();
        let old = Format4 {
            clock: &self.clock,
            default_policy: PolicyV1::from(&self.default_policy),
            resources,
            dedup,
            dropped_through: self.dropped_through,
        };
        postcard::to_allocvec(&(version, old)).expect("plain data encodes")
    }

    /// Rebuilds the derived indexes after deserializing a snapshot.
    pub fn restored(mut self) -> Self {
        let mut due = BTreeSet::new();
        let mut wait_due = BTreeSet::new();
        let mut reopen = BTreeSet::new();
        let mut booking_ends = BTreeSet::new();
        let mut by_holder = LeaseIndex::default();
        let mut by_principal = LeaseIndex::default();
        for (name, rs) in &self.resources {
            let grace_ms = self.policy_of(name).renewal_grace_ms;
            for l in &rs.leases {
                due.insert(due_key(l, grace_ms));
                by_holder.insert(&l.holder, l);
                by_principal.insert(&l.principal, l);
            }
            for w in &rs.rare().waiters {
                wait_due.insert(wait_due_key(name, w));
            }
            for b in &rs.rare().bookings {
                booking_ends.insert((b.end_wall_ms(), name.clone()));
            }
            if rs.rare().closed_until_ms > self.clock.now_ms() {
                reopen.insert((rs.rare().closed_until_ms, name.clone()));
            }
        }
        self.recount_usage();
        self.due = due;
        self.wait_due = wait_due;
        self.reopen = reopen;
        self.booking_ends = booking_ends;
        self.by_holder = by_holder;
        self.by_principal = by_principal;
        self.retention = Retention::rebuild(self.resources.iter().map(|(n, rs)| (n, &rs.history)));
        if self.dropped_last.is_none() {
            // A format before the position was kept: every resource of that revision counts
            // as dropped (`~` sorts after every name), so a watch is told `compacted` rather
            // than miss an event.
            self.dropped_last = self
                .dropped_through
                .map(|(revision, seq)| (revision, Name::from("~"), seq));
        }
        // A trim newer than the global watermark is the per-resource bound's.
        self.trims = self
            .resources
            .iter()
            .filter_map(|(name, rs)| {
                let (revision, seq) = rs.trimmed_through()?;
                let position = (revision, name.clone(), seq);
                (Some(&position) > self.dropped_last.as_ref()).then_some(position)
            })
            .collect();
        self
    }

    pub fn clock(&self) -> &LeaseClock {
        &self.clock
    }

    pub fn live_leases(&self) -> usize {
        self.due.len()
    }

    /// Waiters in all waiting rooms.
    pub fn waiters(&self) -> usize {
        self.wait_due.len()
    }

    /// What the last applied entry did besides its reply: its events and decided waits.
    pub fn effects(&self) -> &Effects {
        &self.effects
    }

    /// Takes the last applied entry's effects (the node publishes them once).
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// `lse_<index>_<position>`: the next lease id this entry grants.
    pub(super) fn next_lease_id(&mut self, index: u64) -> Name {
        let position = self.effects.granted;
        self.effects.granted += 1;
        compact_str::format_compact!("lse_{index}_{position}")
    }

    /// Events retained in all resources' histories.
    pub fn retained_events(&self) -> usize {
        self.retention.len()
    }

    /// The lease-clock instant at which the next live lease is due for reclaim, or the next
    /// wait times out, or a lock delay ends that waiters wait behind.
    pub fn next_due_ms(&self) -> Option<u64> {
        let reclaim = self.due.first().map(|(due_ms, _, _)| *due_ms);
        reclaim.into_iter().chain(self.next_wait_due_ms()).min()
    }

    /// Up to `limit` live leases due at or before `at_ms`, as (resource, fencing token).
    pub fn due_by(&self, at_ms: u64, limit: usize) -> Vec<(String, u64)> {
        self.due
            .iter()
            .take_while(|(due_ms, _, _)| *due_ms <= at_ms)
            .take(limit)
            .filter_map(|(_, name, lease_id)| {
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
        self.resources
            .get(resource)
            .and_then(|rs| rs.rare().registration.as_deref())
            .unwrap_or(&self.default_policy)
    }

    pub(super) fn live_view(&self, lease: &Lease) -> LeaseView {
        let now_ms = self.clock.now_ms();
        LeaseView {
            lease: lease.clone(),
            status: if now_ms < lease.expires_at_ms {
                LeaseStatus::Active
            } else {
                LeaseStatus::Grace
            },
            expires_wall_ms: self.clock.wall_of(lease.expires_at_ms),
            remaining_ms: lease.expires_at_ms.saturating_sub(now_ms),
        }
    }

    pub(super) fn ended_view(&self, ended: &Ended) -> LeaseView {
        LeaseView {
            lease: ended.lease.clone(),
            status: ended.status,
            expires_wall_ms: self.clock.wall_of(ended.lease.expires_at_ms),
            remaining_ms: 0,
        }
    }

    fn execute(&mut self, ctx: &Ctx<'_>, proposal: &Proposal, reclaimed: Vec<LeaseView>) -> Reply {
        let result = match &proposal.op {
            Op::CreateResource(op) => self.create_resource(ctx, op),
            Op::CreateResourceV1(op) => self.create_resource(
                ctx,
                &CreateOp {
                    name: op.name.clone(),
                    policy: op.policy.clone().into(),
                },
            ),
            Op::Acquire(op) => self.acquire(ctx, op),
            Op::Renew(op) => self.renew(ctx, op),
            Op::Release(op) => self.release(ctx, op),
            Op::Transfer(op) => self.transfer(ctx, op),
            Op::CancelWait(op) => self.cancel_wait(ctx, op),
            Op::Book(op) => self.book(ctx, op, false),
            Op::BookV1(op) => self.book(
                ctx,
                &BookOp {
                    resource: op.resource.clone(),
                    holder: op.holder.clone(),
                    start_wall_ms: op.start_wall_ms,
                    duration_ms: op.duration_ms,
                    ad_hoc_bookable: true,
                },
                true,
            ),
            Op::CancelBooking(op) => self.cancel_booking(ctx, op),
            Op::SetQuota(op) => self.set_quota(ctx, op),
            Op::Reclaim { .. } | Op::Tick => Ok(Reply::Reclaimed(reclaimed)),
        };
        result.unwrap_or_else(Reply::Rejected)
    }

    /// Reclaims the live leases whose expiry and grace have passed on the lease clock, the
    /// longest due first, up to what is left of the entry's [`RECLAIMS_PER_ENTRY`].
    fn settle_due(&mut self, index: u64) -> Vec<LeaseView> {
        let now_ms = self.clock.now_ms();
        let mut budget = RECLAIMS_PER_ENTRY.saturating_sub(self.effects.reclaimed);
        // What is due by now, by resource, so that each resource's leases are filtered once
        // however many of them expire together.
        let mut due: BTreeMap<Name, BTreeSet<Name>> = BTreeMap::new();
        while budget > 0 {
            let Some((due_ms, name, lease_id)) = self.due.pop_first() else {
                break;
            };
            if due_ms > now_ms {
                self.due.insert((due_ms, name, lease_id));
                break;
            }
            due.entry(name).or_default().insert(lease_id);
            budget -= 1;
        }
        self.effects.reclaimed += due.values().map(BTreeSet::len).sum::<usize>();
        let mut reclaimed = Vec::new();
        for (name, lease_ids) in due {
            let Some(rs) = self.resources.get_mut(&name).map(Arc::make_mut) else {
                continue;
            };
            let (gone, kept): (Vec<Lease>, Vec<Lease>) = std::mem::take(&mut rs.leases)
                .into_iter()
                .partition(|l| lease_ids.contains(&l.lease_id));
            rs.leases = kept;
            for lease in gone {
                let actor = history::SYSTEM_ACTOR;
                reclaimed.push(self.lease_ended(index, actor, lease, LeaseStatus::Reclaimed));
            }
        }
        reclaimed
    }

    /// Reclaims the due leases of `name`, which a command is about to read or change: whatever
    /// the per-entry cap left for later, no command sees a lease past its grace.
    fn settle_resource(&mut self, index: u64, name: &str) {
        let now_ms = self.clock.now_ms();
        let Some(rs) = self.resources.get(name) else {
            return;
        };
        let grace_ms = rs
            .rare()
            .registration
            .as_deref()
            .unwrap_or(&self.default_policy)
            .renewal_grace_ms;
        let is_due = |l: &Lease| l.expires_at_ms.saturating_add(grace_ms) <= now_ms;
        if !rs.leases.iter().any(is_due) {
            return;
        }
        let Some(rs) = self.resources.get_mut(name).map(Arc::make_mut) else {
            return;
        };
        let (gone, kept): (Vec<Lease>, Vec<Lease>) =
            std::mem::take(&mut rs.leases).into_iter().partition(is_due);
        rs.leases = kept;
        for lease in gone {
            let actor = history::SYSTEM_ACTOR;
            self.lease_ended(index, actor, lease, LeaseStatus::Reclaimed);
        }
    }

    /// Ends a live lease with `status` (released or reclaimed); returns how it looked then.
    pub(super) fn end_lease(
        &mut self,
        index: u64,
        actor: &str,
        name: &str,
        lease_id: &str,
        status: LeaseStatus,
    ) -> Option<LeaseView> {
        let rs = self.resources.get_mut(name).map(Arc::make_mut)?;
        let at = rs.leases.iter().position(|l| l.lease_id == lease_id)?;
        let lease = rs.leases.remove(at);
        Some(self.lease_ended(index, actor, lease, status))
    }

    /// The bookkeeping of a lease just taken out of its resource's live list: expiry index,
    /// lock delay, revision, the ended list and history.
    fn lease_ended(
        &mut self,
        index: u64,
        actor: &str,
        lease: Lease,
        status: LeaseStatus,
    ) -> LeaseView {
        let now_ms = self.clock.now_ms();
        let name = lease.resource.clone();
        let (policy, ad_hoc) = self.policy_and_ad_hoc(&name);
        let (grace_ms, lock_delay_ms) = (policy.renewal_grace_ms, policy.lock_delay_ms);
        self.count_lease(&lease, ad_hoc, -1);
        self.due.remove(&due_key(&lease, grace_ms));
        if let Some(rs) = self.resources.get_mut(&name).map(Arc::make_mut) {
            if status == LeaseStatus::Reclaimed && lock_delay_ms > 0 {
                self.reopen
                    .remove(&(rs.rare().closed_until_ms, name.clone()));
                rs.rare_mut().closed_until_ms = rs
                    .rare()
                    .closed_until_ms
                    .max(now_ms.saturating_add(lock_delay_ms));
                self.reopen
                    .insert((rs.rare().closed_until_ms, name.clone()));
            }
            rs.revision = index;
        }
        self.effects.touched.insert(name.clone());
        let was = if now_ms < lease.expires_at_ms {
            LeaseStatus::Active
        } else {
            LeaseStatus::Grace
        };
        let event = Event::about(
            match status {
                LeaseStatus::Released => EventKind::Released,
                _ => EventKind::Reclaimed,
            },
            &lease,
            Some(was),
            Some(status),
        );
        let ended = Ended {
            lease,
            status,
            at_ms: now_ms,
            superseded_by: None,
        };
        let view = self.ended_view(&ended);
        self.remember_ended(&name, ended);
        self.record(index, actor, &name, event);
        view
    }

    /// Keeps an ended lease, without its metadata: the ended list outlives the history that
    /// bounds metadata by bytes, and how a lease ended needs none of it.
    pub(super) fn remember_ended(&mut self, name: &str, mut ended: Ended) {
        ended.lease.metadata = Default::default();
        if let Some(rs) = self.resources.get_mut(name).map(Arc::make_mut) {
            rs.ended.push_lean(ended);
            while rs.ended.len() > ENDED_KEPT {
                rs.ended.remove(0);
            }
        }
    }

    /// Starts tracking a granted lease's expiry.
    pub(super) fn track_due(&mut self, lease: &Lease) {
        let grace_ms = self.policy_of(&lease.resource).renewal_grace_ms;
        self.due.insert(due_key(lease, grace_ms));
    }

    pub(super) fn untrack_due(&mut self, lease: &Lease) {
        let grace_ms = self.policy_of(&lease.resource).renewal_grace_ms;
        self.due.remove(&due_key(lease, grace_ms));
    }

    /// Appends an event to a resource's history and enforces both retention bounds; an ad-hoc
    /// resource left with nothing to remember is forgotten.
    pub(super) fn record(&mut self, index: u64, actor: &str, name: &str, mut event: Event) {
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
                self.reopen.remove(&(closed_until_ms, oldest.into()));
            }
        }
    }
}

/// Live leases by one of their names (holder or principal): (name, resource, lease order), so
/// that a listing of one holder's or principal's leases reads only those, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LeaseIndex(BTreeSet<(Name, Name, (u64, u32))>);

impl LeaseIndex {
    fn key(name: &str, lease: &Lease) -> (Name, Name, (u64, u32)) {
        // Every lease id is made by the server (`lse_<index>_<position>`) and parses.
        let order = lease_order(&lease.lease_id).unwrap_or((u64::MAX, u32::MAX));
        (Name::from(name), lease.resource.clone(), order)
    }

    pub(super) fn insert(&mut self, name: &str, lease: &Lease) {
        self.0.insert(Self::key(name, lease));
    }

    pub(super) fn remove(&mut self, name: &str, lease: &Lease) {
        self.0.remove(&Self::key(name, lease));
    }

    /// The (resource, lease order) of `name`'s leases after `after`, in order.
    pub(super) fn of<'a>(
        &'a self,
        name: &'a str,
        after: Option<(&str, (u64, u32))>,
    ) -> impl Iterator<Item = (&'a Name, (u64, u32))> + 'a {
        let start = match after {
            Some((resource, order)) => {
                std::ops::Bound::Excluded((Name::from(name), Name::from(resource), order))
            }
            None => std::ops::Bound::Included((Name::from(name), Name::default(), (0, 0))),
        };
        self.0
            .range((start, std::ops::Bound::Unbounded))
            .take_while(move |(n, _, _)| n == name)
            .map(|(_, resource, order)| (resource, *order))
    }
}

pub(super) fn due_key(lease: &Lease, grace_ms: u64) -> (u64, Name, Name) {
    (
        lease.expires_at_ms.saturating_add(grace_ms),
        lease.resource.clone(),
        lease.lease_id.clone(),
    )
}

pub(super) fn check_names(resource: &str, holder: &str) -> Result<(), Rejection> {
    check_name("resource", resource)?;
    check_name("holder", holder)
}

pub(super) fn check_name(field: &str, value: &str) -> Result<(), Rejection> {
    if policy::valid_name(value) {
        Ok(())
    } else {
        Err(Rejection::invalid(
            field,
            "must be 1-128 bytes of [A-Za-z0-9_.:/-]",
        ))
    }
}

pub(super) fn check_ttl(policy: &Policy, ttl_ms: u64) -> Result<(), Rejection> {
    let max_ms = policy.ttl_ceiling_ms();
    if ttl_ms < policy::MIN_TTL_MS || ttl_ms > max_ms {
        return Err(Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: policy::MIN_TTL_MS,
            max_ms,
        });
    }
    Ok(())
}
