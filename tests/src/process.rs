//! A cluster of real `tenured` processes on loopback, killed with SIGKILL when a test says
//! so, and always on drop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tenure_client::Client;

use crate::peers_arg;
use crate::scenario;

/// The `tenured` binary next to this test executable (cargo builds it for `cargo test
/// --workspace`), or `$TENURED_BIN`.
pub fn tenured_bin() -> PathBuf {
    target_bin("tenured", "TENURED_BIN")
}

/// The `tenure` CLI next to this test executable (cargo builds it for `cargo test
/// --workspace`: the CLI crate's `tests/cli.rs` needs it), or `$TENURE_BIN`.
pub fn tenure_bin() -> PathBuf {
    target_bin("tenure", "TENURE_BIN")
}

/// `target/debug/tenure-guard` (or `$TENURE_GUARD_BIN`): the guarded writes' command.
pub fn tenure_guard_bin() -> PathBuf {
    target_bin("tenure-guard", "TENURE_GUARD_BIN")
}

/// `$env_var`, or the binary `name` in the target dir this test executable runs from.
fn target_bin(name: &str, env_var: &str) -> PathBuf {
    if let Ok(path) = std::env::var(env_var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --bin {name}` (or `cargo test --workspace`)",
        bin.display()
    );
    bin
}

pub struct ProcessCluster {
    pub dir: tempfile::TempDir,
    pub addrs: BTreeMap<u64, String>,
    children: BTreeMap<u64, Child>,
    extra: BTreeMap<u64, Vec<String>>,
}

/// Free loopback ports: bound, read, released. (Another process could take one in between;
/// the start then fails loudly.)
fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl ProcessCluster {
    pub fn start(n: u64, extra: BTreeMap<u64, Vec<String>>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let ports = free_ports(n as usize)?;
        let addrs = crate::ids(n)
            .into_iter()
            .zip(ports)
            .map(|(id, port)| (id, format!("127.0.0.1:{port}")))
            .collect();
        let mut cluster = ProcessCluster {
            dir,
            addrs,
            children: BTreeMap::new(),
            extra,
        };
        for id in crate::ids(n) {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("node{id}.log")))?;
        let child = Command::new(tenured_bin())
            .args(["--id", &id.to_string(), "--listen", &self.addrs[&id]])
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("node{id}")))
            .args(["--peers", &peers_arg(&self.addrs)])
            .args(self.extra.get(&id).cloned().unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.children.insert(id, child);
        Ok(())
    }

    pub fn client(&self) -> Client {
        Client::new(self.addrs.values()).expect("valid endpoints")
    }

    pub fn client_of(&self, id: u64) -> Client {
        Client::new([&self.addrs[&id]]).expect("valid endpoint")
    }

    pub fn live_ids(&self) -> Vec<u64> {
        self.children.keys().copied().collect()
    }

    /// The node's process id.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.children.get(&id).map(Child::id)
    }

    /// SIGSTOP (`stop`) or SIGCONT, returning once `/proc` shows the process stopped or
    /// running again: the signal is delivered asynchronously, and a node that has not stopped
    /// yet still answers.
    pub fn set_stopped(&self, id: u64, stop: bool) -> anyhow::Result<()> {
        use nix::sys::signal::{kill, Signal};
        let pid = self
            .pid(id)
            .ok_or_else(|| anyhow::anyhow!("node {id} is not running"))?;
        let signal = if stop {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        kill(nix::unistd::Pid::from_raw(pid as i32), signal)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
            // "PID (comm) STATE …"; comm may hold spaces and parentheses.
            let state = stat.rsplit_once(") ").and_then(|(_, s)| s.chars().next());
            if (state == Some('T')) == stop {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "node {id} is in state {state:?} 5 s after {signal}"
            );
            std::thread::yield_now();
        }
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self, id: u64) -> anyhow::Result<()> {
        if let Some(mut child) = self.children.remove(&id) {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        anyhow::ensure!(!self.children.contains_key(&id), "node {id} is running");
        self.spawn(id)
    }

    /// Polls `Cluster.Status` of every live node until all name the same live leader.
    pub async fn leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        let live = self.live_ids();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut seen = Vec::new();
            for id in &live {
                let status = self
                    .client_of(*id)
                    .with_timeout(Duration::from_millis(500))
                    .node_status(0)
                    .await;
                seen.push(
                    status
                        .ok()
                        .map(|s| s.leader_id)
                        .filter(|l| live.contains(l)),
                );
            }
            if let Some(Some(leader)) = seen.first() {
                if seen.iter().all(|s| *s == Some(*leader)) {
                    return Ok(*leader);
                }
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no agreed leader within {timeout:?}: {seen:?}; logs in {}",
                self.dir.path().display()
            );
            // Nothing to await across processes: poll Status.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The log of a node, for failure messages.
    pub fn log_of(&self, id: u64) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node{id}.log"))).unwrap_or_default()
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for (_, mut child) in std::mem::take(&mut self.children) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl scenario::Cluster for ProcessCluster {
    fn client(&self) -> Client {
        ProcessCluster::client(self)
    }

    fn client_of(&self, id: u64) -> Client {
        ProcessCluster::client_of(self, id)
    }

    fn live_ids(&self) -> Vec<u64> {
        ProcessCluster::live_ids(self)
    }

    async fn leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        ProcessCluster::leader(self, timeout).await
    }

    async fn crash(&mut self, id: u64) {
        self.kill9(id).expect("kill -9");
    }

    async fn until_free(&self, resource: &str) {
        let client = ProcessCluster::client(self);
        loop {
            if crate::get_resource(&client, resource)
                .await
                .is_ok_and(|r| r.leases.is_empty())
            {
                return;
            }
            // Nothing to await across processes: poll linearizable reads.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn describe(&self, id: u64) -> String {
        format!("node {id} log:\n{}", self.log_of(id))
    }
}
