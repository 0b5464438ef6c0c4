//! `tenured` processes on the namespace hosts: start, kill -9, restart on the same data dir,
//! pause (SIGSTOP) and resume (SIGCONT). Dropping [`Procs`] SIGKILLs and reaps every node.
//!
//! Each node runs as `ip netns exec t-nN tenured …`; `ip netns exec` execs in place, so the
//! child's pid is tenured's own pid once the exec happened ([`Procs::start`] waits for it).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::hosts::{node_ip, node_namespace, Hosts};

pub const PORT: u16 = 7100;

const BUILD_HINT: &str = "build it with `cargo build --bin tenured --features tenure-node/fault-injection` or set TENURED_BIN";

/// The `tenured` binary: `$TENURED_BIN`, else `tenured` in the target directory of the running
/// executable (its own directory, or the parent when it runs from `target/<profile>/deps`).
pub fn tenured_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TENURED_BIN") {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("TENURED_BIN={} is not a file; {BUILD_HINT}", bin.display());
        }
        return Ok(bin);
    }
    let exe = std::env::current_exe().context("locating the current executable")?;
    let mut dir = exe
        .parent()
        .context("the current executable has no directory")?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent().unwrap_or(dir);
    }
    let bin = dir.join("tenured");
    if !bin.is_file() {
        bail!("no tenured binary at {}; {BUILD_HINT}", bin.display());
    }
    Ok(bin)
}

struct Node {
    child: Option<Child>,
    paused: bool,
}

/// The `tenured` processes of one run (a guard).
pub struct Procs {
    ip: PathBuf,
    bin: PathBuf,
    data_root: PathBuf,
    extra_args: Vec<String>,
    /// Index `id - 1`.
    nodes: Vec<Node>,
}

impl Procs {
    /// Starts nodes `1..=nodes`, node N in `t-nN` on `10.77.0.(10+N):7100` with data in
    /// `<data_root>/nN` and output appended to `<data_root>/nN.log`.
    pub fn start(
        hosts: &Hosts,
        bin: PathBuf,
        nodes: u64,
        data_root: PathBuf,
        extra_args: Vec<String>,
    ) -> Result<Procs> {
        if nodes == 0 || nodes > hosts.nodes() {
            bail!("cannot start {nodes} nodes on {} hosts", hosts.nodes());
        }
        if !bin.is_file() {
            bail!("no tenured binary at {}; {BUILD_HINT}", bin.display());
        }
        std::fs::create_dir_all(&data_root)
            .with_context(|| format!("creating {}", data_root.display()))?;
        let mut procs = Procs {
            ip: hosts.ip_bin().to_path_buf(),
            bin,
            data_root,
            extra_args,
            nodes: (0..nodes)
                .map(|_| Node {
                    child: None,
                    paused: false,
                })
                .collect(),
        };
        // On failure `procs` drops here and kills the nodes already started.
        for id in 1..=nodes {
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

    fn peers(&self) -> String {
        (1..=self.nodes.len() as u64)
            .map(|n| format!("{n}={}:{PORT}", node_ip(n)))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, id: u64) -> Result<()> {
        let log_path = self.log_path(id);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let mut cmd = Command::new(&self.ip);
        cmd.args(["netns", "exec", &node_namespace(id)])
            .arg(&self.bin)
            .args(["--id", &id.to_string()])
            .args(["--listen", &format!("{}:{PORT}", node_ip(id))])
            .arg("--data-dir")
            .arg(self.data_root.join(format!("n{id}")))
            .args(["--peers", &self.peers()])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // Every tenured flag also reads the environment: keep ours from leaking in.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TENURED_") {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting node {id}: {cmd:?}"))?;
        let node = self.node(id)?;
        node.child = Some(child);
        node.paused = false;
        self.await_exec(id)
    }

    /// Waits until node `id`'s process is tenured itself (no longer `ip`), or fails with the
    /// tail of its log if it exited.
    fn await_exec(&mut self, id: u64) -> Result<()> {
        let expected: String = self
            .bin
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(15).collect())
            .unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = self.exited(id)? {
                bail!(
                    "node {id} exited at start ({status}); {}",
                    self.log_tail(id)
                );
            }
            let pid = self.pid(id).unwrap_or(0);
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim_end() == expected {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "node {id} (pid {pid}) is still `{}` after 5 s",
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

    /// Starts a stopped (killed or crashed) node again on the same data dir.
    pub fn restart(&mut self, id: u64) -> Result<()> {
        if self.is_running(id) {
            bail!("node {id} is still running; kill9 it first");
        }
        self.spawn(id)
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
        (1..=self.nodes.len() as u64)
            .map(|n| format!("{}:{PORT}", node_ip(n)))
            .collect()
    }

    pub fn log_path(&self, id: u64) -> PathBuf {
        self.data_root.join(format!("n{id}.log"))
    }

    pub fn data_root(&self) -> &Path {
        &self.data_root
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
