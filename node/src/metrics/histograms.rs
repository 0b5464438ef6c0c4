//! Histogram buckets: of gRPC calls and of applying an entry.

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// Call latency buckets from 50 µs to ≈ 13 s, ×4 apart.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 4.0, 10))
}

/// Apply latency buckets from 1 µs to ≈ 0.5 s, ×2 apart (an entry applies in microseconds).
pub fn apply_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_001, 2.0, 20))
}
