//! The honest clients: lock cycles on names of their own, their latencies recorded by phase.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tenure_client::{pb, prost_duration, release_request, Client};

const TTL: Duration = Duration::from_secs(30);

/// The honest clients' latencies, by phase.
pub(super) struct Recorder {
    pub(super) phase: AtomicUsize,
    pub(super) latencies: Mutex<Vec<Histogram<u64>>>,
    pub(super) errors: Vec<AtomicU64>,
}

impl Recorder {
    pub(super) fn new(phases: usize) -> Self {
        Recorder {
            phase: AtomicUsize::new(0),
            latencies: Mutex::new(
                (0..phases)
                    .map(|_| Histogram::new(3).expect("a histogram"))
                    .collect(),
            ),
            errors: (0..phases).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(super) fn record(&self, took: Duration) {
        let phase = self.phase.load(Ordering::Relaxed);
        let mut latencies = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
        let _ = latencies[phase].record(took.as_micros() as u64);
    }

    pub(super) fn error(&self) {
        self.errors[self.phase.load(Ordering::Relaxed)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Lock cycles (acquire, release) on names of its own until `stop`.
pub(super) async fn honest(
    client: Client,
    id: usize,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let started = Instant::now();
        let request = pb::AcquireRequest {
            resource: format!("honest/{id}/{}", n % 64),
            holder: format!("h{id}"),
            ttl: Some(prost_duration(TTL)),
            ..Default::default()
        };
        let cycle = async {
            let response = client.acquire(request).await?;
            let lease = response
                .lease
                .ok_or_else(|| anyhow::anyhow!("not granted: {}", response.reason))?;
            client.release(release_request(&lease)).await?;
            anyhow::Ok(())
        };
        match cycle.await {
            Ok(()) => recorder.record(started.elapsed()),
            Err(_) => recorder.error(),
        }
    }
}
