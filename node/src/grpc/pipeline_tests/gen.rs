//! The generators: random protobuf requests of every kind, mostly valid, sometimes malformed
//! in one field.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use tenure_proto::v1 as pb;

use tenure_lease::testkit::{Caller, ALICE, BOB, ROOT};

pub(super) const CALLERS: [Caller; 3] = [ALICE, BOB, ROOT];
/// Valid names first; `name_index` favours them.
pub(super) const RESOURCES: [&str; 6] = ["db", "pool", "adhoc", "", "bad name", "r\u{e9}s"];
pub(super) const HOLDERS: [&str; 5] = ["h1", "h2", "h3", "", "bad holder"];
pub(super) const LABELS: [&str; 5] = ["", "label", "ctl\u{7}", "\u{fc}nicode", "long"];
pub(super) const DAY_S: i64 = 86_400;

pub(super) fn label(i: usize) -> String {
    match LABELS[i % LABELS.len()] {
        "long" => "x".repeat(257),
        other => other.to_string(),
    }
}

pub(super) fn name_index() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0..3usize, 1 => 3..RESOURCES.len()]
}

pub(super) fn holder_index() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0..3usize, 1 => 3..HOLDERS.len()]
}

/// Mostly valid labels: "label", then "", then the malformed ones.
pub(super) fn label_index() -> impl Strategy<Value = usize> {
    prop_oneof![10 => Just(1usize), 3 => Just(0usize), 1 => 2..LABELS.len()]
}

/// A duration that is malformed, negative, zero or past every ceiling.
pub(super) fn junk_duration() -> impl Strategy<Value = Option<prost_types::Duration>> {
    prop::sample::select(vec![
        (-1i64, 0i32),
        (0, 0),
        (0, 999_999_999),
        (1, -1),
        (1, 1_000_000_000),
        (DAY_S + 1, 0),
        (90 * DAY_S, 0),
        (90 * DAY_S + 1, 0),
        (i64::MAX, 999_999_999),
        (i64::MIN, 0),
    ])
    .prop_map(|(seconds, nanos)| Some(prost_types::Duration { seconds, nanos }))
}

/// Absent (weight `none_weight`), whole seconds in `seconds` (weight 6), or junk (weight 1).
pub(super) fn duration(
    none_weight: u32,
    seconds: std::ops::Range<i64>,
) -> impl Strategy<Value = Option<prost_types::Duration>> {
    prop_oneof![
        none_weight => Just(None),
        6 => seconds.prop_map(|seconds| Some(prost_types::Duration { seconds, nanos: 0 })),
        1 => junk_duration(),
    ]
}

pub(super) fn mode() -> impl Strategy<Value = i32> {
    prop_oneof![12 => 0i32..4, 1 => prop::sample::select(vec![-1i32, 4, 99, i32::MAX])]
}

/// Mostly coherent policies (short ttls so that Ticks reclaim), sometimes not.
pub(super) fn policy() -> impl Strategy<Value = pb::Policy> {
    let durations = (
        duration(1, 1..20),
        duration(2, 20..120),
        prop_oneof![3 => Just(None), 1 => duration(0, 20..300)],
        duration(2, 0..10),
        prop_oneof![2 => Just(None), 1 => duration(0, 0..10)],
    );
    let shared_mode = prop_oneof![10 => 2i32..4, 1 => prop::sample::select(vec![0i32, 1, -1, 99])];
    let sharing = (
        any::<bool>(),
        vec(shared_mode, 0..3),
        prop::sample::select(vec![0u64, 0, 1, 3, 4, u64::MAX]),
    );
    let limits = (
        prop_oneof![8 => Just(0u32), 1 => prop::sample::select(vec![1u32, 10, 1_000_001])],
        prop_oneof![8 => Just(0u32), 1 => prop::sample::select(vec![8u32, 16_384, 16_385])],
        label_index(),
        label_index(),
        vec((label_index(), label_index()), 0..3),
    );
    (durations, sharing, limits).prop_map(
        |(
            (default_ttl, max_ttl, max_lifetime, renewal_grace, lock_delay),
            (transferable, shared_modes, total_units),
            (max_waiters, max_metadata_bytes, kind, display_name, fsm),
        )| pb::Policy {
            default_ttl,
            max_ttl,
            max_lifetime,
            renewal_grace,
            transferable,
            shared_modes,
            total_units,
            lock_delay,
            max_waiters,
            max_metadata_bytes,
            kind: label(kind),
            display_name: label(display_name),
            fsm_requirements: fsm
                .into_iter()
                .map(|(m, t)| pb::FsmRequirement {
                    machine: label(m),
                    transition: label(t),
                })
                .collect(),
            bookable: transferable,
            max_holders: 0,
        },
    )
}

/// How a renew, release, transfer or validate names its lease: one seen earlier (or junk when
/// none was), with each field kept or spoiled.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub lease: Index,
    pub lease_id: u8,
    pub holder: Option<usize>,
    pub token: u8,
}

pub(super) fn target() -> impl Strategy<Value = Target> {
    (
        any::<Index>(),
        prop_oneof![12 => Just(0u8), 1 => 1..3u8],
        prop_oneof![10 => Just(None), 1 => holder_index().prop_map(Some)],
        prop_oneof![10 => Just(0u8), 1 => 1..4u8],
    )
        .prop_map(|(lease, lease_id, holder, token)| Target {
            lease,
            lease_id,
            holder,
            token,
        })
}

#[derive(Clone, Debug)]
pub(super) enum Step {
    Create {
        name: usize,
        kind: usize,
        policy: Option<pb::Policy>,
    },
    Acquire {
        resource: usize,
        holder: usize,
        ttl: Option<prost_types::Duration>,
        mode: i32,
        units: u64,
        metadata_bytes: usize,
        on_conflict: i32,
        idempotency_key: Option<u8>,
    },
    Renew {
        target: Target,
        ttl: Option<prost_types::Duration>,
    },
    Release {
        target: Target,
    },
    Transfer {
        target: Target,
        to_holder: usize,
        to_principal: usize,
    },
    Tick(u64),
    Read(Read),
    CancelWait {
        resource: usize,
        holder: usize,
    },
    /// A booking starting this long after the clock's start (may be in the past), or its
    /// cancellation.
    Book {
        resource: usize,
        holder: usize,
        start_s: i64,
        duration_s: i64,
        cancel: bool,
    },
}

#[derive(Clone, Debug)]
pub(super) enum Read {
    Get(usize, i32),
    Resources {
        prefix: usize,
        page_size: u32,
        page_token: usize,
    },
    Leases {
        holder: usize,
        principal: usize,
        page_size: u32,
        page_token: usize,
    },
    History {
        resource: usize,
        page_size: u32,
        page_token: usize,
        order: i32,
        events: Vec<i32>,
    },
    Validate {
        target: Target,
        fsm: (usize, usize),
        consistency: i32,
    },
}

pub(super) fn page_size() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0u32, 1, 2, 1_000, 1_001, u32::MAX])
}

pub(super) fn read() -> impl Strategy<Value = Read> {
    prop_oneof![
        (name_index(), prop_oneof![8 => 0i32..3, 1 => Just(7i32)])
            .prop_map(|(n, c)| Read::Get(n, c)),
        (0..5usize, page_size(), 0..4usize).prop_map(|(prefix, page_size, page_token)| {
            Read::Resources {
                prefix,
                page_size,
                page_token,
            }
        }),
        (0..HOLDERS.len(), 0..5usize, page_size(), 0..5usize).prop_map(
            |(holder, principal, page_size, page_token)| Read::Leases {
                holder,
                principal,
                page_size,
                page_token,
            }
        ),
        (
            name_index(),
            page_size(),
            0..5usize,
            -1i32..4,
            vec(-1i32..14, 0..3)
        )
            .prop_map(
                |(resource, page_size, page_token, order, events)| Read::History {
                    resource,
                    page_size,
                    page_token,
                    order,
                    events,
                }
            ),
        (
            target(),
            (label_index(), label_index()),
            prop_oneof![8 => 0i32..3, 1 => Just(-1i32)]
        )
            .prop_map(|(target, fsm, consistency)| Read::Validate {
                target,
                fsm,
                consistency,
            }),
    ]
}

pub(super) fn step() -> impl Strategy<Value = Step> {
    let acquire = (
        (name_index(), holder_index(), duration(2, 1..60), mode()),
        prop::sample::select(vec![0u64, 0, 1, 1, 2, 3, 5, u64::MAX / 2 + 1, u64::MAX]),
        prop_oneof![12 => Just(0usize), 2 => Just(10usize), 1 => Just(20_000usize)],
        prop_oneof![8 => Just(0i32), 4 => Just(2i32), 1 => -1i32..4],
        prop_oneof![3 => Just(None), 1 => (0..3u8).prop_map(Some)],
    )
        .prop_map(
            |(
                (resource, holder, ttl, mode),
                units,
                metadata_bytes,
                on_conflict,
                idempotency_key,
            )| {
                Step::Acquire {
                    resource,
                    holder,
                    ttl,
                    mode,
                    units,
                    metadata_bytes,
                    on_conflict,
                    idempotency_key,
                }
            },
        );
    prop_oneof![
        2 => (name_index(), label_index(), prop::option::weighted(0.9, policy()))
            .prop_map(|(name, kind, policy)| Step::Create { name, kind, policy }),
        10 => acquire,
        4 => (target(), duration(2, 1..60)).prop_map(|(target, ttl)| Step::Renew { target, ttl }),
        3 => target().prop_map(|target| Step::Release { target }),
        2 => (target(), holder_index(), label_index()).prop_map(
            |(target, to_holder, to_principal)| Step::Transfer {
                target,
                to_holder,
                to_principal,
            }
        ),
        3 => prop::sample::select(vec![0u64, 1, 999, 1_000, 5_000, 60_000, 3_600_000])
            .prop_map(Step::Tick),
        3 => read().prop_map(Step::Read),
        1 => (name_index(), holder_index())
            .prop_map(|(resource, holder)| Step::CancelWait { resource, holder }),
        1 => (
            name_index(),
            holder_index(),
            prop::sample::select(vec![-100i64, 0, 30, 60, 3_600, 40_000_000]),
            prop::sample::select(vec![-1i64, 0, 1, 60, 600, 100_000_000]),
            any::<bool>()
        )
            .prop_map(|(resource, holder, start_s, duration_s, cancel)| Step::Book {
                resource,
                holder,
                start_s,
                duration_s,
                cancel,
            }),
    ]
}

/// One proposal's envelope: who sends it and with which `request_id`.
#[derive(Clone, Debug)]
pub(super) struct Sent {
    pub caller: usize,
    pub request_id: Option<u8>,
    pub step: Step,
}

pub(super) fn sent() -> impl Strategy<Value = Sent> {
    (
        0..CALLERS.len(),
        prop_oneof![2 => Just(None), 1 => (0..4u8).prop_map(Some)],
        step(),
    )
        .prop_map(|(caller, request_id, step)| Sent {
            // Mostly the admin registers; a Tick is the leader's own, without a request_id.
            caller: match step {
                Step::Create { .. } if caller > 0 => 2,
                _ => caller,
            },
            request_id: match step {
                Step::Tick(_) => None,
                _ => request_id,
            },
            step,
        })
}
