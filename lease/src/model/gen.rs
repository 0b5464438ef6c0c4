//! What the property test generates: the stamps, principals and commands of random entries.

use proptest::prelude::*;
use proptest::sample::Index;

use crate::lease_clock::LeaderKey;
use crate::policy::{DAY_MS, SECOND_MS};

pub(super) const RESOURCES: [&str; 3] = ["world/eu-1", "seat:7", "shard_2.a"];
pub(super) const HOLDERS: [&str; 3] = ["alice", "bob", "carol"];
/// The leader's principal for the entries it proposes itself.
pub(super) const LEADER_PRINCIPAL: &str = "tenure-leader";

/// The lease clock as SPEC §5 defines it, kept by the test from the stamps it writes: under one
/// leader it advances by the (positive) monotonic difference, across a leader change by zero.
#[derive(Debug, Default)]
pub(super) struct StampClock {
    pub(super) now_ms: u64,
    /// The writing leader and the newest monotonic stamp seen from it.
    pub(super) anchor: Option<(LeaderKey, u64)>,
}

impl StampClock {
    pub(super) fn observe(&mut self, leader: LeaderKey, mono_ms: u64) {
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
pub(super) enum GenStamp {
    /// The same leader, its monotonic clock this much later.
    Advance(u64),
    /// A new leader whose monotonic clock reads an hour ahead of the old one's.
    NewLeaderAhead,
    /// A new leader whose monotonic clock reads this much behind the old one's.
    NewLeaderBehind(u64),
}

/// A value chosen when the step runs: the resource's current one, or one seen earlier.
#[derive(Clone, Debug)]
pub(super) enum Pick {
    Current,
    Seen(Index),
}

/// The resource a renew or release names.
#[derive(Clone, Debug)]
pub(super) enum ResourcePick {
    /// One of the resources that are held (by the model), or the first if none is.
    Held(Index),
    Fixed(usize),
}

#[derive(Clone, Debug)]
pub(super) enum HolderPick {
    /// The resource's current holder (by the model), or the first holder if it is free.
    Current,
    Fixed(usize),
}

#[derive(Clone, Debug)]
pub(super) enum GenPrincipal {
    /// The holder's own principal, `p-<holder>`.
    Own,
    /// Someone else, not an admin.
    Stranger,
    Admin,
}

#[derive(Clone, Debug)]
pub(super) enum GenOp {
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
pub(super) struct GenStep {
    pub(super) stamp: GenStamp,
    /// Entries between commands (blank, membership) still use up log indexes.
    pub(super) index_gap: u64,
    pub(super) principal: GenPrincipal,
    pub(super) request_id: Option<u8>,
    pub(super) op: GenOp,
}

pub(super) fn ttl_strategy() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        12 => (SECOND_MS..=10 * SECOND_MS).prop_map(Some),
        1 => Just(None),
        2 => prop::sample::select(vec![0, 500, 999, DAY_MS + 1, 90 * DAY_MS, u64::MAX])
            .prop_map(Some),
        1 => prop::sample::select(vec![SECOND_MS, DAY_MS]).prop_map(Some),
    ]
}

pub(super) fn pick_strategy() -> impl Strategy<Value = Pick> {
    prop_oneof![3 => Just(Pick::Current), 1 => any::<Index>().prop_map(Pick::Seen)]
}

pub(super) fn lease_id_strategy() -> impl Strategy<Value = Option<Pick>> {
    prop_oneof![2 => Just(None), 1 => pick_strategy().prop_map(Some)]
}

pub(super) fn resource_strategy() -> impl Strategy<Value = ResourcePick> {
    prop_oneof![
        3 => any::<Index>().prop_map(ResourcePick::Held),
        1 => (0..3usize).prop_map(ResourcePick::Fixed),
    ]
}

pub(super) fn holder_strategy() -> impl Strategy<Value = HolderPick> {
    prop_oneof![3 => Just(HolderPick::Current), 1 => (0..3usize).prop_map(HolderPick::Fixed)]
}

pub(super) fn op_strategy() -> impl Strategy<Value = GenOp> {
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

pub(super) fn step_strategy() -> impl Strategy<Value = GenStep> {
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
