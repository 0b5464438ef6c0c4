//! openraft glue: the Raft log on sled (`log`), the lease state machine (`state_machine`)
//! with its archive on disk (`archive`), its snapshot files (`snapshot`) and restoring from
//! one (`restore`).

pub mod archive;
pub mod codec;
pub mod compaction;
pub mod log;
pub mod notify;
pub mod restore;
pub mod snapshot;
pub mod state_machine;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::lease::{Command, Reply};

openraft::declare_raft_types!(
    /// Tenure's openraft type configuration: lease commands in, lease replies out.
    pub TypeConfig:
        D = Command,
        R = Reply,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Creates `dir` and any missing parents so that they survive a power cut: a directory's
/// name is durable only once the directory holding it is fsynced. `dir` itself, every
/// directory created, and the one that holds the topmost of them (or `dir`'s parent, when
/// `dir` existed: an earlier `create_dir_all` may have left its name unsynced) are fsynced.
/// Found by the fault harness's power nemesis: without it, a cut soon after a node's first
/// start lost its whole log.
pub fn create_dir_durably(dir: &std::path::Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(path) = at.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        missing.push(path);
        at = path.parent();
    }
    std::fs::create_dir_all(dir)?;
    if missing.is_empty() {
        sync_dir(dir)?;
    }
    for created in &missing {
        sync_dir(created)?;
    }
    let top = missing.last().copied().unwrap_or(dir);
    if let Some(holder) = top.parent() {
        sync_dir(if holder.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            holder
        })?;
    }
    Ok(())
}

/// fsyncs directory `dir`: the names created, removed or renamed in it become durable.
pub fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Puts the calling thread at the lowest CPU priority (nice 19): for background work that
/// should take only what the node's serving threads leave.
fn lowest_priority() {
    let me = rustix::thread::gettid();
    if let Err(error) = rustix::process::setpriority_process(Some(me), 19) {
        tracing::debug!(%error, "a background thread keeps its priority");
    }
}

/// Lets sled free what this thread has handed to its epoch collector. sled drops a written-out
/// IO buffer through crossbeam-epoch, which keeps each thread's deferred drops until 64 have
/// gathered. A flush seals the buffer before it is full, and the sealed part shares one
/// segment-sized allocation (8 MiB for the log) with the part still being filled: the sealed
/// part's deferred drop keeps all of it. A thread that writes to sled rarely kept one such
/// buffer per flush resident for minutes: tokio's blocking thread that runs each purge's sync
/// (one a snapshot) let followers climb by ≈ 1.5 MiB/s to 300–555 MiB under lock cycles
/// before the thread ended and its drops ran. The purger calls this after its batches too.
fn release_deferred() {
    sled::pin().flush();
}

/// Flushes `db` to the operating system, then lets sled free what the flush handed to this
/// thread's epoch collector ([`release_deferred`]), whether or not the flush succeeded. Every
/// flush of a sled database goes through here.
fn flush_sled(db: &sled::Db) -> sled::Result<usize> {
    let flushed = db.flush();
    release_deferred();
    flushed
}

/// Opens (or creates) a sled database in `dir` (made durable with its parent) with a page
/// cache of `cache_bytes` and segments of `segment_bytes` (sled's default if None), written
/// to disk only when flushed.
pub(crate) fn open_sled(
    dir: &std::path::Path,
    cache_bytes: u64,
    segment_bytes: Option<usize>,
) -> anyhow::Result<sled::Db> {
    create_dir_durably(dir)?;
    let mut config = sled::Config::new()
        .path(dir)
        .cache_capacity(cache_bytes)
        .flush_every_ms(None);
    if let Some(bytes) = segment_bytes {
        config = config.segment_size(bytes);
    }
    let db = open_when_unlocked(&config)?;
    // sled writes its `conf` file at the first open and never syncs it (a cut that tears
    // it leaves a node sled refuses to open: "Read corrupted data"), and creates its files
    // (at every open also a snapshot file, renamed into place, the old one removed) without
    // syncing the directory: both become durable here, found by the power-cut nemesis.
    std::fs::File::open(dir.join("conf"))?.sync_all()?;
    sync_dir(dir)?;
    Ok(db)
}

/// How long [`open_sled`] waits for the data directory's lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Opens sled, waiting a while for its file lock. A node stopped in this same process (the
/// in-process test clusters) releases the lock only when its last log task has let go of the
/// database, which can be just after its shutdown returns; sled offers nothing to await, so
/// this retries. Another process holding the directory still fails, after `LOCK_WAIT`.
fn open_when_unlocked(config: &sled::Config) -> sled::Result<sled::Db> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match config.open() {
            // sled reports a held lock as an `Other` error, by its message.
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock")
                    && started.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            opened => return opened,
        }
    }
}

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig, state_machine::StateMachineStore>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type EntryPayload = openraft::type_config::alias::EntryPayloadOf<TypeConfig>;
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type LeaderId = openraft::type_config::alias::CommittedLeaderIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;

/// openraft's metrics as its watch delivers them; read with [`WatchReceiver`]'s
/// `borrow_watched`, or wait with [`wait_metrics`].
pub type MetricsWatch = openraft::type_config::alias::WatchReceiverOf<TypeConfig, RaftMetrics>;
pub use openraft::async_runtime::WatchReceiver;

/// Waits until `until` holds for `watch`'s metrics, checking the current ones first: the
/// metrics it held, or None once the Raft has stopped.
pub async fn wait_metrics(
    watch: &mut MetricsWatch,
    mut until: impl FnMut(&RaftMetrics) -> bool,
) -> Option<RaftMetrics> {
    loop {
        {
            let metrics = watch.borrow_and_update();
            if until(&metrics) {
                return Some(metrics.clone());
            }
        }
        watch.changed().await.ok()?;
    }
}

/// Counters that show what durability costs: every append is one journal write + fdatasync (`log_fsyncs` counts those and sled flushes).
#[derive(Debug, Default)]
pub struct StorageStats {
    pub log_appends: AtomicU64,
    pub log_entries: AtomicU64,
    /// Bytes of entries appended since start, and their count when the newest snapshot was
    /// begun (see `compaction`).
    pub log_bytes: AtomicU64,
    pub log_bytes_at_snapshot: AtomicU64,
    pub log_fsyncs: AtomicU64,
    pub log_sync_micros: AtomicU64,
    pub snapshots_built: AtomicU64,
    pub snapshots_installed: AtomicU64,
    /// Snapshots a leader sent that were refused for a checksum that does not match.
    pub snapshots_refused: AtomicU64,
    pub last_snapshot_index: AtomicU64,
    pub last_snapshot_bytes: AtomicU64,
    pub last_snapshot_build_micros: AtomicU64,
    /// The CPU time of the thread that built the last snapshot.
    pub last_snapshot_build_cpu_micros: AtomicU64,
    /// 1 while a snapshot is being built.
    pub snapshot_building: AtomicU64,
    /// Leases reclaimed (expiry and grace passed) by applied entries.
    pub reclaims: AtomicU64,
    /// Time to apply each entry.
    pub apply_seconds: ApplyLatency,
}

/// The apply latency histogram (`crate::metrics`).
#[derive(Debug, Clone)]
pub struct ApplyLatency(pub prometheus_client::metrics::histogram::Histogram);

impl Default for ApplyLatency {
    fn default() -> Self {
        ApplyLatency(crate::metrics::apply_histogram())
    }
}

impl StorageStats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set(counter: &AtomicU64, n: u64) {
        counter.store(n, Ordering::Relaxed);
    }
}

/// openraft 0.10's storage traits speak `std::io::Error`.
fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::other(e)
}
