//! `tenured` processes on the namespace hosts: start, kill -9, restart on the same data dir,
//! pause (SIGSTOP) and resume (SIGCONT). Dropping [`Procs`] SIGKILLs and reaps every node.
//!
//! Each node runs as `ip netns exec t-nN tenured …`; `ip netns exec` execs in place, so the
//! child's pid is tenured's own pid once the exec happened ([`Procs::start`] waits for it).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
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
    /// The Raft id of the member on this host slot, when it is not the slot number (a
    /// replacement that joined under a new id).
    raft_id: Option<u64>,
}

/// How the nodes of one cluster are started: the runner below kills, restarts, pauses and
/// measures them the same way whatever they are (`tenured` on namespace hosts for the fault
/// harness; `tenured` or `etcd` on loopback for the benchmarks).
pub struct Launcher {
    pub nodes: u64,
    /// The binary each process ends up as (after a wrapper like `ip netns exec` execs it).
    pub bin: PathBuf,
    /// Node `id`'s data lives in `<data_root>/nN`, its output goes to `<data_root>/nN.log`.
    pub data_root: PathBuf,
    /// The command that starts node `id` (stdio is set by the runner).
    pub command: Box<dyn Fn(u64) -> Command + Send>,
    /// The command that starts host slot `id` empty, as a new member with another Raft id
    /// that joins the running cluster (`tenured --join`); None where that is not supported.
    pub rejoin: Option<Box<dyn Fn(u64, u64) -> Command + Send>>,
    /// `HOST:PORT` clients use, node 1 first.
    pub endpoints: Vec<String>,
}

impl Launcher {
    /// `tenured` nodes on the namespace hosts: node N in `t-nN` on `10.77.0.(10+N):7100`.
    pub fn namespaced(
        hosts: &Hosts,
        bin: PathBuf,
        nodes: u64,
        data_root: PathBuf,
        extra_args: Vec<String>,
    ) -> Result<Launcher> {
        if nodes == 0 || nodes > hosts.nodes() {
            bail!("cannot start {nodes} nodes on {} hosts", hosts.nodes());
        }
        let addrs: Vec<String> = (1..=nodes)
            .map(|n| format!("{}:{PORT}", node_ip(n)))
            .collect();
        let ip = hosts.ip_bin().to_path_buf();
        let tenured = Arc::new(tenured_command(
            bin.clone(),
            data_root.clone(),
            addrs.clone(),
            extra_args,
        ));
        let rejoining = tenured.clone();
        let rejoin_ip = ip.clone();
        Ok(Launcher {
            nodes,
            bin,
            data_root,
            command: Box::new(move |id| in_namespace(&ip, id, tenured(id, None))),
            rejoin: Some(Box::new(move |slot, raft_id| {
                in_namespace(&rejoin_ip, slot, rejoining(slot, Some(raft_id)))
            })),
            endpoints: addrs,
        })
    }
}

/// `inner` run inside host `slot`'s network namespace.
fn in_namespace(ip: &Path, slot: u64, inner: Command) -> Command {
    let mut cmd = Command::new(ip);
    cmd.args(["netns", "exec", &node_namespace(slot)]);
    cmd.arg(inner.get_program()).args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    cmd
}

/// The command line of `tenured` on host slot `slot` of a cluster whose nodes listen on
/// `addrs` (slot 1 first), with its data in `<data_root>/nSLOT`: the founding node `slot`
/// (`rejoin` None), or a new member with Raft id `rejoin` that joins the running cluster.
pub fn tenured_command(
    bin: PathBuf,
    data_root: PathBuf,
    addrs: Vec<String>,
    extra_args: Vec<String>,
) -> impl Fn(u64, Option<u64>) -> Command + Send + Sync {
    let peers = addrs
        .iter()
        .enumerate()
        .map(|(i, addr)| format!("{}={addr}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    move |slot, rejoin| {
        let addr = &addrs[(slot - 1) as usize];
        let mut cmd = Command::new(&bin);
        cmd.args(["--listen", addr])
            .arg("--data-dir")
            .arg(data_root.join(format!("n{slot}")));
        match rejoin {
            None => cmd
                .args(["--id", &slot.to_string()])
                .args(["--peers", &peers]),
            Some(id) => cmd
                .args(["--id", &id.to_string()])
                .args(["--peers", &format!("{id}={addr}")])
                .arg("--join"),
        };
        // The hosts' addresses exist only in the harness's own network namespaces, but they
        // are not loopback: a node refuses to serve them without auth unless told so.
        if !extra_args.iter().any(|arg| arg.starts_with("--token-file")) {
            cmd.arg("--insecure");
        }
        cmd.args(&extra_args);
        // Every tenured flag also reads the environment: keep ours from leaking in.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TENURED_") {
                cmd.env_remove(key);
            }
        }
        cmd
    }
}

/// The processes of one cluster (a guard). Dropping it SIGKILLs and reaps every node.
pub struct Procs {
    launcher: Launcher,
    /// Index `id - 1`.
    nodes: Vec<Node>,
}

impl Procs {
    /// Starts `tenured` nodes `1..=nodes` on the namespace hosts (see [`Launcher::namespaced`]).
    pub fn start(
        hosts: &Hosts,
        bin: PathBuf,
        nodes: u64,
        data_root: PathBuf,
        extra_args: Vec<String>,
    ) -> Result<Procs> {
        Procs::launch(Launcher::namespaced(
            hosts, bin, nodes, data_root, extra_args,
        )?)
    }

    /// Starts every node of `launcher`.
    pub fn launch(launcher: Launcher) -> Result<Procs> {
        if !launcher.bin.is_file() {
            bail!("no binary at {}; {BUILD_HINT}", launcher.bin.display());
        }
        std::fs::create_dir_all(&launcher.data_root)
            .with_context(|| format!("creating {}", launcher.data_root.display()))?;
        let mut procs = Procs {
            nodes: (0..launcher.nodes)
                .map(|_| Node {
                    child: None,
                    paused: false,
                    raft_id: None,
                })
                .collect(),
            launcher,
        };
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
        let mut cmd = match (self.node(id)?.raft_id, &self.launcher.rejoin) {
            (Some(raft_id), Some(rejoin)) => rejoin(id, raft_id),
            _ => (self.launcher.command)(id),
        };
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
        let expected: String = self
            .launcher
            .bin
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

    /// Replaces host slot `id`'s member as a lost disk would: kill -9, delete its data, and
    /// start it empty as a new member with Raft id `raft_id` that waits to be added.
    pub fn replace(&mut self, id: u64, raft_id: u64) -> Result<()> {
        if self.launcher.rejoin.is_none() {
            bail!("this cluster cannot start a node that joins");
        }
        self.kill9(id)?;
        let data = self.launcher.data_root.join(format!("n{id}"));
        if data.exists() {
            std::fs::remove_dir_all(&data).with_context(|| format!("wiping {}", data.display()))?;
        }
        self.node(id)?.raft_id = Some(raft_id);
        self.spawn(id)
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

    /// Node `id`'s resident set size in bytes (`VmRSS`), if it runs.
    pub fn rss_bytes(&self, id: u64) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid(id)?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// CPU time (user + system) node `id` has used, if it runs.
    pub fn cpu_time(&self, id: u64) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid(id)?)).ok()?;
        // "PID (comm) STATE …": utime and stime are fields 14 and 15, i.e. the 12th and 13th
        // after the state.
        let mut after = stat.rsplit_once(") ")?.1.split_whitespace().skip(11);
        let utime: u64 = after.next()?.parse().ok()?;
        let stime: u64 = after.next()?.parse().ok()?;
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as u64;
        Some(Duration::from_millis((utime + stime) * 1000 / ticks))
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

/// Whether process `pid` holds a listening TCP socket: one of its descriptors is a socket whose
/// inode `/proc/PID/net/tcp{,6}` (its own network namespace) lists in state LISTEN.
fn listens(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let sockets: std::collections::HashSet<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            let inode = target.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_string())
        })
        .collect();
    ["tcp", "tcp6"].iter().any(|table| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        text.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            fields.get(3) == Some(&"0A") && fields.get(9).is_some_and(|i| sockets.contains(*i))
        })
    })
}
