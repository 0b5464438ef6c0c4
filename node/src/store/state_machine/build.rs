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
        let (meta, file) = in_the_background(move || {
            let _building = shared.building.lock().unwrap_or_else(|p| p.into_inner());
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
            let reads = shared.write_own(&mut writer, &copy)?;
            drop(copy);
            let written = writer.finish()?;
            let meta = written.meta.clone();
            let file = written.open()?;
            shared.keep_if_newer(written, generation.as_ref().filter(|_| reads))?;
            shared.remove_forgotten();
            anyhow::Ok((meta, file))
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        let stats = &self.shared.stats;
        StorageStats::add(&stats.snapshots_built, 1);
        StorageStats::set(
            &stats.last_snapshot_build_micros,
            started.elapsed().as_micros() as u64,
        );
        Ok(super::Snapshot {
            meta: meta.into_meta(),
            snapshot: tokio::fs::File::from_std(file),
        })
    }
}
