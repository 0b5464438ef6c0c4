//! What a node keeps of its state on disk: its newest snapshot file and, from rules version 3,
//! the archive generation that file reads (`store::archive`). Keeping a snapshot, removing
//! what states forgot once a newer one is kept, and the whole body built from the two when a
//! snapshot is sent or backed up.

use std::io::SeekFrom;

use std::sync::Arc;

use super::Shared;
use crate::lease::machine::Wanted;
use crate::lease::State;
use crate::store::archive::Generation;
use crate::store::snapshot::{self, SnapshotMeta, Writer, Written};
use crate::store::{LogId, StorageStats};

/// The snapshot a node keeps: its meta, and, if its body does not hold the whole state, the
/// archive generation it reads and the entries it reads there.
#[derive(Clone)]
pub(super) struct Kept {
    pub(super) meta: SnapshotMeta,
    pub(super) reads: Option<Reads>,
}

/// Where a node's own snapshot finds the rest of its state.
#[derive(Clone)]
pub(super) struct Reads {
    pub(super) generation: Generation,
    pub(super) wanted: Arc<Wanted>,
}

impl Shared {
    /// Puts a written snapshot in place and makes it current, unless a snapshot at least as
    /// new already is (a build that finishes after an install of a newer snapshot must not
    /// replace it); then it is removed. A body that reads the archive (`reads`) is named
    /// after its generation, which is flushed first: the file never names entries a crash
    /// could lose.
    pub(super) fn keep_if_newer(
        &self,
        mut written: Written,
        reads: Option<Reads>,
    ) -> anyhow::Result<()> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let index = |m: &SnapshotMeta| m.last_log_id.map(|id| id.index);
        if current
            .as_ref()
            .is_some_and(|c| index(&c.meta) >= index(&written.meta))
        {
            written.discard()?;
            return Ok(());
        }
        if let (Some(reads), Some(archives)) = (&reads, &self.archives) {
            // Before the flush: apply's writes from here on are synced as they come.
            // Before the file may be named: a generation a file names never goes.
            reads.generation.named_by_snapshot();
            archives.flush()?;
            written.generation = Some(reads.generation.number);
        }
        let meta = written.meta.clone();
        let bytes = written.bytes;
        written.keep(&self.snapshot_dir)?;
        StorageStats::set(&self.stats.last_snapshot_bytes, bytes);
        StorageStats::set(
            &self.stats.last_snapshot_index,
            meta.last_log_id.map_or(0, |id| id.index),
        );
        *current = Some(Kept { meta, reads });
        Ok(())
    }

    /// Writes what this node keeps of `state`: from rules version 3 the live section alone
    /// when the state archives on disk. Returns whether the body reads the archive.
    pub(super) fn write_own(&self, writer: &mut Writer, state: &State) -> anyhow::Result<bool> {
        if self.archives.is_none() {
            writer.state(state)?;
            return Ok(false);
        }
        writer.own_state(state)
    }

    /// Removes from the archive what states forgot up to the snapshot kept now, once no
    /// older snapshot is being sent.
    pub(crate) fn remove_forgotten(&self) {
        let kept = {
            let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            current
                .as_ref()
                .and_then(|c| c.meta.last_log_id)
                .map_or(0, |id| id.index)
        };
        let _no_send = self.sending.write().unwrap_or_else(|p| p.into_inner());
        // Taken out first: an install waits for this lock while it holds the state's.
        let covered: Vec<_> = {
            let mut forgotten = self.forgotten.lock().unwrap_or_else(|p| p.into_inner());
            let (covered, later) = std::mem::take(&mut *forgotten)
                .into_iter()
                .partition(|(index, _)| *index <= kept);
            *forgotten = later;
            covered
        };
        for (_, forgotten) in covered {
            forgotten.remove();
        }
    }

    /// The whole body of the kept snapshot through `last_log_id` (`file`, what openraft
    /// hands the network), in a file of its own: what is sent to another node (`file`
    /// itself when it holds the whole state). An error if a newer snapshot replaced it
    /// (openraft sends that one).
    pub(super) fn whole_snapshot(
        &self,
        last_log_id: Option<LogId>,
        file: std::fs::File,
    ) -> anyhow::Result<std::fs::File> {
        let _no_removal = self.sending.read().unwrap_or_else(|p| p.into_inner());
        let kept = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(kept) = kept.filter(|k| k.meta.last_log_id == last_log_id) else {
            anyhow::bail!("the snapshot at {last_log_id:?} is no longer this node's newest");
        };
        let Some(reads) = kept.reads else {
            return Ok(file);
        };
        let out = tempfile::tempfile_in(&self.snapshot_dir)?;
        whole_of(file, &kept.meta, &reads, out).inspect_err(|error| {
            // A damaged file (or archive) is never sent: a new snapshot replaces it.
            tracing::error!(error = %format!("{error:#}"), "this node's snapshot cannot be sent");
            StorageStats::add(&self.stats.snapshots_refused, 1);
        })
    }

    /// [`Shared::whole_snapshot`] of what openraft hands the network, off the runtime.
    pub(crate) async fn whole_to_send(
        self: &Arc<Self>,
        snapshot: super::Snapshot,
    ) -> std::io::Result<super::Snapshot> {
        let shared = self.clone();
        let last = snapshot.meta.last_log_id;
        let file = snapshot.snapshot.into_std().await;
        let whole = tokio::task::spawn_blocking(move || shared.whole_snapshot(last, file))
            .await
            .map_err(std::io::Error::other)?
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        Ok(super::Snapshot {
            meta: snapshot.meta,
            snapshot: tokio::fs::File::from_std(whole),
        })
    }

    /// Writes the newest snapshot whole to a backup file in `dir` (the only one kept there):
    /// its path and size.
    pub(crate) fn backup(
        &self,
        dir: &std::path::Path,
    ) -> anyhow::Result<(std::path::PathBuf, u64)> {
        let _no_removal = self.sending.read().unwrap_or_else(|p| p.into_inner());
        let (kept, file) = {
            // Under the lock: the file is the one the meta describes, not a newer one.
            let kept = self.current.lock().unwrap_or_else(|p| p.into_inner());
            let newest = snapshot::newest(&self.snapshot_dir)?;
            match (kept.clone(), newest) {
                (Some(kept), Some((_, path, _))) => (kept, std::fs::File::open(path)?),
                _ => anyhow::bail!("this node has no snapshot yet"),
            }
        };
        snapshot::write_backup(dir, &kept.meta, |out| match &kept.reads {
            Some(reads) => whole_of(file, &kept.meta, reads, out),
            None => {
                let mut out = out;
                std::io::copy(&mut std::io::BufReader::new(file), &mut out)?;
                Ok(out)
            }
        })
    }
}

/// The snapshot `file` (a node's own, through `meta`, reading `reads`) whole, in `out`.
fn whole_of(
    file: std::fs::File,
    meta: &SnapshotMeta,
    reads: &Reads,
    out: std::fs::File,
) -> anyhow::Result<std::fs::File> {
    let mut file = file;
    std::io::Seek::seek(&mut file, SeekFrom::Start(0))?;
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut std::io::BufReader::new(file), &mut data)?;
    let (_, body) = snapshot::checked(&data)?;
    snapshot::whole_copy(out, meta, body, &reads.wanted, &*reads.generation.archive())
}

/// Removes, on a thread of its own, what a stop left in the archive that the state loaded
/// from its own snapshot does not read (what older states forgot, not yet removed), and
/// checks that every entry it reads is there: a node that lost one stops applying
/// ([`Shared::halt`]) rather than answer from a partial archive.
pub(super) fn remove_strays(state: &State, shared: &Arc<Shared>) {
    let copy = state.snapshot_copy();
    let shared = Arc::downgrade(shared);
    let spawned = std::thread::Builder::new()
        .name("archive-strays".into())
        .spawn(move || {
            crate::store::lowest_priority();
            match copy.remove_strays() {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "removed archive entries no state reads"),
                Err(lost) => {
                    if let Some(shared) = shared.upgrade() {
                        shared.halt(format!(
                            "the archive lost what this node's snapshot reads ({lost}): move its data directory aside and start it empty, to take the state from the leader"
                        ));
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "archive entries no state reads stay until the next start");
    }
}
