//! Tests of the lease machine: rule-named unit tests, and property tests that run random command
//! sequences through [`apply`] and through a separately written reference model of SPEC §4.1–4.5
//! and §5 (exclusive leases, one default policy), comparing every answer.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

use super::command::{AcquireOp, Command, Op, Proposal, ReleaseOp, RenewOp, Reply, Stamp};
use super::expiry::{plan, Plan};
use super::lease_clock::LeaderKey;
use super::machine::{apply, EntryMeta, State};
use super::policy::{Policy, DAY_MS, DEDUP_WINDOW_MS, HOUR_MS, SECOND_MS};
use super::types::{LeaseStatus, LeaseView, Mode, Refusal, Rejection};
use crate::store::snapshot::{decode_state, encode_state};

use model::{Answer, Model, Request, Shown};

/// The reference model, written from the SPEC text and not from machine.rs. Where the SPEC
/// leaves room, it follows the choice machine.rs made; each such rule is marked CHOICE.
mod model {
    use std::collections::BTreeMap;

    use crate::lease::types::LeaseStatus;

    /// SPEC §4.13: min ttl 1 s; ad-hoc policy: default ttl 60 s, max ttl 24 h.
    pub const MIN_TTL_MS: u64 = 1_000;
    pub const DEFAULT_TTL_MS: u64 = 60_000;
    pub const MAX_TTL_MS: u64 = 24 * 3_600_000;

    /// One tenure as the model keeps it. Times are lease-clock milliseconds.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Held {
        pub lease_id: String,
        pub resource: String,
        pub holder: String,
        pub principal: String,
        pub token: u64,
        pub acquired_at_ms: u64,
        pub expires_at_ms: u64,
        /// The ttl of the last acquire or renew.
        pub ttl_ms: u64,
    }

    /// A lease as an answer shows it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Shown {
        pub lease_id: String,
        pub resource: String,
        pub holder: String,
        pub principal: String,
        pub token: u64,
        pub acquired_at_ms: u64,
        pub expires_at_ms: u64,
        pub ttl_ms: u64,
        pub status: LeaseStatus,
        pub remaining_ms: u64,
    }

    /// What a request is answered, in terms both the model and the machine can be put in.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Answer {
        Granted(Shown),
        Refused {
            reason: &'static str,
            holders: Vec<(String, u64)>,
        },
        Lease(Shown),
        Rejected {
            reason: &'static str,
            /// (expected, got) of a `stale_fencing_token`.
            stale: Option<(u64, u64)>,
        },
        /// A Tick: the (resource, token) of the leases reclaimed by the entry, sorted.
        Reclaimed(Vec<(String, u64)>),
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Request {
        Acquire {
            resource: String,
            holder: String,
            ttl_ms: Option<u64>,
        },
        Renew {
            resource: String,
            lease_id: String,
            holder: String,
            fencing_token: u64,
            ttl_ms: Option<u64>,
        },
        Release {
            resource: String,
            lease_id: String,
            holder: String,
            fencing_token: u64,
        },
        Tick,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Ending {
        Released,
        Reclaimed,
    }

    #[derive(Debug, Default)]
    struct Slot {
        current: Option<Held>,
        /// CHOICE: the last 8 ended tenures of a resource are remembered; they decide whether a
        /// renew/release of a lease that is gone answers `lease_expired` or `lease_not_found`.
        ended: Vec<(Held, Ending)>,
    }

    impl Slot {
        fn end(&mut self, held: Held, how: Ending) {
            self.ended.push((held, how));
            if self.ended.len() > 8 {
                self.ended.remove(0);
            }
        }
    }

    /// CHOICE (outside the model): idle resources are forgotten and request_ids expire only after
    /// 10 min of lease time; the property tests stay inside that window, so neither is modelled.
    #[derive(Debug)]
    pub struct Model {
        grace_ms: u64,
        slots: BTreeMap<String, Slot>,
        /// (principal, request_id) → the first request and its answer.
        answered: BTreeMap<(String, String), (Request, Answer)>,
    }

    fn rejected(reason: &'static str) -> Answer {
        Answer::Rejected {
            reason,
            stale: None,
        }
    }

    fn ttl_in_range(ttl_ms: u64) -> bool {
        (MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms)
    }

    /// Names a lease the way renew and release do. CHOICE: an empty lease_id means the
    /// holder's own lease on the resource.
    fn names(held: &Held, lease_id: &str, holder: &str) -> bool {
        if lease_id.is_empty() {
            held.holder == holder
        } else {
            held.lease_id == lease_id
        }
    }

    fn show(held: &Held, status: LeaseStatus, now_ms: u64) -> Shown {
        Shown {
            lease_id: held.lease_id.clone(),
            resource: held.resource.clone(),
            holder: held.holder.clone(),
            principal: held.principal.clone(),
            token: held.token,
            acquired_at_ms: held.acquired_at_ms,
            expires_at_ms: held.expires_at_ms,
            ttl_ms: held.ttl_ms,
            status,
            remaining_ms: if status == LeaseStatus::Released {
                0
            } else {
                held.expires_at_ms.saturating_sub(now_ms)
            },
        }
    }

    /// §2: ACTIVE before expiry, GRACE past it (a live lease past its grace is already gone).
    fn live(held: &Held, now_ms: u64) -> Shown {
        let status = if now_ms < held.expires_at_ms {
            LeaseStatus::Active
        } else {
            LeaseStatus::Grace
        };
        show(held, status, now_ms)
    }

    impl Model {
        pub fn new(grace_ms: u64) -> Self {
            Model {
                grace_ms,
                slots: BTreeMap::new(),
                answered: BTreeMap::new(),
            }
        }

        pub fn current(&self, resource: &str) -> Option<&Held> {
            self.slots.get(resource)?.current.as_ref()
        }

        /// Applies one entry at lease time `now_ms` (from the stamps, §5) with log index `index`.
        pub fn step(
            &mut self,
            now_ms: u64,
            index: u64,
            principal: &str,
            admin: bool,
            request_id: Option<&str>,
            request: &Request,
        ) -> Answer {
            // §4.4: a lease is reclaimed once lease_now ≥ expires_at + renewal_grace; every
            // entry judges that before anything else, so nothing sees a lease past its grace.
            let reclaimed = self.reclaim_due(now_ms);
            // §5 as amended: a renew is not exactly-once; applied again it renews again.
            let exactly_once = !matches!(request, Request::Renew { .. });
            let Some(request_id) = request_id.filter(|_| exactly_once) else {
                return self.execute(now_ms, index, principal, admin, request, reclaimed);
            };
            // §5: at most once per (principal, request_id); a retry gets the original answer,
            // the same request_id with another request is invalid_argument.
            let key = (principal.to_string(), request_id.to_string());
            if let Some((first, answer)) = self.answered.get(&key) {
                return if first == request {
                    match (answer, request) {
                        // §5 as amended: a retried refusal names the holders as they are now.
                        (Answer::Refused { reason, .. }, Request::Acquire { resource, .. }) => {
                            Answer::Refused {
                                reason,
                                holders: self
                                    .slots
                                    .get(resource)
                                    .and_then(|slot| slot.current.as_ref())
                                    .map(|held| vec![(held.holder.clone(), held.token)])
                                    .unwrap_or_default(),
                            }
                        }
                        _ => answer.clone(),
                    }
                } else {
                    rejected("invalid_argument")
                };
            }
            let answer = self.execute(now_ms, index, principal, admin, request, reclaimed);
            self.answered.insert(key, (request.clone(), answer.clone()));
            answer
        }

        fn reclaim_due(&mut self, now_ms: u64) -> Vec<(String, u64)> {
            let mut reclaimed = Vec::new();
            for (name, slot) in &mut self.slots {
                let due = slot
                    .current
                    .as_ref()
                    .is_some_and(|held| now_ms >= held.expires_at_ms + self.grace_ms);
                if due {
                    if let Some(held) = slot.current.take() {
                        reclaimed.push((name.clone(), held.token));
                        slot.end(held, Ending::Reclaimed);
                    }
                }
            }
            reclaimed.sort();
            reclaimed
        }

        fn execute(
            &mut self,
            now_ms: u64,
            index: u64,
            principal: &str,
            admin: bool,
            request: &Request,
            reclaimed: Vec<(String, u64)>,
        ) -> Answer {
            match request {
                Request::Acquire {
                    resource,
                    holder,
                    ttl_ms,
                } => self.acquire(now_ms, index, principal, admin, resource, holder, *ttl_ms),
                Request::Renew {
                    resource,
                    lease_id,
                    holder,
                    fencing_token,
                    ttl_ms,
                } => {
                    // §3: argument validation comes first; a ttl the caller gave is an argument.
                    if ttl_ms.is_some_and(|ttl_ms| !ttl_in_range(ttl_ms)) {
                        return rejected("ttl_out_of_range");
                    }
                    if let Some(answer) =
                        self.refusal(principal, admin, resource, lease_id, holder, *fencing_token)
                    {
                        return answer;
                    }
                    let Some(held) = self
                        .slots
                        .get_mut(resource)
                        .and_then(|slot| slot.current.as_mut())
                    else {
                        return rejected("lease_not_found");
                    };
                    // §4.3: expires_at = now + ttl, replacing the old expiry.
                    // CHOICE: no ttl = the lease's last ttl.
                    let ttl_ms = ttl_ms.unwrap_or(held.ttl_ms);
                    held.expires_at_ms = now_ms + ttl_ms;
                    held.ttl_ms = ttl_ms;
                    Answer::Lease(live(held, now_ms))
                }
                Request::Release {
                    resource,
                    lease_id,
                    holder,
                    fencing_token,
                } => {
                    if let Some(answer) =
                        self.refusal(principal, admin, resource, lease_id, holder, *fencing_token)
                    {
                        return answer;
                    }
                    // §4.5: the lease ends at once.
                    let Some(slot) = self.slots.get_mut(resource) else {
                        return rejected("lease_not_found");
                    };
                    let Some(held) = slot.current.take() else {
                        return rejected("lease_not_found");
                    };
                    let shown = show(&held, LeaseStatus::Released, now_ms);
                    slot.end(held, Ending::Released);
                    Answer::Lease(shown)
                }
                Request::Tick => Answer::Reclaimed(reclaimed),
            }
        }

        #[allow(clippy::too_many_arguments)]
        fn acquire(
            &mut self,
            now_ms: u64,
            index: u64,
            principal: &str,
            admin: bool,
            resource: &str,
            holder: &str,
            ttl_ms: Option<u64>,
        ) -> Answer {
            let ttl_ms = ttl_ms.unwrap_or(DEFAULT_TTL_MS);
            if !ttl_in_range(ttl_ms) {
                return rejected("ttl_out_of_range");
            }
            let slot = self.slots.entry(resource.to_string()).or_default();
            match &slot.current {
                // §1: only the lease's principal or an admin may act for its holder; CHOICE:
                // that includes getting the lease (and its token) back from an acquire.
                Some(held) if held.holder == holder && !admin && held.principal != principal => {
                    rejected("insufficient_permissions")
                }
                // §4.2: the same holder gets its lease unchanged; the ttl asked for is ignored.
                // CHOICE: that includes a lease in its renewal grace (shown as GRACE).
                Some(held) if held.holder == holder => Answer::Granted(live(held, now_ms)),
                // §4.1/§4.4: held (also in grace) → a normal refusal naming the holder.
                Some(held) => Answer::Refused {
                    reason: "resource_unavailable",
                    holders: vec![(held.holder.clone(), held.token)],
                },
                // §1: the fencing token is the index of the granting entry.
                // CHOICE: lease_id = "lse_" + index + "_" + position (0 for exclusive).
                None => {
                    let held = Held {
                        lease_id: format!("lse_{index}_0"),
                        resource: resource.to_string(),
                        holder: holder.to_string(),
                        principal: principal.to_string(),
                        token: index,
                        acquired_at_ms: now_ms,
                        expires_at_ms: now_ms + ttl_ms,
                        ttl_ms,
                    };
                    let shown = live(&held, now_ms);
                    slot.current = Some(held);
                    Answer::Granted(shown)
                }
            }
        }

        /// Why a renew/release may not change the lease it names, if it may not. SPEC §3 order:
        /// existence → holder and permission → fencing token.
        fn refusal(
            &self,
            principal: &str,
            admin: bool,
            resource: &str,
            lease_id: &str,
            holder: &str,
            fencing_token: u64,
        ) -> Option<Answer> {
            let slot = self.slots.get(resource);
            let current = slot
                .and_then(|slot| slot.current.as_ref())
                .filter(|held| names(held, lease_id, holder));
            // §3 order: existence → holder and permission → token → state. CHOICE: a lease
            // that ended still "exists" for that order unless it was released; a reclaimed one
            // answers lease_expired only to its own holder and principal with its own token.
            let ended = slot.and_then(|slot| {
                slot.ended
                    .iter()
                    .rev()
                    .find(|(held, _)| names(held, lease_id, holder))
            });
            let (held, reclaimed) = match (current, ended) {
                (Some(held), _) => (held, false),
                (None, Some((held, Ending::Reclaimed))) => (held, true),
                (None, Some((_, Ending::Released)) | None) => {
                    return Some(rejected("lease_not_found"))
                }
            };
            if held.holder != holder || (!admin && held.principal != principal) {
                return Some(rejected("insufficient_permissions"));
            }
            if held.token != fencing_token {
                return Some(Answer::Rejected {
                    reason: "stale_fencing_token",
                    stale: Some((held.token, fencing_token)),
                });
            }
            if reclaimed {
                return Some(rejected("lease_expired"));
            }
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Putting the machine's answers in the model's terms.

fn shown(view: &LeaseView) -> Shown {
    let lease = &view.lease;
    Shown {
        lease_id: lease.lease_id.clone().to_string(),
        resource: lease.resource.clone().to_string(),
        holder: lease.holder.clone().to_string(),
        principal: lease.principal.clone().to_string(),
        token: lease.fencing_token,
        acquired_at_ms: lease.acquired_at_ms,
        expires_at_ms: lease.expires_at_ms,
        ttl_ms: lease.ttl_ms,
        status: view.status,
        remaining_ms: view.remaining_ms,
    }
}

fn answer_of(reply: &Reply) -> Answer {
    match reply {
        Reply::Acquire(outcome) if outcome.granted => Answer::Granted(shown(
            outcome
                .lease
                .as_ref()
                .expect("a granted acquire carries its lease"),
        )),
        Reply::Acquire(outcome) => Answer::Refused {
            reason: outcome
                .refusal
                .expect("a refused acquire carries its refusal")
                .reason()
                .as_str(),
            holders: outcome
                .holders
                .iter()
                .map(|v| (v.lease.holder.to_string(), v.lease.fencing_token))
                .collect(),
        },
        Reply::Lease(view) => Answer::Lease(shown(view)),
        Reply::Rejected(rejection) => Answer::Rejected {
            reason: rejection.reason().as_str(),
            stale: match rejection {
                Rejection::StaleFencingToken { expected, got } => Some((*expected, *got)),
                _ => None,
            },
        },
        Reply::Reclaimed(views) => {
            let mut reclaimed: Vec<_> = views
                .iter()
                .map(|v| {
                    assert_eq!(v.status, LeaseStatus::Reclaimed, "{v:?}");
                    (v.lease.resource.to_string(), v.lease.fencing_token)
                })
                .collect();
            reclaimed.sort();
            Answer::Reclaimed(reclaimed)
        }
        Reply::None => panic!("a command entry answered Reply::None"),
        Reply::Batch(_) => panic!("the model proposes one command per entry"),
        Reply::Resource(view) => panic!("the model registers nothing, yet got {view:?}"),
        Reply::Cancelled { .. } | Reply::Booking(_) => panic!("the model never waits or books"),
        Reply::Quota(_) => panic!("the model sets no quotas"),
    }
}

fn op_of(request: &Request) -> Op {
    match request.clone() {
        Request::Acquire {
            resource,
            holder,
            ttl_ms,
        } => Op::Acquire(AcquireOp {
            resource,
            holder,
            ttl_ms,
            mode: Mode::Exclusive,
            units: 1,
            metadata: BTreeMap::new(),
            idempotency_key: None,
            wait_ms: None,
        }),
        Request::Renew {
            resource,
            lease_id,
            holder,
            fencing_token,
            ttl_ms,
        } => Op::Renew(RenewOp {
            resource,
            lease_id,
            holder,
            fencing_token,
            ttl_ms,
        }),
        Request::Release {
            resource,
            lease_id,
            holder,
            fencing_token,
        } => Op::Release(ReleaseOp {
            resource,
            lease_id,
            holder,
            fencing_token,
        }),
        Request::Tick => Op::Tick,
    }
}

fn policy_with_grace(renewal_grace_ms: u64) -> Policy {
    Policy {
        renewal_grace_ms,
        ..Policy::ad_hoc()
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests: random command sequences, machine against model.

const RESOURCES: [&str; 3] = ["world/eu-1", "seat:7", "shard_2.a"];
const HOLDERS: [&str; 3] = ["alice", "bob", "carol"];
/// The leader's principal for the entries it proposes itself.
const LEADER_PRINCIPAL: &str = "tenure-leader";

/// The lease clock as SPEC §5 defines it, kept by the test from the stamps it writes: under one
/// leader it advances by the (positive) monotonic difference, across a leader change by zero.
#[derive(Debug, Default)]
struct StampClock {
    now_ms: u64,
    /// The writing leader and the newest monotonic stamp seen from it.
    anchor: Option<(LeaderKey, u64)>,
}

impl StampClock {
    fn observe(&mut self, leader: LeaderKey, mono_ms: u64) {
        match self.anchor {
            Some((anchored, newest_ms)) if anchored == leader => {
                if mono_ms > newest_ms {
                    self.now_ms += mono_ms - newest_ms;
                    self.anchor = Some((leader, mono_ms));
                }
            }
            _ => self.anchor = Some((leader, mono_ms)),
        }
    }
}

#[derive(Clone, Debug)]
enum GenStamp {
    /// The same leader, its monotonic clock this much later.
    Advance(u64),
    /// A new leader whose monotonic clock reads an hour ahead of the old one's.
    NewLeaderAhead,
    /// A new leader whose monotonic clock reads this much behind the old one's.
    NewLeaderBehind(u64),
}

/// A value chosen when the step runs: the resource's current one, or one seen earlier.
#[derive(Clone, Debug)]
enum Pick {
    Current,
    Seen(Index),
}

/// The resource a renew or release names.
#[derive(Clone, Debug)]
enum ResourcePick {
    /// One of the resources that are held (by the model), or the first if none is.
    Held(Index),
    Fixed(usize),
}

#[derive(Clone, Debug)]
enum HolderPick {
    /// The resource's current holder (by the model), or the first holder if it is free.
    Current,
    Fixed(usize),
}

#[derive(Clone, Debug)]
enum GenPrincipal {
    /// The holder's own principal, `p-<holder>`.
    Own,
    /// Someone else, not an admin.
    Stranger,
    Admin,
}

#[derive(Clone, Debug)]
enum GenOp {
    Acquire {
        resource: usize,
        holder: usize,
        ttl_ms: Option<u64>,
    },
    Renew {
        resource: ResourcePick,
        holder: HolderPick,
        /// None = an empty lease_id.
        lease_id: Option<Pick>,
        token: Pick,
        ttl_ms: Option<u64>,
    },
    Release {
        resource: ResourcePick,
        holder: HolderPick,
        lease_id: Option<Pick>,
        token: Pick,
    },
    Tick,
    /// Sends again an earlier request that carried a request_id, exactly as it was.
    Retry(Index),
}

#[derive(Clone, Debug)]
struct GenStep {
    stamp: GenStamp,
    /// Entries between commands (blank, membership) still use up log indexes.
    index_gap: u64,
    principal: GenPrincipal,
    request_id: Option<u8>,
    op: GenOp,
}

fn ttl_strategy() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        12 => (SECOND_MS..=10 * SECOND_MS).prop_map(Some),
        1 => Just(None),
        2 => prop::sample::select(vec![0, 500, 999, DAY_MS + 1, 90 * DAY_MS, u64::MAX])
            .prop_map(Some),
        1 => prop::sample::select(vec![SECOND_MS, DAY_MS]).prop_map(Some),
    ]
}

fn pick_strategy() -> impl Strategy<Value = Pick> {
    prop_oneof![3 => Just(Pick::Current), 1 => any::<Index>().prop_map(Pick::Seen)]
}

fn lease_id_strategy() -> impl Strategy<Value = Option<Pick>> {
    prop_oneof![2 => Just(None), 1 => pick_strategy().prop_map(Some)]
}

fn resource_strategy() -> impl Strategy<Value = ResourcePick> {
    prop_oneof![
        3 => any::<Index>().prop_map(ResourcePick::Held),
        1 => (0..3usize).prop_map(ResourcePick::Fixed),
    ]
}

fn holder_strategy() -> impl Strategy<Value = HolderPick> {
    prop_oneof![3 => Just(HolderPick::Current), 1 => (0..3usize).prop_map(HolderPick::Fixed)]
}

fn op_strategy() -> impl Strategy<Value = GenOp> {
    prop_oneof![
        4 => (0..3usize, 0..3usize, ttl_strategy()).prop_map(|(resource, holder, ttl_ms)| {
            GenOp::Acquire { resource, holder, ttl_ms }
        }),
        4 => (resource_strategy(), holder_strategy(), lease_id_strategy(), pick_strategy(), ttl_strategy())
            .prop_map(|(resource, holder, lease_id, token, ttl_ms)| GenOp::Renew {
                resource,
                holder,
                lease_id,
                token,
                ttl_ms,
            }),
        2 => (resource_strategy(), holder_strategy(), lease_id_strategy(), pick_strategy()).prop_map(
            |(resource, holder, lease_id, token)| GenOp::Release {
                resource,
                holder,
                lease_id,
                token,
            }
        ),
        2 => Just(GenOp::Tick),
        1 => any::<Index>().prop_map(GenOp::Retry),
    ]
}

fn step_strategy() -> impl Strategy<Value = GenStep> {
    let stamp = prop_oneof![
        14 => (0..5_000u64).prop_map(GenStamp::Advance),
        1 => Just(GenStamp::NewLeaderAhead),
        1 => (0..20_000_000u64).prop_map(GenStamp::NewLeaderBehind),
    ];
    let index_gap = prop_oneof![4 => Just(1u64), 1 => Just(2u64)];
    let principal = prop_oneof![
        12 => Just(GenPrincipal::Own),
        1 => Just(GenPrincipal::Stranger),
        1 => Just(GenPrincipal::Admin),
    ];
    let request_id = prop_oneof![3 => Just(None), 1 => (0..4u8).prop_map(Some)];
    (stamp, index_gap, principal, request_id, op_strategy()).prop_map(
        |(stamp, index_gap, principal, request_id, op)| GenStep {
            stamp,
            index_gap,
            principal,
            request_id,
            op,
        },
    )
}

/// A request sent with a request_id, kept so that a later step can retry it.
#[derive(Clone, Debug)]
struct Sent {
    principal: String,
    admin: bool,
    request_id: String,
    request: Request,
}

/// What the test itself knows about a resource's live tenure, from its own clock.
#[derive(Debug)]
struct Tracked {
    lease_id: String,
    token: u64,
    ttl_ms: u64,
    /// Lease-clock instant before which the lease must be valid (now + ttl of the last grant
    /// or renew); the resource must stay its holder's until this plus the grace.
    hold_until_ms: u64,
}

struct Run {
    grace_ms: u64,
    machine: State,
    model: Model,
    clock: StampClock,
    leader: LeaderKey,
    mono_ms: u64,
    index: u64,
    seen_tokens: Vec<u64>,
    seen_lease_ids: Vec<String>,
    sent: Vec<Sent>,
    used_keys: BTreeSet<(String, String)>,
    tracked: BTreeMap<String, Tracked>,
    last_token: BTreeMap<String, u64>,
}

impl Run {
    fn new(grace_ms: u64) -> Self {
        Run {
            grace_ms,
            machine: State::with_default_policy(policy_with_grace(grace_ms)),
            model: Model::new(grace_ms),
            clock: StampClock::default(),
            leader: LeaderKey {
                term: 1,
                node_id: 1,
            },
            mono_ms: 10_000_000,
            index: 0,
            seen_tokens: Vec::new(),
            seen_lease_ids: Vec::new(),
            sent: Vec::new(),
            used_keys: BTreeSet::new(),
            tracked: BTreeMap::new(),
            last_token: BTreeMap::new(),
        }
    }

    fn run(mut self, steps: &[GenStep]) {
        for (n, step) in steps.iter().enumerate() {
            self.step(n, step);
        }
    }

    fn new_leader(&mut self) {
        let term = self.leader.term + 1;
        self.leader = LeaderKey {
            term,
            node_id: term % 3 + 1,
        };
    }

    fn pick_resource(&self, pick: &ResourcePick) -> &'static str {
        match pick {
            ResourcePick::Held(ix) => {
                let held: Vec<&'static str> = RESOURCES
                    .into_iter()
                    .filter(|r| self.model.current(r).is_some())
                    .collect();
                if held.is_empty() {
                    RESOURCES[0]
                } else {
                    held[ix.index(held.len())]
                }
            }
            ResourcePick::Fixed(i) => RESOURCES[*i],
        }
    }

    fn pick_holder(&self, resource: &str, pick: &HolderPick) -> String {
        match pick {
            HolderPick::Current => self
                .model
                .current(resource)
                .map_or(HOLDERS[0], |held| held.holder.as_str())
                .to_string(),
            HolderPick::Fixed(i) => HOLDERS[*i].to_string(),
        }
    }

    fn pick_lease_id(&self, resource: &str, pick: &Option<Pick>) -> String {
        match pick {
            None => String::new(),
            Some(Pick::Current) => self
                .model
                .current(resource)
                .map_or_else(|| "lse_0_0".to_string(), |held| held.lease_id.clone()),
            Some(Pick::Seen(ix)) if !self.seen_lease_ids.is_empty() => {
                ix.get(&self.seen_lease_ids).clone()
            }
            Some(Pick::Seen(_)) => String::new(),
        }
    }

    fn pick_token(&self, resource: &str, pick: &Pick) -> u64 {
        match pick {
            Pick::Current => self.model.current(resource).map_or(1, |held| held.token),
            Pick::Seen(ix) if !self.seen_tokens.is_empty() => *ix.get(&self.seen_tokens),
            Pick::Seen(_) => 1,
        }
    }

    /// Turns a generated step into (principal, admin, request_id, request), choosing tokens and
    /// lease ids from what the client side has seen so far.
    fn resolve(&self, step: &GenStep) -> (String, bool, Option<String>, Request) {
        let request = match &step.op {
            GenOp::Retry(ix) if !self.sent.is_empty() => {
                let sent = ix.get(&self.sent).clone();
                return (
                    sent.principal,
                    sent.admin,
                    Some(sent.request_id),
                    sent.request,
                );
            }
            GenOp::Retry(_) | GenOp::Tick => Request::Tick,
            GenOp::Acquire {
                resource,
                holder,
                ttl_ms,
            } => Request::Acquire {
                resource: RESOURCES[*resource].to_string(),
                holder: HOLDERS[*holder].to_string(),
                ttl_ms: *ttl_ms,
            },
            GenOp::Renew {
                resource,
                holder,
                lease_id,
                token,
                ttl_ms,
            } => {
                let resource = self.pick_resource(resource);
                Request::Renew {
                    resource: resource.to_string(),
                    lease_id: self.pick_lease_id(resource, lease_id),
                    holder: self.pick_holder(resource, holder),
                    fencing_token: self.pick_token(resource, token),
                    ttl_ms: *ttl_ms,
                }
            }
            GenOp::Release {
                resource,
                holder,
                lease_id,
                token,
            } => {
                let resource = self.pick_resource(resource);
                Request::Release {
                    resource: resource.to_string(),
                    lease_id: self.pick_lease_id(resource, lease_id),
                    holder: self.pick_holder(resource, holder),
                    fencing_token: self.pick_token(resource, token),
                }
            }
        };
        let holder = match &request {
            Request::Acquire { holder, .. }
            | Request::Renew { holder, .. }
            | Request::Release { holder, .. } => holder.clone(),
            Request::Tick => return (LEADER_PRINCIPAL.to_string(), false, None, request),
        };
        let (principal, admin) = match step.principal {
            GenPrincipal::Own => (format!("p-{holder}"), false),
            GenPrincipal::Stranger => ("mallory".to_string(), false),
            GenPrincipal::Admin => ("root".to_string(), true),
        };
        let request_id = step.request_id.map(|k| format!("rq-{k}"));
        (principal, admin, request_id, request)
    }

    fn step(&mut self, n: usize, step: &GenStep) {
        match step.stamp {
            GenStamp::Advance(ms) => self.mono_ms += ms,
            GenStamp::NewLeaderAhead => {
                self.new_leader();
                self.mono_ms += HOUR_MS;
            }
            GenStamp::NewLeaderBehind(ms) => {
                self.new_leader();
                self.mono_ms = self.mono_ms.saturating_sub(ms);
            }
        }
        self.index += step.index_gap;
        let (principal, admin, request_id, request) = self.resolve(step);
        self.clock.observe(self.leader, self.mono_ms);
        let now_ms = self.clock.now_ms;
        assert!(
            now_ms < DEDUP_WINDOW_MS,
            "the model leaves out what happens after the dedup/forget window"
        );
        let fresh = request_id
            .as_ref()
            .is_none_or(|id| !self.used_keys.contains(&(principal.clone(), id.clone())));

        let expected = self.model.step(
            now_ms,
            self.index,
            &principal,
            admin,
            request_id.as_deref(),
            &request,
        );
        let proposal = Proposal {
            stamp: Stamp {
                mono_ms: self.mono_ms,
                wall_ms: 1_700_000_000_000 + n as u64 * 1_000,
                clock_epoch: 0,
            },
            principal: principal.clone(),
            admin,
            request_id: request_id.clone(),
            require_registration: false,
            op: op_of(&request),
        };
        let meta = EntryMeta {
            index: self.index,
            leader: self.leader,
        };
        let reply = apply(&mut self.machine, meta, &Command::V1(proposal));
        let got = answer_of(&reply);
        assert_eq!(
            got, expected,
            "step {n}: {request:?} by {principal} (admin {admin}, request_id {request_id:?}) \
             at index {} lease_now {now_ms}: machine (left) and model (right) differ",
            self.index
        );

        if let Some(request_id) = request_id {
            if fresh {
                self.sent.push(Sent {
                    principal: principal.clone(),
                    admin,
                    request_id: request_id.clone(),
                    request: request.clone(),
                });
            }
            self.used_keys.insert((principal, request_id));
        }
        self.learn(&got);
        // A renew is applied every time it is sent (not exactly-once).
        let applied = fresh || matches!(request, Request::Renew { .. });
        self.check_invariants(n, applied, &request, &reply);
    }

    /// Remembers tokens and lease ids that replies showed, for later stale picks.
    fn learn(&mut self, answer: &Answer) {
        let (token, lease_id) = match answer {
            Answer::Granted(shown) | Answer::Lease(shown) => (shown.token, shown.lease_id.clone()),
            _ => return,
        };
        if !self.seen_tokens.contains(&token) {
            self.seen_tokens.push(token);
        }
        if !self.seen_lease_ids.contains(&lease_id) {
            self.seen_lease_ids.push(lease_id);
        }
    }

    fn check_invariants(&mut self, n: usize, applied: bool, request: &Request, reply: &Reply) {
        let now_ms = self.clock.now_ms;
        let grace_ms = self.grace_ms;
        assert_eq!(
            self.machine.clock().now_ms(),
            now_ms,
            "step {n}: lease clock"
        );

        // What each principal holds, as apply counted it, is what a snapshot counts again.
        let restored = self.machine.snapshot_copy().restored();
        assert_eq!(
            restored.quotas, self.machine.quotas,
            "step {n}: quota usage"
        );
        assert_eq!(
            restored.by_holder, self.machine.by_holder,
            "step {n}: holder index"
        );
        let principals = (&restored.by_principal, &self.machine.by_principal);
        assert_eq!(principals.0, principals.1, "step {n}: principal index");

        // An applied successful renew moves the promise to now + ttl (or the last ttl).
        if let (
            true,
            Request::Renew {
                resource, ttl_ms, ..
            },
            Reply::Lease(view),
        ) = (applied, request, reply)
        {
            let tracked = self
                .tracked
                .get_mut(resource)
                .expect("a successful renew names a live tenure");
            assert_eq!(tracked.token, view.lease.fencing_token, "step {n}");
            tracked.ttl_ms = ttl_ms.unwrap_or(tracked.ttl_ms);
            tracked.hold_until_ms = now_ms + tracked.ttl_ms;
        }

        let mut live = 0;
        let mut next_due_ms: Option<u64> = None;
        for resource in RESOURCES {
            let view = self.machine.resource_view(resource);
            assert!(
                view.leases.len() <= 1,
                "step {n}: more than one live exclusive lease on {resource}: {:?}",
                view.leases
            );
            let lease = view.leases.first().map(|v| &v.lease);
            assert_eq!(
                lease.map(|l| (
                    l.lease_id.as_str(),
                    l.holder.as_str(),
                    l.fencing_token,
                    l.expires_at_ms
                )),
                self.model.current(resource).map(|h| (
                    h.lease_id.as_str(),
                    h.holder.as_str(),
                    h.token,
                    h.expires_at_ms
                )),
                "step {n}: live lease on {resource}: machine (left), model (right)"
            );

            // A tenure that ended: released by its holder, or reclaimed only after its ttl and
            // grace ran out on the lease clock of the stamps.
            let ended = self
                .tracked
                .get(resource)
                .filter(|t| lease.map(|l| l.fencing_token) != Some(t.token));
            if let Some(gone) = ended {
                let verdict = self
                    .machine
                    .validate(resource, &gone.lease_id, gone.token, None);
                assert!(!verdict.valid, "step {n}: {verdict:?}");
                if verdict.reason != "lease released" {
                    assert_eq!(verdict.reason, "lease expired", "step {n}");
                    assert!(
                        now_ms >= gone.hold_until_ms + grace_ms,
                        "step {n}: {resource} token {} ended at lease_now {now_ms}, before its \
                         ttl and grace ran out at {}",
                        gone.token,
                        gone.hold_until_ms + grace_ms
                    );
                }
                self.tracked.remove(resource);
            }

            let Some(lease) = lease else { continue };
            let token = lease.fencing_token;
            if !self.tracked.contains_key(resource) {
                // A new tenure began with this very entry.
                assert_eq!(token, self.index, "step {n}: token = granting entry index");
                let last = self.last_token.get(resource).copied().unwrap_or(0);
                assert!(
                    token > last,
                    "step {n}: token {token} on {resource} not above the previous tenure's {last}"
                );
                self.last_token.insert(resource.to_string(), token);
                let Request::Acquire { ttl_ms, .. } = request else {
                    panic!("step {n}: a tenure began from {request:?}");
                };
                let ttl_ms = ttl_ms.unwrap_or(model::DEFAULT_TTL_MS);
                self.tracked.insert(
                    resource.to_string(),
                    Tracked {
                        lease_id: lease.lease_id.clone().to_string(),
                        token,
                        ttl_ms,
                        hold_until_ms: now_ms + ttl_ms,
                    },
                );
            }
            let tracked = &self.tracked[resource];
            assert_eq!(
                lease.expires_at_ms, tracked.hold_until_ms,
                "step {n}: {resource} expiry by the machine (left) and by the stamps (right)"
            );
            assert!(
                now_ms < tracked.hold_until_ms + grace_ms,
                "step {n}: {resource} is still held past its ttl and grace"
            );
            let verdict = self
                .machine
                .validate(resource, &tracked.lease_id, token, None);
            assert_eq!(
                verdict.valid,
                now_ms < tracked.hold_until_ms,
                "step {n}: {verdict:?}"
            );
            live += 1;
            let due_ms = tracked.hold_until_ms + grace_ms;
            next_due_ms = Some(next_due_ms.map_or(due_ms, |d| d.min(due_ms)));
        }
        assert_eq!(self.machine.live_leases(), live, "step {n}: live leases");
        assert_eq!(
            self.machine.next_due_ms(),
            next_due_ms,
            "step {n}: next due"
        );

        // A snapshot of the state restores to the same state, derived indexes included.
        let bytes = encode_state(&self.machine).expect("state serializes");
        let restored = decode_state(&bytes).expect("state deserializes");
        assert_eq!(restored, self.machine, "step {n}: snapshot round trip");
    }
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 160,
        // Keep failures out of the source tree; a failing case prints its input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn machine_agrees_with_the_model_without_grace(steps in vec(step_strategy(), 1..60)) {
        Run::new(0).run(&steps);
    }

    #[test]
    fn machine_agrees_with_the_model_with_renewal_grace(
        grace_ms in prop_oneof![Just(2_000u64), 1..=4_000u64],
        steps in vec(step_strategy(), 1..60),
    ) {
        Run::new(grace_ms).run(&steps);
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests, one rule each.

const LEADER_A: LeaderKey = LeaderKey {
    term: 1,
    node_id: 1,
};
const LEADER_B: LeaderKey = LeaderKey {
    term: 2,
    node_id: 2,
};
const LEADER_C: LeaderKey = LeaderKey {
    term: 3,
    node_id: 3,
};

/// A leader writing entries into one state: each `propose` is the next log entry, stamped with
/// the leader's monotonic clock. The first entry anchors the lease clock at 0.
struct Node {
    state: State,
    index: u64,
    leader: LeaderKey,
    mono_ms: u64,
}

impl Node {
    fn new(grace_ms: u64) -> Self {
        Node {
            state: State::with_default_policy(policy_with_grace(grace_ms)),
            index: 0,
            leader: LEADER_A,
            mono_ms: 1_000,
        }
    }

    fn elapse(&mut self, ms: u64) {
        self.mono_ms += ms;
    }

    fn elect(&mut self, leader: LeaderKey, mono_ms: u64) {
        self.leader = leader;
        self.mono_ms = mono_ms;
    }

    fn now_ms(&self) -> u64 {
        self.state.clock().now_ms()
    }

    fn propose_as(
        &mut self,
        principal: &str,
        admin: bool,
        request_id: Option<&str>,
        op: Op,
    ) -> Reply {
        self.index += 1;
        let proposal = Proposal {
            stamp: Stamp {
                mono_ms: self.mono_ms,
                wall_ms: 1_700_000_000_000 + self.mono_ms,
                clock_epoch: 0,
            },
            principal: principal.to_string(),
            admin,
            request_id: request_id.map(str::to_string),
            require_registration: false,
            op,
        };
        let meta = EntryMeta {
            index: self.index,
            leader: self.leader,
        };
        apply(&mut self.state, meta, &Command::V1(proposal))
    }

    /// Each holder in these tests is its own principal.
    fn acquire(&mut self, resource: &str, holder: &str, ttl_ms: Option<u64>) -> Reply {
        self.propose_as(holder, false, None, acquire_op(resource, holder, ttl_ms))
    }

    fn renew(&mut self, resource: &str, holder: &str, token: u64, ttl_ms: Option<u64>) -> Reply {
        self.propose_as(
            holder,
            false,
            None,
            renew_op(resource, holder, token, ttl_ms),
        )
    }

    fn release(&mut self, resource: &str, holder: &str, token: u64) -> Reply {
        let op = Op::Release(ReleaseOp {
            resource: resource.to_string(),
            lease_id: String::new(),
            holder: holder.to_string(),
            fencing_token: token,
        });
        self.propose_as(holder, false, None, op)
    }

    fn tick(&mut self) -> Reply {
        self.propose_as(LEADER_PRINCIPAL, false, None, Op::Tick)
    }
}

fn acquire_op(resource: &str, holder: &str, ttl_ms: Option<u64>) -> Op {
    op_of(&Request::Acquire {
        resource: resource.to_string(),
        holder: holder.to_string(),
        ttl_ms,
    })
}

fn renew_op(resource: &str, holder: &str, token: u64, ttl_ms: Option<u64>) -> Op {
    op_of(&Request::Renew {
        resource: resource.to_string(),
        lease_id: String::new(),
        holder: holder.to_string(),
        fencing_token: token,
        ttl_ms,
    })
}

#[track_caller]
fn granted(reply: &Reply) -> LeaseView {
    match reply {
        Reply::Acquire(outcome) if outcome.granted => outcome
            .lease
            .clone()
            .expect("a granted acquire carries its lease"),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[track_caller]
fn refused(reply: &Reply) -> Vec<LeaseView> {
    match reply {
        Reply::Acquire(outcome) if !outcome.granted => {
            assert_eq!(outcome.refusal, Some(Refusal::ResourceUnavailable));
            assert_eq!(outcome.lease, None);
            outcome.holders.clone()
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[track_caller]
fn lease(reply: &Reply) -> LeaseView {
    match reply {
        Reply::Lease(view) => view.clone(),
        other => panic!("expected a lease, got {other:?}"),
    }
}

#[track_caller]
fn rejection(reply: &Reply) -> Rejection {
    match reply {
        Reply::Rejected(rejection) => rejection.clone(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[track_caller]
fn reclaimed(reply: &Reply) -> Vec<(String, u64)> {
    match reply {
        Reply::Reclaimed(views) => views
            .iter()
            .map(|v| {
                assert_eq!(v.status, LeaseStatus::Reclaimed);
                (v.lease.resource.to_string(), v.lease.fencing_token)
            })
            .collect(),
        other => panic!("expected reclaims, got {other:?}"),
    }
}

#[test]
fn fencing_token_is_the_granting_entry_index() {
    let mut node = Node::new(0);
    node.index = 41;
    let first = granted(&node.acquire("world", "alice", Some(5_000)));
    assert_eq!(first.lease.fencing_token, 42);
    assert_eq!(first.lease.lease_id, "lse_42_0");

    // Blank and membership entries use up indexes too; renewals keep the token.
    node.index += 3;
    node.elapse(1_000);
    let renewed = lease(&node.renew("world", "alice", 42, None));
    assert_eq!(renewed.lease.fencing_token, 42);
    assert_eq!(
        lease(&node.release("world", "alice", 42)).status,
        LeaseStatus::Released
    );

    let second = granted(&node.acquire("world", "bob", Some(5_000)));
    assert_eq!(node.index, 48);
    assert_eq!(second.lease.fencing_token, 48);
    assert_eq!(second.lease.lease_id, "lse_48_0");
}

#[test]
fn acquire_grants_a_free_resource_for_the_ttl() {
    let mut node = Node::new(0);
    node.tick();
    node.elapse(2_500);
    let view = granted(&node.acquire("world", "alice", Some(7_000)));
    assert_eq!(view.status, LeaseStatus::Active);
    assert_eq!(view.lease.holder, "alice");
    assert_eq!(view.lease.principal, "alice");
    assert_eq!(view.lease.acquired_at_ms, 2_500);
    assert_eq!(view.lease.expires_at_ms, 9_500);
    assert_eq!(view.lease.ttl_ms, 7_000);
    assert_eq!(view.remaining_ms, 7_000);

    let default_ttl = granted(&node.acquire("seat", "alice", None));
    assert_eq!(default_ttl.lease.ttl_ms, 60_000);
    assert_eq!(default_ttl.lease.expires_at_ms, 62_500);
}

#[test]
fn acquire_ttl_outside_one_second_to_max_ttl_is_out_of_range() {
    let mut node = Node::new(0);
    for ttl_ms in [0, 500, 999, DAY_MS + 1, u64::MAX] {
        assert_eq!(
            rejection(&node.acquire("world", "alice", Some(ttl_ms))),
            Rejection::TtlOutOfRange {
                ttl_ms,
                min_ms: 1_000,
                max_ms: DAY_MS
            }
        );
    }
    assert!(node.state.resource_view("world").leases.is_empty());
    assert_eq!(
        granted(&node.acquire("a", "alice", Some(1_000)))
            .lease
            .ttl_ms,
        1_000
    );
    assert_eq!(
        granted(&node.acquire("b", "alice", Some(DAY_MS)))
            .lease
            .ttl_ms,
        DAY_MS
    );
}

#[test]
fn acquire_of_a_held_resource_is_refused_with_the_current_holder() {
    let mut node = Node::new(0);
    let alice = granted(&node.acquire("world", "alice", Some(5_000)));
    node.elapse(1_000);
    let holders = refused(&node.acquire("world", "bob", Some(5_000)));
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lease, alice.lease);
    assert_eq!(holders[0].remaining_ms, 4_000);
}

#[test]
fn acquire_is_idempotent_for_the_same_holder_and_does_not_extend_ttl() {
    let mut node = Node::new(0);
    let first = granted(&node.acquire("world", "alice", Some(10_000)));
    node.elapse(4_000);
    let again = granted(&node.acquire("world", "alice", Some(30_000)));
    assert_eq!(
        again.lease, first.lease,
        "same lease_id, token, expiry and ttl"
    );
    assert_eq!(again.lease.expires_at_ms, 10_000);
    assert_eq!(again.remaining_ms, 6_000);
    assert_eq!(again.status, LeaseStatus::Active);

    // The first expiry stands: bob gets the resource at 10 s, not at 34 s.
    node.elapse(5_999);
    refused(&node.acquire("world", "bob", Some(5_000)));
    node.elapse(1);
    let bob = granted(&node.acquire("world", "bob", Some(5_000)));
    assert_eq!(bob.lease.fencing_token, 4);
}

#[test]
fn renew_requires_the_current_fencing_token() {
    let mut node = Node::new(0);
    let old = granted(&node.acquire("world", "alice", Some(5_000)))
        .lease
        .fencing_token;
    lease(&node.release("world", "alice", old));
    let current = granted(&node.acquire("world", "alice", Some(5_000)))
        .lease
        .fencing_token;
    assert_eq!((old, current), (1, 3));

    let stale = rejection(&node.renew("world", "alice", old, Some(5_000)));
    assert_eq!(
        stale,
        Rejection::StaleFencingToken {
            expected: 3,
            got: 1
        }
    );
    assert_eq!(stale.reason(), "stale_fencing_token");
    assert_eq!(stale.to_string(), "stale fencing token (expected 3, got 1)");
    assert_eq!(
        rejection(&node.renew("world", "alice", 0, None)).reason(),
        "stale_fencing_token"
    );
    assert_eq!(
        rejection(&node.release("world", "alice", 7)),
        Rejection::StaleFencingToken {
            expected: 3,
            got: 7
        }
    );
    assert_eq!(
        lease(&node.renew("world", "alice", current, None))
            .lease
            .fencing_token,
        3
    );
}

#[test]
fn renew_by_another_holder_is_insufficient_permissions() {
    let mut node = Node::new(0);
    let alice = granted(&node.acquire("world", "alice", Some(5_000))).lease;
    let by_id = Op::Renew(RenewOp {
        resource: "world".into(),
        lease_id: alice.lease_id.clone().to_string(),
        holder: "bob".into(),
        fencing_token: alice.fencing_token,
        ttl_ms: None,
    });
    assert_eq!(
        rejection(&node.propose_as("bob", false, None, by_id)).reason(),
        "insufficient_permissions"
    );
    // CHOICE: with no lease_id, the request names bob's own lease, and bob has none.
    assert_eq!(
        rejection(&node.renew("world", "bob", alice.fencing_token, None)).reason(),
        "lease_not_found"
    );
}

#[test]
fn renew_by_another_principal_needs_an_admin() {
    let mut node = Node::new(0);
    let token = granted(&node.acquire("world", "alice", Some(5_000)))
        .lease
        .fencing_token;
    let op = renew_op("world", "alice", token, Some(8_000));
    assert_eq!(
        rejection(&node.propose_as("mallory", false, None, op.clone())).reason(),
        "insufficient_permissions"
    );
    let by_admin = lease(&node.propose_as("root", true, None, op));
    assert_eq!(by_admin.lease.expires_at_ms, 8_000);
    assert_eq!(by_admin.lease.principal, "alice");
}

#[test]
fn renew_replaces_expiry_and_a_shorter_ttl_shortens() {
    let mut node = Node::new(0);
    let token = granted(&node.acquire("world", "alice", Some(10_000)))
        .lease
        .fencing_token;
    node.elapse(2_000);
    let renewed = lease(&node.renew("world", "alice", token, Some(3_000)));
    assert_eq!(
        renewed.lease.expires_at_ms, 5_000,
        "now + ttl, not 10 s + 3 s"
    );
    assert_eq!(renewed.lease.ttl_ms, 3_000);
    assert_eq!(renewed.lease.acquired_at_ms, 0);
    assert_eq!(renewed.remaining_ms, 3_000);
    assert_eq!(renewed.status, LeaseStatus::Active);

    node.elapse(2_999);
    refused(&node.acquire("world", "bob", None));
    node.elapse(1);
    assert_eq!(
        granted(&node.acquire("world", "bob", None)).lease.holder,
        "bob"
    );
}

#[test]
fn renew_without_ttl_reuses_the_last_ttl() {
    let mut node = Node::new(0);
    let token = granted(&node.acquire("world", "alice", Some(4_000)))
        .lease
        .fencing_token;
    node.elapse(1_000);
    assert_eq!(
        lease(&node.renew("world", "alice", token, Some(2_000)))
            .lease
            .expires_at_ms,
        3_000
    );
    node.elapse(1_000);
    let renewed = lease(&node.renew("world", "alice", token, None));
    assert_eq!(renewed.lease.expires_at_ms, 4_000);
    assert_eq!(renewed.lease.ttl_ms, 2_000);
}

#[test]
fn renew_with_an_out_of_range_ttl_is_rejected_before_the_lease_is_looked_at() {
    // SPEC §3: argument validation answers before existence, holder and token checks.
    let mut node = Node::new(0);
    let token = granted(&node.acquire("world", "alice", Some(5_000)))
        .lease
        .fencing_token;
    for ttl_ms in [500, DAY_MS + 1] {
        let expected = Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: 1_000,
            max_ms: DAY_MS,
        };
        assert_eq!(
            rejection(&node.renew("world", "alice", token, Some(ttl_ms))),
            expected
        );
        assert_eq!(
            rejection(&node.renew("world", "alice", 99, Some(ttl_ms))),
            expected
        );
        assert_eq!(
            rejection(&node.renew("nowhere", "bob", 1, Some(ttl_ms))),
            expected
        );
    }
    let view = node.state.resource_view("world");
    assert_eq!(view.leases[0].lease.expires_at_ms, 5_000, "unchanged");
}

#[test]
fn renew_of_a_reclaimed_lease_is_lease_expired_and_of_a_released_one_lease_not_found() {
    let mut node = Node::new(0);
    let reclaimed_token = granted(&node.acquire("world", "alice", Some(1_000)))
        .lease
        .fencing_token;
    let released_token = granted(&node.acquire("seat", "alice", Some(9_000)))
        .lease
        .fencing_token;
    lease(&node.release("seat", "alice", released_token));
    node.elapse(1_000);

    assert_eq!(
        rejection(&node.renew("world", "alice", reclaimed_token, None)),
        Rejection::LeaseExpired
    );
    assert_eq!(
        rejection(&node.release("world", "alice", reclaimed_token)).reason(),
        "lease_expired"
    );
    assert_eq!(
        rejection(&node.renew("seat", "alice", released_token, None)).reason(),
        "lease_not_found"
    );
    assert_eq!(
        rejection(&node.release("seat", "alice", released_token)).reason(),
        "lease_not_found"
    );
    assert_eq!(
        rejection(&node.renew("never-held", "alice", 1, None)).reason(),
        "lease_not_found"
    );
}

#[test]
fn release_frees_the_resource_at_once() {
    let mut node = Node::new(0);
    let token = granted(&node.acquire("world", "alice", Some(60_000)))
        .lease
        .fencing_token;
    node.elapse(1_000);
    let released = lease(&node.release("world", "alice", token));
    assert_eq!(released.status, LeaseStatus::Released);
    assert_eq!(released.remaining_ms, 0);
    assert_eq!(released.lease.fencing_token, token);
    assert!(node.state.resource_view("world").leases.is_empty());
    assert_eq!(node.state.live_leases(), 0);
    let verdict = node
        .state
        .validate("world", &released.lease.lease_id, token, None);
    assert!(!verdict.valid);
    assert_eq!(verdict.reason, "lease released");

    // Same lease-clock instant, next entry.
    let bob = granted(&node.acquire("world", "bob", Some(5_000)));
    assert_eq!(bob.lease.fencing_token, 3);
}

#[test]
fn lease_without_grace_is_reclaimed_exactly_at_expiry() {
    let mut node = Node::new(0);
    granted(&node.acquire("world", "alice", Some(1_000)));
    node.elapse(999);
    refused(&node.acquire("world", "bob", Some(1_000)));
    node.elapse(1);
    assert_eq!(
        granted(&node.acquire("world", "bob", Some(1_000)))
            .lease
            .fencing_token,
        3
    );
}

#[test]
fn lease_in_renewal_grace_keeps_the_resource() {
    let mut node = Node::new(2_000);
    let alice = granted(&node.acquire("world", "alice", Some(3_000))).lease;
    node.elapse(3_000);
    node.tick();

    // Past expiry, inside grace: others are refused, Validate says expired, the holder's
    // acquire returns the same lease (CHOICE: shown as GRACE), and the holder may renew.
    let holders = refused(&node.acquire("world", "bob", Some(3_000)));
    assert_eq!(holders[0].status, LeaseStatus::Grace);
    assert_eq!(holders[0].remaining_ms, 0);
    let verdict = node
        .state
        .validate("world", &alice.lease_id, alice.fencing_token, None);
    assert!(!verdict.valid);
    assert_eq!(verdict.reason, "lease expired");
    let again = granted(&node.acquire("world", "alice", Some(3_000)));
    assert_eq!(again.lease, alice);
    assert_eq!(again.status, LeaseStatus::Grace);

    node.elapse(1_999);
    let renewed = lease(&node.renew("world", "alice", alice.fencing_token, None));
    assert_eq!(renewed.status, LeaseStatus::Active);
    assert_eq!(renewed.lease.expires_at_ms, 4_999 + 3_000);
    assert!(
        node.state
            .validate("world", &alice.lease_id, alice.fencing_token, None)
            .valid
    );
}

#[test]
fn reclaim_after_grace_lets_another_holder_acquire_with_a_higher_token() {
    let mut node = Node::new(2_000);
    let alice = granted(&node.acquire("world", "alice", Some(3_000))).lease;
    node.elapse(4_999);
    assert_eq!(reclaimed(&node.tick()), vec![]);
    refused(&node.acquire("world", "bob", Some(3_000)));

    node.elapse(1);
    assert_eq!(reclaimed(&node.tick()), vec![("world".to_string(), 1)]);
    assert_eq!(node.state.live_leases(), 0);
    let bob = granted(&node.acquire("world", "bob", Some(3_000))).lease;
    assert_eq!(bob.fencing_token, 5);
    assert!(bob.fencing_token > alice.fencing_token);
    assert_eq!(
        rejection(&node.renew("world", "alice", alice.fencing_token, None)),
        Rejection::LeaseExpired
    );
    let verdict = node
        .state
        .validate("world", &alice.lease_id, alice.fencing_token, None);
    assert_eq!(
        (verdict.valid, verdict.reason.as_str()),
        (false, "lease expired")
    );
}

#[test]
fn any_entry_reclaims_what_is_due_before_it_is_applied() {
    let mut node = Node::new(0);
    granted(&node.acquire("world", "alice", Some(2_000)));
    node.elapse(2_000);
    // No Tick in between: bob's own acquire entry reclaims alice's lease first.
    let bob = granted(&node.acquire("world", "bob", Some(2_000)));
    assert_eq!(bob.lease.fencing_token, 2);
    assert_eq!(bob.lease.acquired_at_ms, 2_000);
}

#[test]
fn request_id_retry_returns_the_original_reply() {
    let mut node = Node::new(0);
    let op = acquire_op("world", "alice", Some(5_000));
    let first = node.propose_as("alice", false, Some("req-1"), op.clone());
    let token = granted(&first).lease.fencing_token;
    lease(&node.release("world", "alice", token));
    node.elapse(1_000);
    let bob = granted(&node.acquire("world", "bob", Some(5_000))).lease;

    let retry = node.propose_as("alice", false, Some("req-1"), op);
    assert_eq!(retry, first, "the original grant, applied once");
    let holder = &node.state.resource_view("world").leases[0].lease;
    assert_eq!(holder, &bob, "the retry changed nothing");

    // A rejection is remembered too.
    let renew = renew_op("world", "alice", 999, None);
    let rejected = node.propose_as("alice", false, Some("req-2"), renew.clone());
    assert_eq!(rejection(&rejected).reason(), "lease_not_found");
    assert_eq!(
        node.propose_as("alice", false, Some("req-2"), renew),
        rejected
    );
}

#[test]
fn request_id_reused_for_another_request_is_invalid_argument() {
    let mut node = Node::new(0);
    granted(&node.propose_as(
        "alice",
        false,
        Some("req-1"),
        acquire_op("world", "alice", None),
    ));
    let other = node.propose_as(
        "alice",
        false,
        Some("req-1"),
        acquire_op("seat", "alice", None),
    );
    assert_eq!(
        rejection(&other),
        Rejection::InvalidArgument {
            field: "request_id".into(),
            problem: "already used with a different request".into(),
        }
    );
    assert_eq!(rejection(&other).reason(), "invalid_argument");
    assert!(node.state.resource_view("seat").leases.is_empty());
}

#[test]
fn request_id_is_per_principal() {
    let mut node = Node::new(0);
    granted(&node.propose_as(
        "alice",
        false,
        Some("req-1"),
        acquire_op("world", "alice", None),
    ));
    let bob = node.propose_as("bob", false, Some("req-1"), acquire_op("seat", "bob", None));
    assert_eq!(granted(&bob).lease.holder, "bob");
}

#[test]
fn leader_change_does_not_shorten_a_lease() {
    let mut node = Node::new(0);
    let alice = granted(&node.acquire("world", "alice", Some(10_000))).lease;
    node.elapse(4_000);
    node.tick();
    assert_eq!(node.now_ms(), 4_000);

    // The new leader's monotonic clock reads an hour ahead: no time passes across the change.
    node.elect(LEADER_B, node.mono_ms + HOUR_MS);
    node.tick();
    assert_eq!(node.now_ms(), 4_000);
    assert!(
        node.state
            .validate("world", &alice.lease_id, alice.fencing_token, None)
            .valid
    );
    node.elapse(5_999);
    refused(&node.acquire("world", "bob", Some(5_000)));
    assert_eq!(node.now_ms(), 9_999);

    // The next leader's clock reads far behind (a reboot): still no time lost, none gained.
    node.elect(LEADER_C, 3);
    refused(&node.acquire("world", "bob", Some(5_000)));
    assert_eq!(node.now_ms(), 9_999);
    node.elapse(1);
    let bob = granted(&node.acquire("world", "bob", Some(5_000))).lease;
    assert_eq!(node.now_ms(), 10_000);
    assert_eq!(bob.fencing_token, node.index);
}

#[test]
fn snapshot_restore_rebuilds_the_reclaim_index() {
    let mut node = Node::new(1_000);
    granted(&node.acquire("world", "alice", Some(3_000)));
    granted(&node.acquire("seat", "bob", Some(2_000)));
    let bytes = encode_state(&node.state).expect("state serializes");
    let restored = decode_state(&bytes).expect("state deserializes");
    assert_eq!(restored.live_leases(), 2);
    assert_eq!(restored.next_due_ms(), Some(3_000));
    assert_eq!(restored, node.state);
}

#[test]
fn plan_ticks_right_after_a_leader_change() {
    assert_eq!(
        plan(&State::default(), LEADER_A, at(5), 500),
        Plan::Propose(Op::Tick)
    );

    let mut node = Node::new(0);
    granted(&node.acquire("world", "alice", Some(10_000)));
    let b_mono_ms = node.mono_ms + HOUR_MS;
    assert_eq!(
        plan(&node.state, LEADER_B, at(b_mono_ms), 500),
        Plan::Propose(Op::Tick)
    );

    // Once B's Tick is applied, B plans by its own clock.
    node.elect(LEADER_B, b_mono_ms);
    node.tick();
    assert_eq!(
        plan(&node.state, LEADER_B, at(b_mono_ms + 100), 500),
        Plan::Wait(400)
    );
    assert_eq!(
        plan(&node.state, LEADER_A, at(b_mono_ms + 100), 500),
        Plan::Propose(Op::Tick)
    );
}

#[test]
fn plan_reclaims_a_lease_as_soon_as_it_is_due() {
    let mut node = Node::new(1_000);
    let token = granted(&node.acquire("world", "alice", Some(2_000)))
        .lease
        .fencing_token;
    // Anchored at mono 1 000 = lease time 0; due at expiry 2 000 + grace 1 000.
    assert_eq!(
        plan(&node.state, LEADER_A, at(3_999), 10_000),
        Plan::Wait(1)
    );
    let due = Op::Reclaim {
        leases: vec![("world".to_string(), token)],
    };
    assert_eq!(
        plan(&node.state, LEADER_A, at(4_000), 10_000),
        Plan::Propose(due.clone())
    );

    node.mono_ms = 4_000;
    let reply = node.propose_as(LEADER_PRINCIPAL, false, None, due);
    assert_eq!(reclaimed(&reply), vec![("world".to_string(), token)]);
    assert_eq!(
        plan(&node.state, LEADER_A, at(4_100), 10_000),
        Plan::Wait(10_000)
    );
}

#[test]
fn plan_waits_for_the_next_tick_or_the_next_due_lease_whichever_is_sooner() {
    let mut node = Node::new(0);
    granted(&node.acquire("world", "alice", Some(2_000)));
    assert_eq!(plan(&node.state, LEADER_A, at(1_100), 500), Plan::Wait(400));

    node.elapse(1_800);
    node.tick();
    assert_eq!(plan(&node.state, LEADER_A, at(2_900), 500), Plan::Wait(100));
}

#[test]
fn plan_ticks_when_the_committed_clock_is_a_tick_interval_old() {
    let mut node = Node::new(0);
    granted(&node.acquire("world", "alice", Some(10_000)));
    assert_eq!(plan(&node.state, LEADER_A, at(1_499), 500), Plan::Wait(1));
    assert_eq!(
        plan(&node.state, LEADER_A, at(1_500), 500),
        Plan::Propose(Op::Tick)
    );
}

#[test]
fn plan_waits_a_tick_interval_when_nothing_is_live() {
    let mut node = Node::new(0);
    node.tick();
    assert_eq!(
        plan(&node.state, LEADER_A, at(60_000), 500),
        Plan::Wait(500)
    );
}

/// The leader's clock reading at `mono_ms` (epoch 0, as every stamp in these tests).
fn at(mono_ms: u64) -> Stamp {
    Stamp {
        mono_ms,
        ..Stamp::default()
    }
}
