//! The name changes ([`Disk::unlink`], [`Disk::rmdir`], [`Disk::rename`]): done on the
//! backing tree at once, and remembered until an `fsync` of a directory they change makes them
//! durable ([`Disk::fsync_dir`]), with what they removed or replaced kept aside until then.

use super::*;

impl Disk {
    /// `fsync` of directory `ino`: the name changes in it become durable, and with each the
    /// earlier changes at the same paths or under them, as a journal commits in order:
    /// a durable rename over a name whose creation was not would otherwise be undone at a cut
    /// by removing what the rename put there.
    pub fn fsync_dir(&mut self, ino: u64) -> io::Result<()> {
        let changes = std::mem::take(&mut self.changes);
        let mut durable = vec![false; changes.len()];
        let mut touched: Vec<PathBuf> = Vec::new();
        for (i, change) in changes.iter().enumerate().rev() {
            let paths = change.undo.paths();
            // At or under a name a durable change touched; not above it (a file synced in a
            // new directory does not make the directory's own name durable).
            let overlaps = paths
                .iter()
                .any(|p| touched.iter().any(|t| p.starts_with(t)));
            if change.dirs.contains(&ino) || overlaps {
                durable[i] = true;
                touched.extend(paths.into_iter().map(Path::to_path_buf));
            }
        }
        for (change, durable) in changes.into_iter().zip(durable) {
            if !durable {
                self.changes.push(change);
                continue;
            }
            let kept = match change.undo {
                Undo::Remove { kept, .. } => Some(kept),
                Undo::Rename { replaced, .. } => replaced,
                Undo::Create(_) => None,
            };
            if let Some(kept) = kept {
                remove_any(&kept)?;
            }
        }
        Ok(())
    }

    /// Removes file `name` from `parent` (kept aside until the removal is durable).
    pub fn unlink(&mut self, parent: u64, name: &OsStr) -> io::Result<()> {
        let rel = self.child(parent, name)?;
        let real = self.real(&rel);
        if std::fs::symlink_metadata(&real)?.is_dir() {
            return Err(errno(Errno::EISDIR));
        }
        self.remove(parent, rel)
    }

    /// Removes empty directory `name` from `parent` (kept aside until that is durable).
    pub fn rmdir(&mut self, parent: u64, name: &OsStr) -> io::Result<()> {
        let rel = self.child(parent, name)?;
        let real = self.real(&rel);
        if !std::fs::symlink_metadata(&real)?.is_dir() {
            return Err(errno(Errno::ENOTDIR));
        }
        if std::fs::read_dir(&real)?.next().is_some() {
            return Err(errno(Errno::ENOTEMPTY));
        }
        self.remove(parent, rel)
    }

    fn remove(&mut self, parent: u64, rel: PathBuf) -> io::Result<()> {
        let kept = self.keep_aside(&self.real(&rel))?;
        self.forget_tree(&rel);
        self.changes.push(Change {
            dirs: [parent, parent],
            undo: Undo::Remove { path: rel, kept },
        });
        Ok(())
    }

    /// Renames `name` in `parent` to `new_name` in `new_parent`, replacing what is there
    /// unless `no_replace`.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        no_replace: bool,
    ) -> io::Result<()> {
        let from = self.child(parent, name)?;
        let to = self.child(new_parent, new_name)?;
        let (from_real, to_real) = (self.real(&from), self.real(&to));
        std::fs::symlink_metadata(&from_real)?;
        let replaced = match std::fs::symlink_metadata(&to_real) {
            Ok(_) if no_replace => return Err(errno(Errno::EEXIST)),
            Ok(target) => {
                if target.is_dir() && std::fs::read_dir(&to_real)?.next().is_some() {
                    return Err(errno(Errno::ENOTEMPTY));
                }
                Some(self.keep_aside(&to_real)?)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if let Err(e) = std::fs::rename(&from_real, &to_real) {
            if let Some(kept) = &replaced {
                let _ = std::fs::rename(kept, &to_real);
            }
            return Err(e);
        }
        self.move_tree(&from, &to);
        self.changes.push(Change {
            dirs: [parent, new_parent],
            undo: Undo::Rename { from, to, replaced },
        });
        Ok(())
    }
}
