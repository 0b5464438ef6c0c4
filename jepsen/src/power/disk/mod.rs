//! The forgetting disk: a directory tree whose writes last only once synced, as on a disk
//! that loses power. [`super::fuse`] serves it to the kernel; a power cut ([`Disk::cut`])
//! is a call on it.
//!
//! - File data: a write goes to a page cache of the disk's own (per file, in order) and
//!   reaches the backing file only on `fsync`/`fdatasync` of that file. Reads see the cache.
//! - Names: creating, removing and renaming are done on the backing tree at once, and
//!   remembered until an `fsync` of the directory they change makes them durable (a rename:
//!   of either directory). What they removed or replaced is kept aside until then.
//! - A cut drops what is not durable: by [`CutMode`], all unsynced data, or a prefix of each
//!   file's unsynced writes with the last one torn at a 512-byte boundary, or any subset of
//!   them; then every name change not yet durable is undone, newest first.
//!
//! `sync_file_range` never reaches a FUSE filesystem (the kernel has no request for it), so it
//! makes nothing durable here, as on a disk whose cache loses it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use rand::Rng;

mod cut;
mod names;

pub use cut::{CutMode, CutStats};

/// The inode number of the root directory.
pub const ROOT: u64 = 1;
/// The unit a torn write is torn at.
pub const SECTOR: u64 = 512;

/// A change to a file's contents not yet synced.
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    Truncate(u64),
}

impl Pending {
    fn bytes(&self) -> u64 {
        match self {
            Pending::Write { data, .. } => data.len() as u64,
            Pending::Truncate(_) => 0,
        }
    }
}

/// A name change not yet durable: the inodes of the directories whose fsync makes it so,
/// and the paths (relative to the root) that undo it.
struct Change {
    dirs: [u64; 2],
    undo: Undo,
}

enum Undo {
    /// Remove what was created at this path.
    Create(PathBuf),
    /// Put back what was removed from `path`, kept at `kept`.
    Remove { path: PathBuf, kept: PathBuf },
    /// Move `to` back to `from`, then put back what it replaced.
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
}

impl Undo {
    /// The paths the change touched.
    fn paths(&self) -> Vec<&Path> {
        match self {
            Undo::Create(path) | Undo::Remove { path, .. } => vec![path],
            Undo::Rename { from, to, .. } => vec![from, to],
        }
    }
}

/// An open file.
struct Handle {
    ino: u64,
    file: File,
}

pub struct Disk {
    /// The backing tree.
    root: PathBuf,
    /// Where removed and replaced entries wait until their removal is durable.
    kept: PathBuf,
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next_ino: u64,
    pending: HashMap<u64, Vec<Pending>>,
    changes: Vec<Change>,
    next_kept: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// The length of a file of `len` durable bytes after `ops`.
fn logical_len(len: u64, ops: &[Pending]) -> u64 {
    ops.iter().fold(len, |len, op| match op {
        Pending::Write { offset, data } => len.max(offset + data.len() as u64),
        Pending::Truncate(to) => *to,
    })
}

fn apply(file: &File, op: &Pending) -> io::Result<()> {
    match op {
        Pending::Write { offset, data } => file.write_all_at(data, *offset),
        Pending::Truncate(len) => file.set_len(*len),
    }
}

impl Disk {
    /// A disk over `backing` (created if missing): its tree in `backing/root`, entries kept
    /// for undo in `backing/kept` (emptied: what a previous run kept there is gone for good).
    pub fn at(backing: &Path) -> io::Result<Disk> {
        let root = backing.join("root");
        let kept = backing.join("kept");
        std::fs::create_dir_all(&root)?;
        if kept.exists() {
            std::fs::remove_dir_all(&kept)?;
        }
        std::fs::create_dir_all(&kept)?;
        let mut disk = Disk {
            root,
            kept,
            paths: HashMap::new(),
            inos: HashMap::new(),
            next_ino: ROOT + 1,
            pending: HashMap::new(),
            changes: Vec::new(),
            next_kept: 0,
            handles: HashMap::new(),
            next_fh: 1,
        };
        disk.paths.insert(ROOT, PathBuf::new());
        disk.inos.insert(PathBuf::new(), ROOT);
        Ok(disk)
    }

    /// The backing tree's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn rel(&self, ino: u64) -> io::Result<&PathBuf> {
        self.paths.get(&ino).ok_or_else(|| errno(Errno::ENOENT))
    }

    fn child(&self, parent: u64, name: &OsStr) -> io::Result<PathBuf> {
        Ok(self.rel(parent)?.join(name))
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    fn ino_of(&mut self, rel: PathBuf) -> u64 {
        if let Some(ino) = self.inos.get(&rel) {
            return *ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.paths.insert(ino, rel.clone());
        self.inos.insert(rel, ino);
        ino
    }

    /// Forgets the inode numbers of `rel` and everything under it.
    fn forget_tree(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .inos
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            if let Some(ino) = self.inos.remove(&p) {
                self.paths.remove(&ino);
            }
        }
    }

    /// Moves the inode numbers of `from` and everything under it to `to`.
    fn move_tree(&mut self, from: &Path, to: &Path) {
        self.forget_tree(to);
        let moved: Vec<(PathBuf, u64)> = self
            .inos
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, ino)| (p.clone(), *ino))
            .collect();
        for (old, ino) in moved {
            let new = match old.strip_prefix(from) {
                Ok(rest) if rest.as_os_str().is_empty() => to.to_path_buf(),
                Ok(rest) => to.join(rest),
                Err(_) => continue,
            };
            self.inos.remove(&old);
            self.inos.insert(new.clone(), ino);
            self.paths.insert(ino, new);
        }
    }

    fn keep_aside(&mut self, real: &Path) -> io::Result<PathBuf> {
        let kept = self.kept.join(self.next_kept.to_string());
        self.next_kept += 1;
        std::fs::rename(real, &kept)?;
        Ok(kept)
    }

    /// `name` in directory `parent`: its inode and metadata.
    pub fn lookup(&mut self, parent: u64, name: &OsStr) -> io::Result<(u64, Metadata)> {
        let rel = self.child(parent, name)?;
        let meta = std::fs::symlink_metadata(self.real(&rel))?;
        Ok((self.ino_of(rel), meta))
    }

    /// The metadata of `ino` (through the open file `fh` if given) and its size as a reader
    /// sees it, unsynced writes included.
    pub fn attr(&self, ino: u64, fh: Option<u64>) -> io::Result<(Metadata, u64)> {
        // An open file removed from its directory is reached through any of its handles.
        let handle = fh
            .and_then(|fh| self.handles.get(&fh))
            .or_else(|| self.handles.values().find(|h| h.ino == ino));
        let meta = match (self.paths.get(&ino), handle) {
            (_, Some(handle)) => handle.file.metadata()?,
            (Some(rel), None) => std::fs::symlink_metadata(self.real(rel))?,
            (None, None) => return Err(errno(Errno::ENOENT)),
        };
        let size = match self.pending.get(&ino) {
            Some(ops) if meta.is_file() => logical_len(meta.len(), ops),
            _ => meta.len(),
        };
        Ok((meta, size))
    }

    /// The entries of directory `ino`, `.` and `..` first: inode, name, whether a directory.
    pub fn read_dir(&mut self, ino: u64) -> io::Result<Vec<(u64, OsString, bool)>> {
        let rel = self.rel(ino)?.clone();
        let parent = match rel.parent() {
            Some(p) => self.ino_of(p.to_path_buf()),
            None => ROOT,
        };
        let mut names: Vec<(OsString, bool)> = std::fs::read_dir(self.real(&rel))?
            .map(|entry| {
                let entry = entry?;
                Ok((entry.file_name(), entry.file_type()?.is_dir()))
            })
            .collect::<io::Result<_>>()?;
        names.sort();
        let mut entries = vec![(ino, ".".into(), true), (parent, "..".into(), true)];
        for (name, dir) in names {
            let child = self.ino_of(rel.join(&name));
            entries.push((child, name, dir));
        }
        Ok(entries)
    }

    /// Creates file `name` in `parent` with `mode` and opens it: its inode and handle.
    pub fn create(&mut self, parent: u64, name: &OsStr, mode: u32) -> io::Result<(u64, u64)> {
        let rel = self.child(parent, name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(self.real(&rel))?;
        self.changes.push(Change {
            dirs: [parent, parent],
            undo: Undo::Create(rel.clone()),
        });
        let ino = self.ino_of(rel);
        Ok((ino, self.add_handle(ino, file)))
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(&mut self, parent: u64, name: &OsStr, mode: u32) -> io::Result<u64> {
        let rel = self.child(parent, name)?;
        std::fs::DirBuilder::new()
            .mode(mode)
            .create(self.real(&rel))?;
        self.changes.push(Change {
            dirs: [parent, parent],
            undo: Undo::Create(rel.clone()),
        });
        Ok(self.ino_of(rel))
    }

    fn add_handle(&mut self, ino: u64, file: File) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, Handle { ino, file });
        fh
    }

    /// Opens file `ino`. (`O_TRUNC` never arrives here: without FUSE's atomic O_TRUNC the
    /// kernel truncates with a setattr first, which [`Disk::set_len`] caches.)
    pub fn open(&mut self, ino: u64) -> io::Result<u64> {
        let real = self.real(self.rel(ino)?);
        // Read and write whatever the caller asked: the backing file is written only by a
        // sync, and a sync needs it writable.
        let file = OpenOptions::new().read(true).write(true).open(real)?;
        Ok(self.add_handle(ino, file))
    }

    pub fn release(&mut self, fh: u64) {
        let Some(handle) = self.handles.remove(&fh) else {
            return;
        };
        let ino = handle.ino;
        // The last close of a file no name reaches: nothing can sync or read its cache now.
        if !self.paths.contains_key(&ino) && !self.handles.values().any(|h| h.ino == ino) {
            self.pending.remove(&ino);
        }
    }

    fn handle(&self, fh: u64) -> io::Result<&Handle> {
        self.handles.get(&fh).ok_or_else(|| errno(Errno::EBADF))
    }

    /// Up to `size` bytes of open file `fh` from `offset`, unsynced writes included.
    pub fn read(&self, fh: u64, offset: u64, size: usize) -> io::Result<Vec<u8>> {
        let handle = self.handle(fh)?;
        let durable = handle.file.metadata()?.len();
        let ops = self
            .pending
            .get(&handle.ino)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let len = logical_len(durable, ops);
        if offset >= len {
            return Ok(Vec::new());
        }
        let n = (size as u64).min(len - offset) as usize;
        let end = offset + n as u64;
        let mut buf = vec![0u8; n];
        if offset < durable {
            let from_disk = (durable.min(end) - offset) as usize;
            handle.file.read_exact_at(&mut buf[..from_disk], offset)?;
        }
        // Replay the cache over it: a truncate zeroes what a later write may extend into.
        for op in ops {
            match op {
                Pending::Write { offset: at, data } => {
                    let from = (*at).max(offset);
                    let to = (at + data.len() as u64).min(end);
                    if from < to {
                        buf[(from - offset) as usize..(to - offset) as usize]
                            .copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
                    }
                }
                Pending::Truncate(at) => {
                    if *at < end {
                        buf[((*at).max(offset) - offset) as usize..].fill(0);
                    }
                }
            }
        }
        Ok(buf)
    }

    /// Writes `data` at `offset` of open file `fh`, into the cache.
    pub fn write(&mut self, fh: u64, offset: u64, data: &[u8]) -> io::Result<u32> {
        let ino = self.handle(fh)?.ino;
        self.pending.entry(ino).or_default().push(Pending::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(data.len() as u32)
    }

    /// Truncates (or extends) file `ino` to `len`, in the cache.
    pub fn set_len(&mut self, ino: u64, len: u64) {
        self.pending
            .entry(ino)
            .or_default()
            .push(Pending::Truncate(len));
    }

    /// Sets the permission bits of `ino` (at once: a cut keeps them).
    pub fn set_mode(&self, ino: u64, mode: u32) -> io::Result<()> {
        let real = self.real(self.rel(ino)?);
        std::fs::set_permissions(real, std::fs::Permissions::from_mode(mode & 0o7777))
    }

    /// `fsync`/`fdatasync` of open file `fh`: its cached writes reach the backing file.
    pub fn fsync(&mut self, fh: u64) -> io::Result<()> {
        let handle = self.handles.get(&fh).ok_or_else(|| errno(Errno::EBADF))?;
        if let Some(ops) = self.pending.remove(&handle.ino) {
            for op in &ops {
                apply(&handle.file, op)?;
            }
        }
        handle.file.sync_data()
    }
}

/// Moves `from` to `to`, failing rather than replacing what is at `to`.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    nix::fcntl::renameat2(
        None,
        from,
        None,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(|e| io::Error::other(format!("{} -> {}: {e}", from.display(), to.display())))
}

/// Removes a file or a whole directory; nothing there is fine.
fn remove_any(path: &Path) -> io::Result<()> {
    let result = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
