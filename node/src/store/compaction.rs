//! When a node builds a snapshot, and so purges its log behind it.
//!
//! openraft's own policy (`LogsSinceLast`) counts entries. But an entry holds one command or
//! a batch of up to 256, and a snapshot costs in proportion to the state: at a million leases
//! one is about 300 MB written and most of a second during which apply waits. Counting
//! entries alone would build such a snapshot every few seconds under load. So each node
//! decides for itself: a snapshot is due once `snapshot_every` entries have been applied since
//! the last one **and** the log has grown by at least an eighth of the last snapshot's size.
//! Building then writes at most eight snapshot bytes per byte of log, and a restart replays
//! at most a log an eighth the size of the snapshot it loads (plus what arrived meanwhile).
//!
//! An eighth because a byte of (binary) log costs a restart ≈ 4× what a byte of snapshot
//! does: every op in it is applied again. An acquire is 93 bytes of log and ≈ 6 µs to apply;
//! its lease's share of a snapshot is ≈ 286 bytes and ≈ 4.6 µs to decode and index
//! (`examples/memory_per_lease.rs`'s state). So replay stays under about half the load. With
//! half a snapshot's worth of log, a restart of all three nodes at a million leases took
//! 10.7 s. In ops this is what half a snapshot was when entries were JSON (430 bytes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::state_machine::Shared;
use super::{Raft, StorageStats};

/// A request that has not led to a snapshot by then is made again.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Whether a snapshot is due (see the module's documentation).
pub fn due(entries_since: u64, log_bytes_since: u64, last_snapshot_bytes: u64, every: u64) -> bool {
    entries_since >= every && log_bytes_since.saturating_mul(8) >= last_snapshot_bytes
}

/// A node that has just started builds no snapshot for this long. After a restart the log
/// it replays has made one due at once, and building it would take the CPU that its replay,
/// the other nodes' (when a whole cluster restarts) and the election need: at a million
/// leases ≈ 0.65 s of a core on every node, while each is still joining.
const SETTLE: Duration = Duration::from_secs(5);

/// Asks openraft for a snapshot whenever one is due, until `stop`.
pub async fn run(raft: Raft, shared: Arc<Shared>, every: u64, mut stop: watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(SETTLE) => {}
        _ = stop.changed() => return,
    }
    let mut applied = shared.subscribe();
    // The snapshot index at the last request, and when: one request per snapshot (openraft
    // ignores a request while a build runs), unless that request came to nothing for long.
    let mut requested: Option<(u64, Instant)> = None;
    loop {
        let stats = &shared.stats;
        let last_index = StorageStats::get(&stats.last_snapshot_index);
        let applied_index = *applied.borrow_and_update();
        let log_bytes_since = StorageStats::get(&stats.log_bytes)
            .saturating_sub(StorageStats::get(&stats.log_bytes_at_snapshot));
        let waiting =
            requested.is_some_and(|(index, at)| index == last_index && at.elapsed() < RETRY_AFTER);
        if !waiting
            && due(
                applied_index.saturating_sub(last_index),
                log_bytes_since,
                StorageStats::get(&stats.last_snapshot_bytes),
                every,
            )
        {
            match raft.trigger().snapshot().await {
                Ok(()) => requested = Some((last_index, Instant::now())),
                Err(error) => tracing::warn!(%error, "could not ask for a snapshot"),
            }
        }
        tokio::select! {
            changed = applied.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::due;

    #[test]
    fn a_snapshot_waits_for_enough_entries_and_enough_log() {
        // The first snapshot: entries alone decide.
        assert!(!due(4_999, 1 << 30, 0, 5_000));
        assert!(due(5_000, 10, 0, 5_000));
        // Later ones also wait until the log is an eighth of the size of the last snapshot.
        assert!(!due(50_000, 37_499_999, 300_000_000, 5_000));
        assert!(due(50_000, 37_500_000, 300_000_000, 5_000));
        assert!(!due(4_000, 37_500_000, 300_000_000, 5_000));
    }
}
