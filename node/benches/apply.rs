//! What applying one entry costs (`lease::apply`), against states of different sizes, so that
//! a regression in the state machine shows: `cargo bench -p tenure-node --bench apply`.
//!
//! Every node applies every entry, and the leader answers only after applying, so apply time
//! is on the path of every write. Each measured entry is a whole cycle that leaves the state as
//! it found it, so the state size stays what the benchmark names.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tenure_node::lease::command::SetQuotaOp;
use tenure_node::lease::quota::Quota;
use tenure_node::lease::{
    apply, AcquireOp, CancelWaitOp, Command, EntryMeta, LeaderKey, Mode, Op, Proposal, ReleaseOp,
    RenewOp, Reply, Stamp, State,
};

const LEADER: LeaderKey = LeaderKey {
    term: 1,
    node_id: 1,
};
const HOUR_MS: u64 = 3_600_000;

/// One leader's log applied to one state.
struct Log {
    state: State,
    index: u64,
    mono_ms: u64,
}

impl Log {
    /// A fresh state where the principal `bench` may hold a few million leases (its default
    /// quota is 100k), so that the quota checks run on every acquire as they would for any
    /// client.
    fn new() -> Self {
        let mut log = Log {
            state: State::default(),
            index: 0,
            mono_ms: 1_000,
        };
        let quota = SetQuotaOp {
            principal: Some("bench".into()),
            changes: vec![
                (Quota::Leases, Some(10_000_000)),
                (Quota::AdHocResources, Some(10_000_000)),
                (Quota::ExactlyOnceBytes, Some(1 << 30)),
            ],
        };
        log.propose(true, Op::SetQuota(quota));
        log
    }

    fn apply(&mut self, op: Op) -> Reply {
        self.propose(false, op)
    }

    fn propose(&mut self, admin: bool, op: Op) -> Reply {
        self.index += 1;
        // A millisecond per entry: time moves, nothing comes due within a run.
        self.mono_ms += 1;
        let proposal = Proposal {
            stamp: Stamp {
                mono_ms: self.mono_ms,
                wall_ms: 1_700_000_000_000 + self.mono_ms,
                clock_epoch: 0,
            },
            principal: "bench".into(),
            admin,
            request_id: Some(format!("req-{}", self.index)),
            require_registration: false,
            op,
        };
        let meta = EntryMeta {
            index: self.index,
            leader: LEADER,
        };
        apply(&mut self.state, meta, &Command::V1(proposal))
    }

    /// A state with `n` live leases of an hour on distinct resources.
    fn with_leases(n: usize) -> Self {
        let mut log = Log::new();
        for k in 0..n {
            log.apply(Op::Acquire(acquire(&format!("held/{k}"), "holder", None)));
        }
        log
    }
}

fn acquire(resource: &str, holder: &str, wait_ms: Option<u64>) -> AcquireOp {
    AcquireOp {
        resource: resource.into(),
        holder: holder.into(),
        ttl_ms: Some(HOUR_MS),
        mode: Mode::Exclusive,
        units: 0,
        metadata: Default::default(),
        idempotency_key: None,
        wait_ms,
    }
}

/// The (lease id, token) a granted acquire answered.
fn grant(reply: &Reply) -> (String, u64) {
    match reply {
        Reply::Acquire(outcome) => {
            let view = outcome
                .lease
                .as_ref()
                .expect("the bench's acquires are granted");
            (view.lease.lease_id().to_string(), view.lease.fencing_token)
        }
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn release(resource: &str, holder: &str, (lease_id, fencing_token): (String, u64)) -> Op {
    Op::Release(ReleaseOp {
        resource: resource.into(),
        lease_id,
        holder: holder.into(),
        fencing_token,
    })
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("apply");
    for n in [1_000usize, 100_000] {
        let mut log = Log::with_leases(n);
        // Acquire + release of a fresh resource: two entries.
        group.bench_with_input(BenchmarkId::new("acquire_release", n), &n, |b, _| {
            b.iter(|| {
                let granted = grant(&log.apply(Op::Acquire(acquire("cycle", "c", None))));
                black_box(log.apply(release("cycle", "c", granted)));
            })
        });
        // Renew of a live lease: one entry.
        let lease = grant(&log.apply(Op::Acquire(acquire("renewed", "r", None))));
        group.bench_with_input(BenchmarkId::new("renew", n), &n, |b, _| {
            b.iter(|| {
                black_box(log.apply(Op::Renew(RenewOp {
                    resource: "renewed".into(),
                    lease_id: lease.0.clone(),
                    holder: "r".into(),
                    fencing_token: lease.1,
                    ttl_ms: Some(HOUR_MS),
                })))
            })
        });
    }
    // A handoff through a waiting room of 64: the holder releases, the head is admitted in
    // the same entry, then re-queues at the back; three entries.
    let mut log = Log::new();
    let mut holder = grant(&log.apply(Op::Acquire(acquire("room", "w0", None))));
    let mut holding = 0usize;
    for k in 1..=64 {
        log.apply(Op::Acquire(acquire(
            "room",
            &format!("w{k}"),
            Some(HOUR_MS),
        )));
    }
    group.bench_function("handoff_64_waiters", |b| {
        b.iter(|| {
            let name = format!("w{holding}");
            log.apply(release("room", &name, holder.clone()));
            let admitted = log.state.effects().waits[0].clone();
            log.apply(Op::Acquire(acquire("room", &name, Some(HOUR_MS))));
            holding = admitted.holder[1..].parse().expect("w<k>");
            let view = admitted.outcome.lease.expect("admitted");
            holder = (view.lease.lease_id().to_string(), view.lease.fencing_token);
        })
    });
    // Queue and cancel behind a held resource: two entries.
    group.bench_function("queue_cancel", |b| {
        b.iter(|| {
            log.apply(Op::Acquire(acquire("room", "passer-by", Some(HOUR_MS))));
            black_box(log.apply(Op::CancelWait(CancelWaitOp {
                resource: "room".into(),
                holder: "passer-by".into(),
                wait_id: None,
            })))
        })
    });
    group.finish();
}

criterion_group!(apply_benches, benches);
criterion_main!(apply_benches);
