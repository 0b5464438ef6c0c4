//! The power cut ([`Disk::cut`]): what is not durable is lost, by [`CutMode`]; and what a cut
//! would lose, asked beforehand.

use super::*;

/// What a power cut keeps of the writes that were not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Nothing.
    Drop,
    /// Of each file, its unsynced writes up to a random one, that last one torn at a random
    /// 512-byte boundary of the file.
    Tear,
    /// Of each file, a random subset of its unsynced writes (later ones may land without the
    /// earlier).
    Reorder,
}

impl CutMode {
    pub fn parse(name: &str) -> anyhow::Result<CutMode> {
        Ok(match name {
            "drop" => CutMode::Drop,
            "tear" => CutMode::Tear,
            "reorder" => CutMode::Reorder,
            other => anyhow::bail!("unknown power-cut mode `{other}` (drop, tear, reorder)"),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CutMode::Drop => "drop",
            CutMode::Tear => "tear",
            CutMode::Reorder => "reorder",
        }
    }
}

/// What a power cut did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutStats {
    /// Files that had unsynced writes.
    pub files: u64,
    /// Unsynced bytes that did not reach the disk.
    pub dropped_bytes: u64,
    /// Unsynced bytes that reached it anyway (tear and reorder modes).
    pub kept_bytes: u64,
    /// Creations, removals and renames undone.
    pub undone: u64,
}

impl Disk {
    /// Bytes written and not yet synced.
    pub fn unsynced_bytes(&self) -> u64 {
        self.pending.values().flatten().map(Pending::bytes).sum()
    }

    /// Whether open file `fh` has writes a sync would make durable.
    pub fn has_unsynced(&self, fh: u64) -> bool {
        self.handles
            .get(&fh)
            .is_some_and(|handle| self.pending.contains_key(&handle.ino))
    }

    /// Name changes not yet durable.
    pub fn unsynced_changes(&self) -> usize {
        self.changes.len()
    }

    /// The power cut: what is not durable is lost, by `mode`. Call it with nothing mounted
    /// over the disk (inode numbers start again).
    pub fn cut(&mut self, mode: CutMode, rng: &mut impl Rng) -> io::Result<CutStats> {
        let mut stats = CutStats::default();
        // The first error is returned once all of the cut is done: a failure to write back
        // one file must not leave name changes in place that a cut undoes.
        let mut first_error: Option<io::Error> = None;
        let mut note = |result: io::Result<()>| {
            if let Err(e) = result {
                tracing::warn!("power cut: {e}");
                first_error.get_or_insert(e);
            }
        };
        self.handles.clear();
        let mut pending: Vec<(u64, Vec<Pending>)> = self.pending.drain().collect();
        pending.sort_by_key(|(ino, _)| *ino);
        for (ino, ops) in pending {
            stats.files += 1;
            let total: u64 = ops.iter().map(Pending::bytes).sum();
            let kept = match (mode, self.paths.get(&ino)) {
                (CutMode::Drop, _) | (_, None) => Vec::new(),
                (CutMode::Tear, Some(_)) => torn_prefix(ops, rng),
                (CutMode::Reorder, Some(_)) => {
                    ops.into_iter().filter(|_| rng.random_bool(0.5)).collect()
                }
            };
            if !kept.is_empty() {
                let real = self.real(self.rel(ino)?);
                note(
                    OpenOptions::new()
                        .write(true)
                        .open(real)
                        .and_then(|file| kept.iter().try_for_each(|op| apply(&file, op))),
                );
            }
            let landed: u64 = kept.iter().map(Pending::bytes).sum();
            stats.kept_bytes += landed;
            stats.dropped_bytes += total - landed;
        }
        for change in std::mem::take(&mut self.changes).into_iter().rev() {
            stats.undone += 1;
            note(match &change.undo {
                Undo::Create(rel) => remove_any(&self.real(rel)),
                Undo::Remove { path, kept } => rename_no_replace(kept, &self.real(path)),
                Undo::Rename { from, to, replaced } => {
                    rename_no_replace(&self.real(to), &self.real(from)).and_then(
                        |()| match replaced {
                            Some(kept) => rename_no_replace(kept, &self.real(to)),
                            None => Ok(()),
                        },
                    )
                }
            });
        }
        self.paths.retain(|ino, _| *ino == ROOT);
        self.inos.retain(|_, ino| *ino == ROOT);
        match first_error {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }
}

/// Of `ops`, those up to a random one, that last one (if a write) torn at a random sector
/// boundary inside it, or at its start.
fn torn_prefix(mut ops: Vec<Pending>, rng: &mut impl Rng) -> Vec<Pending> {
    let keep = rng.random_range(0..=ops.len());
    ops.truncate(keep);
    if let Some(Pending::Write { offset, data }) = ops.last_mut() {
        let end = *offset + data.len() as u64;
        let first = offset.div_ceil(SECTOR) * SECTOR;
        let boundaries: Vec<u64> = std::iter::once(*offset)
            .chain((first..end).step_by(SECTOR as usize).filter(|b| b > offset))
            .collect();
        let at = boundaries[rng.random_range(0..boundaries.len())];
        data.truncate((at - *offset) as usize);
        if data.is_empty() {
            ops.pop();
        }
    }
    ops
}
