//! What checking a history costs, so a regression in the linearizability checker shows:
//! `cargo bench -p tenure-jepsen --bench checker`.
//!
//! The histories are simulations of a correct cluster (`checker::sim::correct_history`): three
//! clients per exclusive resource, acquire/renew/release/read, 4 % of ops timing out with an
//! unknown outcome (each one multiplies the states the search must keep), as a fault run
//! records them. A correct history must check clean; the benchmark asserts that too.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tenure_jepsen::checker::sim::correct_history;
use tenure_jepsen::checker::{check, CheckParams};

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("check");
    group.sample_size(10);
    let params = CheckParams {
        clock_epsilon: 0.02,
        max_states_per_resource: 2_000_000,
    };
    for (resources, ops) in [(1, 500), (1, 2_000), (8, 500)] {
        let history = correct_history(resources, ops, 7, 4, 200);
        assert!(
            check(&history, &params).ok(),
            "a correct history checks clean"
        );
        group.bench_with_input(
            BenchmarkId::new(format!("{resources}_resources"), ops),
            &history,
            |b, history| b.iter(|| black_box(check(history, &params))),
        );
    }
    group.finish();
}

criterion_group!(checker_benches, benches);
criterion_main!(checker_benches);
