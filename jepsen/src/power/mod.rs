//! Power loss: a node's data directory on a filesystem that forgets what was not synced
//! ([`disk`], served through FUSE by [`fuse`]), and the cut itself: unmount, drop what is not
//! durable, mount again. What a killed process wrote and never synced is gone, as after a real
//! power cut or kernel panic, not written out by the kernel as after `kill -9`.

pub mod disk;
mod fuse;
mod gate;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use rand::Rng;

pub use disk::{CutMode, CutStats, Disk};
pub use gate::SyncGate;

/// The name mounts of this harness carry (`mount` and /proc/mounts show it), by which
/// `teardown` finds leftovers.
pub const FS_NAME: &str = "tenure-forgetful";

/// A directory served by a forgetting disk (a guard: dropping it unmounts).
pub struct PowerDisk {
    backing: PathBuf,
    mountpoint: PathBuf,
    disk: Arc<Mutex<Disk>>,
    gate: Arc<SyncGate>,
    session: Option<fuser::BackgroundSession>,
}

impl PowerDisk {
    /// Serves `mountpoint` (created if missing) from a forgetting disk kept in `backing`.
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<PowerDisk> {
        let disk = Disk::at(backing).with_context(|| format!("disk at {}", backing.display()))?;
        std::fs::create_dir_all(mountpoint)
            .with_context(|| format!("creating {}", mountpoint.display()))?;
        let mut power = PowerDisk {
            backing: backing.to_path_buf(),
            mountpoint: mountpoint.to_path_buf(),
            disk: Arc::new(Mutex::new(disk)),
            gate: Arc::default(),
            session: None,
        };
        power.attach()?;
        Ok(power)
    }

    fn attach(&mut self) -> Result<()> {
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName(FS_NAME.into()),
            fuser::MountOption::RW,
            fuser::MountOption::NoAtime,
        ];
        let fs = fuse::Forgetful {
            disk: self.disk.clone(),
            gate: self.gate.clone(),
        };
        let session = fuser::spawn_mount(fs, &self.mountpoint, &config).with_context(|| {
            format!(
                "mounting a FUSE filesystem at {} (needs /dev/fuse and root, or fusermount3)",
                self.mountpoint.display()
            )
        })?;
        self.session = Some(session);
        Ok(())
    }

    fn detach(&mut self) -> Result<()> {
        // A sync held in the gate would keep the FUSE thread, and so the unmount, waiting.
        self.gate.fail_and_open();
        if let Some(session) = self.session.take() {
            session
                .umount_and_join()
                .with_context(|| format!("unmounting {}", self.mountpoint.display()))?;
        }
        Ok(())
    }

    /// The power cut: unmounts (every process using the directory must be gone), drops what
    /// is not durable by `mode`, and mounts it again.
    pub fn cut(&mut self, mode: CutMode, rng: &mut impl Rng) -> Result<CutStats> {
        self.detach()?;
        let stats = self
            .disk
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cut(mode, rng)
            .with_context(|| format!("power cut of {}", self.mountpoint.display()));
        // Mounted again whatever the cut did: a node must never start on the bare directory.
        self.attach()?;
        stats
    }

    /// A new, empty disk in place of this one, as when a lost disk is replaced.
    pub fn wipe(&mut self) -> Result<()> {
        self.detach()?;
        std::fs::remove_dir_all(&self.backing)
            .with_context(|| format!("wiping {}", self.backing.display()))?;
        let disk = Disk::at(&self.backing)
            .with_context(|| format!("disk at {}", self.backing.display()))?;
        *self.disk.lock().unwrap_or_else(|p| p.into_inner()) = disk;
        self.attach()
    }

    /// The gate that can hold this disk's next sync in flight.
    pub fn gate(&self) -> Arc<SyncGate> {
        self.gate.clone()
    }

    /// Bytes written under the mount and not yet synced.
    pub fn unsynced_bytes(&self) -> u64 {
        self.disk
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced_bytes()
    }
}

/// Unmounts every forgetting disk a killed run left mounted (its FUSE server died with it,
/// so each answers "transport endpoint is not connected"). Returns the mountpoints.
pub fn unmount_leftovers() -> Result<Vec<PathBuf>> {
    let mounts =
        std::fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    let mut unmounted = Vec::new();
    for line in mounts.lines() {
        // "SOURCE MOUNTPOINT TYPE OPTIONS 0 0", the mountpoint's spaces as \040.
        let mut fields = line.split(' ');
        let (Some(source), Some(target)) = (fields.next(), fields.next()) else {
            continue;
        };
        if source != FS_NAME {
            continue;
        }
        let target = PathBuf::from(target.replace("\\040", " "));
        nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH)
            .with_context(|| format!("unmounting {}", target.display()))?;
        unmounted.push(target);
    }
    Ok(unmounted)
}

impl Drop for PowerDisk {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::error!("{e:#}");
        }
    }
}
