//! `tenured` processes on the namespace hosts: start, kill -9, restart on the same data dir,
//! pause (SIGSTOP) and resume (SIGCONT). Dropping [`Procs`] SIGKILLs and reaps every node.
//!
//! Each node runs as `nsenter --net=/run/netns/t-nN -- tenured …`; `nsenter` execs in place,
//! so the child's pid is tenured's own pid once the exec happened ([`Procs::start`] waits for
//! it). With power cuts on, each node's data directory is a forgetting disk's mount.

mod launcher;
mod procfs;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::hosts::Hosts;
use crate::power::{CutMode, CutStats, PowerDisk};
use launcher::BUILD_HINT;
pub use launcher::{tenured_bin, tenured_command, Launcher, Previous, Release, PORT};
use procfs::listens;

struct Node {
    child: Option<Child>,
    paused: bool,
    /// The Raft id of the member on this host slot, when it is not the slot number (a
    /// replacement that joined under a new id).
    raft_id: Option<u64>,
    /// The build it runs (and runs again when restarted).
    release: Release,
}

/// The processes of one cluster (a guard). Dropping it SIGKILLs and reaps every node, then
/// unmounts their disks.
pub struct Procs {
    launcher: Launcher,
    /// Index `id - 1`.
    nodes: Vec<Node>,
    /// With power cuts on: node `id`'s data directory on a forgetting disk kept in
    /// `<data_root>/nN.disk`, index `id - 1`. Empty otherwise.
    disks: Vec<PowerDisk>,
    /// Nodes of the current build start with `--max-rules` this (the way back to the
    /// previous release kept open), while set.
    hold: Option<u32>,
}

impl Procs {
    /// Starts `tenured` nodes `1..=nodes` on the namespace hosts (see [`Launcher::namespaced`]),
    /// each on a forgetting disk if `power` (see [`Procs::power_cut`]). With `previous` (the
    /// release before: its binary and flags), every node starts on that release.
    pub fn start(
        hosts: &Hosts,
        bin: PathBuf,
        nodes: u64,
        data_root: PathBuf,
        extra_args: Vec<String>,
        power: bool,
        previous: Option<(PathBuf, Vec<String>)>,
    ) -> Result<Procs> {
        let launcher = Launcher::namespaced(hosts, bin, nodes, data_root, extra_args, previous)?;
        Procs::launch_with(launcher, power)
    }

    /// Starts every node of `launcher`.
    pub fn launch(launcher: Launcher) -> Result<Procs> {
        Procs::launch_with(launcher, false)
    }

    fn launch_with(launcher: Launcher, power: bool) -> Result<Procs> {
        if !launcher.bin.is_file() {
            bail!("no binary at {}; {BUILD_HINT}", launcher.bin.display());
        }
        let release = match &launcher.previous {
            Some(previous) if !previous.bin.is_file() => {
                bail!("no previous release's binary at {}", previous.bin.display())
            }
            Some(_) => Release::Previous,
            None => Release::Current,
        };
        std::fs::create_dir_all(&launcher.data_root)
            .with_context(|| format!("creating {}", launcher.data_root.display()))?;
        let mut procs = Procs {
            nodes: (0..launcher.nodes)
                .map(|_| Node {
                    child: None,
                    paused: false,
                    raft_id: None,
                    release,
                })
                .collect(),
            disks: Vec::new(),
            launcher,
            hold: None,
        };
        if power {
            for id in 1..=procs.nodes.len() as u64 {
                let disk = PowerDisk::mount(&procs.disk_path(id), &procs.data_path(id))?;
                procs.disks.push(disk);
            }
        }
        // On failure `procs` drops here and kills the nodes already started.
        for id in 1..=procs.nodes.len() as u64 {
            procs.spawn(id)?;
        }
        Ok(procs)
    }

    fn node(&mut self, id: u64) -> Result<&mut Node> {
        let count = self.nodes.len();
        match id
            .checked_sub(1)
            .and_then(|i| self.nodes.get_mut(i as usize))
        {
            Some(node) => Ok(node),
            None => bail!("no node {id}: the nodes are 1..={count}"),
        }
    }

    fn spawn(&mut self, id: u64) -> Result<()> {
        let log_path = self.log_path(id);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let (raft_id, release) = {
            let node = self.node(id)?;
            (node.raft_id, node.release)
        };
        let launcher = &self.launcher;
        let (command, rejoin) = match (release, &launcher.previous) {
            (Release::Previous, Some(previous)) => (&previous.command, &previous.rejoin),
            _ => (&launcher.command, &launcher.rejoin),
        };
        let mut cmd = match (raft_id, rejoin) {
            (Some(raft_id), Some(rejoin)) => rejoin(id, raft_id),
            _ => command(id),
        };
        if let (Release::Current, Some(hold)) = (release, self.hold) {
            cmd.args(["--max-rules", &hold.to_string()]);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting node {id}: {cmd:?}"))?;
        let node = self.node(id)?;
        node.child = Some(child);
        node.paused = false;
        self.await_exec(id)
    }

    /// Waits until node `id`'s process is the binary itself (no longer a wrapper like `ip`)
    /// and has a listening socket of its own, or fails with the tail of its log if it exited.
    /// (The binary's name alone is no proof: a bad flag makes it exit right after the exec.)
    fn await_exec(&mut self, id: u64) -> Result<()> {
        let release = self.node(id)?.release;
        let expected: String = self
            .launcher
            .bin_of(release)
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(15).collect())
            .unwrap_or_default();
        let patience = Duration::from_secs(60);
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.exited(id)? {
                bail!(
                    "node {id} exited at start ({status}); {}",
                    self.log_tail(id)
                );
            }
            let pid = self.pid(id).unwrap_or(0);
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim_end() == expected && listens(pid) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "node {id} (pid {pid}, `{}`) does not listen after {patience:?}",
                    comm.trim_end()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reaps node `id` if it has exited and returns how it ended.
    fn exited(&mut self, id: u64) -> Result<Option<ExitStatus>> {
        let node = self.node(id)?;
        let status = match node.child.as_mut() {
            Some(child) => child.try_wait()?,
            None => return Ok(None),
        };
        if status.is_some() {
            node.child = None;
            node.paused = false;
        }
        Ok(status)
    }

    fn log_tail(&self, id: u64) -> String {
        let path = self.log_path(id);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        format!("last lines of {}:\n{tail}", path.display())
    }

    fn signal(&mut self, id: u64, signal: Signal) -> Result<()> {
        let Some(pid) = self.pid(id) else {
            bail!("node {id} is not running");
        };
        kill(Pid::from_raw(pid as i32), signal).with_context(|| format!("{signal} to node {id}"))
    }

    /// SIGKILL without reaping: a node held in a sync by its disk's gate dies only once the
    /// gate lets the sync return.
    pub fn send_kill(&mut self, id: u64) -> Result<()> {
        self.signal(id, Signal::SIGKILL)
    }

    /// The gate that can hold node `id`'s next sync, when it runs on a forgetting disk.
    pub fn sync_gate(&self, id: u64) -> Option<std::sync::Arc<crate::power::SyncGate>> {
        self.disks
            .get(id.wrapping_sub(1) as usize)
            .map(PowerDisk::gate)
    }

    /// SIGKILL (works on paused nodes too) and reap.
    pub fn kill9(&mut self, id: u64) -> Result<()> {
        let node = self.node(id)?;
        if let Some(mut child) = node.child.take() {
            node.paused = false;
            let _ = child.kill();
            child.wait().with_context(|| format!("reaping node {id}"))?;
        }
        Ok(())
    }

    /// Stops node `id` as an operator does (SIGTERM: a leader hands leadership over first),
    /// SIGKILL if it has not exited after `patience`, and reaps it.
    pub fn stop(&mut self, id: u64, patience: Duration) -> Result<()> {
        if self.is_paused(id) {
            self.resume(id)?;
        }
        if self.is_running(id) {
            self.signal(id, Signal::SIGTERM)?;
            let deadline = Instant::now() + patience;
            while self.exited(id)?.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill9(id)
    }

    /// The build node `id` runs.
    pub fn release_of(&self, id: u64) -> Release {
        let index = id.wrapping_sub(1) as usize;
        self.nodes
            .get(index)
            .map_or(Release::Current, |n| n.release)
    }

    /// Whether the nodes can run the release before this build.
    pub fn has_previous(&self) -> bool {
        self.launcher.previous.is_some()
    }

    /// Replaces node `id`'s binary by `release`'s on the same data dir: stopped as an
    /// operator does ([`Procs::stop`]), started again on the other binary.
    pub fn swap(&mut self, id: u64, release: Release, patience: Duration) -> Result<()> {
        if release == Release::Previous && self.launcher.previous.is_none() {
            bail!("this cluster has no previous release to run");
        }
        self.stop(id, patience)?;
        self.node(id)?.release = release;
        self.spawn(id)
    }

    /// Nodes of the current build started from now on announce at most rules `hold` (None:
    /// all they support).
    pub fn set_hold(&mut self, hold: Option<u32>) {
        self.hold = hold;
    }

    /// The rules version nodes of the current build are held at, if they are.
    pub fn hold(&self) -> Option<u32> {
        self.hold
    }

    /// Starts a stopped (killed or crashed) node again on the same data dir.
    pub fn restart(&mut self, id: u64) -> Result<()> {
        if self.is_running(id) {
            bail!("node {id} is still running; kill9 it first");
        }
        self.spawn(id)
    }

    /// Replaces host slot `id`'s member as a lost disk would: kill -9, delete its data, and
    /// start it empty as a new member with Raft id `raft_id` that waits to be added.
    pub fn replace(&mut self, id: u64, raft_id: u64) -> Result<()> {
        if self.launcher.rejoin.is_none() {
            bail!("this cluster cannot start a node that joins");
        }
        self.kill9(id)?;
        if let Some(disk) = self.disks.get_mut((id - 1) as usize) {
            disk.wipe()?;
        } else {
            let data = self.data_path(id);
            if data.exists() {
                std::fs::remove_dir_all(&data)
                    .with_context(|| format!("wiping {}", data.display()))?;
            }
        }
        self.node(id)?.raft_id = Some(raft_id);
        self.spawn(id)
    }

    /// The power cut of node `id` (started with power on): SIGKILL, then what its disk had
    /// not made durable is lost by `mode`. Restart it with [`Procs::restart`].
    pub fn power_cut(
        &mut self,
        id: u64,
        mode: CutMode,
        rng: &mut impl rand::Rng,
    ) -> Result<CutStats> {
        self.kill9(id)?;
        let Some(disk) = self.disks.get_mut(id.wrapping_sub(1) as usize) else {
            bail!("node {id} has no forgetting disk (the run was started without power cuts)");
        };
        disk.cut(mode, rng)
    }

    fn data_path(&self, id: u64) -> PathBuf {
        self.launcher.data_root.join(format!("n{id}"))
    }

    /// Node `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.data_path(id)
    }

    fn disk_path(&self, id: u64) -> PathBuf {
        self.launcher.data_root.join(format!("n{id}.disk"))
    }

    /// The Raft id of the member on host slot `id`.
    pub fn raft_id(&self, id: u64) -> u64 {
        let index = id.wrapping_sub(1) as usize;
        self.nodes.get(index).and_then(|n| n.raft_id).unwrap_or(id)
    }

    /// The host slot of the member with Raft id `raft_id`, if one runs it.
    pub fn slot_of(&self, raft_id: u64) -> Option<u64> {
        (1..=self.nodes.len() as u64).find(|slot| self.raft_id(*slot) == raft_id)
    }

    /// SIGSTOP; returns once the process is stopped.
    pub fn pause(&mut self, id: u64) -> Result<()> {
        self.signal(id, Signal::SIGSTOP)?;
        self.node(id)?.paused = true;
        self.await_state(id, true)
    }

    /// SIGCONT; returns once the process runs again.
    pub fn resume(&mut self, id: u64) -> Result<()> {
        self.signal(id, Signal::SIGCONT)?;
        self.node(id)?.paused = false;
        self.await_state(id, false)
    }

    /// Signals are delivered asynchronously: wait (briefly) until `/proc` shows the stop state.
    fn await_state(&mut self, id: u64, stopped: bool) -> Result<()> {
        let pid = self.pid(id).unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // "PID (comm) STATE …"; comm may hold spaces and parentheses.
            let state = stat.rsplit_once(") ").and_then(|(_, s)| s.chars().next());
            if state.is_none() || (state == Some('T')) == stopped {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("node {id} (pid {pid}) is in state {state:?}, not stopped={stopped}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether node `id`'s process exists (paused counts as running). Reaps it if it died.
    pub fn is_running(&mut self, id: u64) -> bool {
        matches!(self.exited(id), Ok(None)) && self.pid(id).is_some()
    }

    pub fn is_paused(&self, id: u64) -> bool {
        let index = id.wrapping_sub(1) as usize;
        self.nodes.get(index).is_some_and(|n| n.paused)
    }

    pub fn pid(&self, id: u64) -> Option<u32> {
        let index = id.wrapping_sub(1) as usize;
        self.nodes.get(index)?.child.as_ref().map(Child::id)
    }

    /// `HOST:PORT` of every node, node 1 first.
    pub fn endpoints(&self) -> Vec<String> {
        self.launcher.endpoints.clone()
    }

    pub fn log_path(&self, id: u64) -> PathBuf {
        self.launcher.data_root.join(format!("n{id}.log"))
    }

    pub fn data_root(&self) -> &Path {
        &self.launcher.data_root
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for id in 1..=self.nodes.len() as u64 {
            if let Err(e) = self.kill9(id) {
                tracing::error!("stopping node {id}: {e:#}");
            }
        }
    }
}
