//! Building a snapshot: the applied state copied under the read lock, then encoded and made
//! durable on a low-priority thread of its own while apply goes on.

use openraft::RaftSnapshotBuilder;

use super::{sm_err, StateMachineStore};
use crate::store::snapshot::{self, Writer};
use crate::store::{StorageStats, TypeConfig};

/// Runs `work` on a thread of its own at the lowest CPU priority (nice 19). A snapshot of a
/// million leases is seconds of CPU; on a busy node it takes what apply, replication and the
/// RPCs leave, instead of a core's share from them (renew throughput at 1M leases fell by a
/// third while one was built). Not on tokio's blocking pool: a pool thread keeps its
/// priority, and the log's fsyncs run there.
async fn in_the_background<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("snapshot".into())
        .spawn(move || {
            crate::store::lowest_priority();
            let _ = done.send(work());
        })?;
    Ok(result.await?)
}

/// What a build cost: the CPU time of the thread that built it, and the process's resident
/// memory before and after.
struct Cost {
    cpu_micros: u64,
    rss_before: u64,
    rss_after: u64,
}

impl Cost {
    fn now() -> Cost {
        Cost {
            cpu_micros: thread_cpu_micros(),
            rss_before: resident_bytes(),
            rss_after: 0,
        }
    }

    fn since(self) -> Cost {
        Cost {
            cpu_micros: thread_cpu_micros().saturating_sub(self.cpu_micros),
            rss_before: self.rss_before,
            rss_after: resident_bytes(),
        }
    }
}

/// The CPU time of the calling thread so far (0 where the clock cannot be read).
fn thread_cpu_micros() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        (t.tv_sec() as u64) * 1_000_000 + (t.tv_nsec() as u64) / 1_000
    })
}

/// The process's resident bytes (`/proc/self/statm`, pages of 4 KiB; 0 if unreadable).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Marks a snapshot build in the stats for as long as it lives, failed builds included.
struct Building<'a>(&'a StorageStats);

impl<'a> Building<'a> {
    fn start(stats: &'a StorageStats) -> Self {
        StorageStats::set(&stats.snapshot_building, 1);
        Building(stats)
    }
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        StorageStats::set(&self.0.snapshot_building, 0);
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = tokio::fs::File;

    async fn build_snapshot(&mut self) -> Result<super::Snapshot, std::io::Error> {
        let started = std::time::Instant::now();
        let _building = Building::start(&self.shared.stats);
        let shared = self.shared.clone();
        let (meta, file, cost) = in_the_background(move || {
            let _building = shared.building.lock().unwrap_or_else(|p| p.into_inner());
            let before = Cost::now();
            // An O(1) copy under the read lock (the state's maps are persistent), then the
            // encoding and the fsync off it: apply goes on meanwhile, copying only the map
            // nodes and resources it changes.
            let (copy, meta, generation) = {
                let applied = shared.read();
                let meta = snapshot::meta_at(applied.last_applied, applied.last_membership.clone());
                let stats = &shared.stats;
                StorageStats::set(
                    &stats.log_bytes_at_snapshot,
                    StorageStats::get(&stats.log_bytes),
                );
                // What the state forgot through this index leaves the archive once this
                // snapshot is kept: the one kept now may still read it.
                let index = applied.last_applied.map_or(0, |id| id.index);
                let forgotten = applied.state.forgotten();
                (shared.forgotten.lock().unwrap_or_else(|p| p.into_inner()))
                    .push((index, forgotten));
                let generation = applied.generation.clone();
                (applied.state.snapshot_copy(), meta, generation)
            };
            let mut writer = Writer::create(&shared.snapshot_dir, meta)?;
            let reads = match (shared.write_own(&mut writer, &copy)?, generation) {
                (true, Some(generation)) => Some(super::kept::Reads {
                    generation,
                    wanted: std::sync::Arc::new(copy.wanted()),
                }),
                _ => None,
            };
            drop(copy);
            let written = writer.finish()?;
            let meta = written.meta.clone();
            let file = written.open()?;
            shared.keep_if_newer(written, reads)?;
            shared.remove_forgotten();
            anyhow::Ok((meta, file, before.since()))
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        let stats = &self.shared.stats;
        StorageStats::add(&stats.snapshots_built, 1);
        let micros = started.elapsed().as_micros() as u64;
        StorageStats::set(&stats.last_snapshot_build_micros, micros);
        StorageStats::set(&stats.last_snapshot_build_cpu_micros, cost.cpu_micros);
        tracing::info!(
            index = meta.last_log_id.map_or(0, |id| id.index),
            bytes = StorageStats::get(&stats.last_snapshot_bytes),
            wall_ms = micros / 1000,
            cpu_ms = cost.cpu_micros / 1000,
            rss_before_mib = cost.rss_before >> 20,
            rss_after_mib = cost.rss_after >> 20,
            "snapshot built"
        );
        Ok(super::Snapshot {
            meta: meta.into_meta(),
            snapshot: tokio::fs::File::from_std(file),
        })
    }
}
