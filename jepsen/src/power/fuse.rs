//! The kernel's side of a [`Disk`]: a FUSE filesystem (the `fuser` crate) whose every request
//! is a call on the disk. No writeback cache is asked for, so every write(2) reaches the disk
//! as it happens and nothing is held in the kernel that a power cut could not see.

use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::disk::Disk;
use super::gate::SyncGate;

/// How long the kernel may cache names and attributes: only this filesystem changes the
/// tree while it is mounted, and a power cut happens unmounted.
const TTL: Duration = Duration::from_secs(60);

pub struct Forgetful {
    pub disk: Arc<Mutex<Disk>>,
    pub gate: Arc<SyncGate>,
}

impl Forgetful {
    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn time(secs: i64, nanos: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos as u32)
    } else {
        UNIX_EPOCH
    }
}

fn attr(ino: u64, meta: &std::fs::Metadata, size: u64) -> FileAttr {
    let kind = if meta.is_dir() {
        FileType::Directory
    } else if meta.file_type().is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind,
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Replies with the attributes of `ino` (through the open file `fh` if given).
fn attr_reply(disk: &Disk, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
    match disk.attr(ino.0, fh.map(|f| f.0)) {
        Ok((meta, size)) => reply.attr(&TTL, &attr(ino.0, &meta, size)),
        Err(e) => reply.error(failed(e)),
    }
}

/// Replies to a request that returns nothing: done, or the error.
fn answer(reply: ReplyEmpty, result: io::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(failed(e)),
    }
}

fn failed(e: io::Error) -> Errno {
    match e.raw_os_error() {
        Some(_) => Errno::from(e),
        None => Errno::EIO,
    }
}

impl Forgetful {
    fn entry(&self, ino: u64, reply: ReplyEntry) {
        match self.disk().attr(ino, None) {
            Ok((meta, size)) => reply.entry(&TTL, &attr(ino, &meta, size), Generation(0)),
            Err(e) => reply.error(failed(e)),
        }
    }
}

impl Filesystem for Forgetful {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let looked = self.disk().lookup(parent.0, name);
        match looked {
            Ok((ino, _)) => self.entry(ino, reply),
            Err(e) => reply.error(failed(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        attr_reply(&self.disk(), ino, fh, reply);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut disk = self.disk();
        if let Some(len) = size {
            disk.set_len(ino.0, len);
        }
        if let Some(mode) = mode {
            if let Err(e) = disk.set_mode(ino.0, mode) {
                return reply.error(failed(e));
            }
        }
        attr_reply(&disk, ino, fh, reply);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let made = self.disk().mkdir(parent.0, name, mode & !umask);
        match made {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(failed(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer(reply, self.disk().unlink(parent.0, name))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer(reply, self.disk().rmdir(parent.0, name))
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        answer(
            reply,
            self.disk()
                .rename(parent.0, name, newparent.0, newname, no_replace),
        )
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.disk().open(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(failed(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.disk().read(fh.0, offset, size as usize) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(failed(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.disk().write(fh.0, offset, data) {
            Ok(written) => reply.written(written),
            Err(e) => reply.error(failed(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.disk().release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let something = self.disk().has_unsynced(fh.0);
        if something && !self.gate.pass() {
            return reply.error(Errno::EIO);
        }
        answer(reply, self.disk().fsync(fh.0))
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.disk().read_dir(ino.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(failed(e)),
        };
        for (i, (child, name, dir)) in entries.into_iter().enumerate().skip(offset as usize) {
            let kind = if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let something = self.disk().unsynced_changes() > 0;
        if something && !self.gate.pass() {
            return reply.error(Errno::EIO);
        }
        answer(reply, self.disk().fsync_dir(ino.0))
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        // No extended attributes: ENOSYS tells the kernel not to ask again on this mount (it
        // asks for `security.capability` before the first write of a file).
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let root = self.disk().root().to_path_buf();
        match nix::sys::statvfs::statvfs(&root) {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                s.name_max() as u32,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(Errno::from_i32(e as i32)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut disk = self.disk();
        let created = disk
            .create(parent.0, name, mode & !umask)
            .and_then(|(ino, fh)| Ok((ino, fh, disk.attr(ino, Some(fh))?)));
        match created {
            Ok((ino, fh, (meta, size))) => reply.created(
                &TTL,
                &attr(ino, &meta, size),
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(failed(e)),
        }
    }
}
