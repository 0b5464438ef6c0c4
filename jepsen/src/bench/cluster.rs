//! Local three-node clusters on loopback for the benchmarks: `tenured`, or Debian's `etcd`
//! with its default timing (heartbeat 100 ms, election 1000 ms). Both run under the same
//! runner as the fault harness ([`Procs`]), with their data on the same disk.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::time::Instant;

use crate::procs::{tenured_command, Launcher, Procs};

pub const NODES: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum System {
    Tenure,
    Etcd,
    /// Tenure through its HTTP/JSON gateway (`--http-listen`), for the gateway's overhead.
    TenureHttp,
}

impl System {
    pub fn parse(name: &str) -> Result<System> {
        match name.trim() {
            "tenure" => Ok(System::Tenure),
            "etcd" => Ok(System::Etcd),
            "tenure-http" => Ok(System::TenureHttp),
            other => bail!("unknown system `{other}` (tenure, etcd, tenure-http)"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            System::Tenure => "tenure",
            System::Etcd => "etcd",
            System::TenureHttp => "tenure-http",
        }
    }

    /// The cluster runs `tenured` (and answers Tenure's gRPC calls).
    pub fn is_tenure(self) -> bool {
        matches!(self, System::Tenure | System::TenureHttp)
    }
}

/// `n` free loopback ports (bound and released; nothing else on this machine races us for
/// them in practice).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free loopback ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// The `etcd` binary: `$ETCD_BIN`, else `etcd` on PATH (Debian's `etcd-server` puts it in
/// /usr/bin).
pub fn etcd_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("ETCD_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|bin| bin.is_file())
        .context(
            "no etcd on PATH; install Debian's etcd-server (jepsen/bench.sh does) or set ETCD_BIN",
        )
}

/// A running local cluster of one system.
pub struct LocalCluster {
    pub system: System,
    pub procs: Procs,
    /// `HOST:PORT` of each node's client API, node 1 first.
    pub endpoints: Vec<String>,
    /// `HOST:PORT` of each node's HTTP/JSON gateway, node 1 first (`tenure-http` only).
    pub http_endpoints: Vec<String>,
}

impl LocalCluster {
    /// Starts three nodes with fresh data under `data_root` (emptied first).
    /// `tenured_args` go to every `tenured` (e.g. other election timings); etcd gets none.
    pub fn start(
        system: System,
        data_root: &Path,
        tenured: &Path,
        tenured_args: &[String],
    ) -> Result<LocalCluster> {
        if data_root.exists() {
            std::fs::remove_dir_all(data_root)
                .with_context(|| format!("emptying {}", data_root.display()))?;
        }
        std::fs::create_dir_all(data_root)?;
        let http_endpoints = match system {
            System::TenureHttp => free_ports(NODES as usize)?
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect(),
            _ => Vec::new(),
        };
        let launcher = match system {
            System::Tenure | System::TenureHttp => {
                tenure_launcher(data_root, tenured, tenured_args, &http_endpoints)?
            }
            System::Etcd => etcd_launcher(data_root)?,
        };
        let endpoints = launcher.endpoints.clone();
        let procs = Procs::launch(launcher)?;
        Ok(LocalCluster {
            system,
            procs,
            endpoints,
            http_endpoints,
        })
    }

    /// CPU time all running nodes have used so far.
    pub fn cpu_time(&self) -> Duration {
        (1..=NODES).filter_map(|id| self.procs.cpu_time(id)).sum()
    }

    /// Context switches of all running nodes' threads so far.
    pub fn context_switches(&self) -> u64 {
        (1..=NODES)
            .filter_map(|id| self.procs.context_switches(id))
            .sum()
    }

    /// RSS of each node, node 1 first (0 for a stopped node).
    pub fn rss_bytes(&self) -> Vec<u64> {
        (1..=NODES)
            .map(|id| self.procs.rss_bytes(id).unwrap_or(0))
            .collect()
    }

    /// File descriptors each node holds open, node 1 first (0 for a stopped node).
    pub fn descriptors(&self) -> Vec<u64> {
        (1..=NODES)
            .map(|id| self.procs.descriptors(id).unwrap_or(0))
            .collect()
    }

    /// Bytes each node's data directory takes, node 1 first.
    pub fn disk_bytes(&self) -> Vec<u64> {
        (1..=NODES).map(|id| self.procs.disk_bytes(id)).collect()
    }
}

/// `tenured` nodes; each serves its gateway on `http[id - 1]` when `http` is not empty.
fn tenure_launcher(
    data_root: &Path,
    tenured: &Path,
    args: &[String],
    http: &[String],
) -> Result<Launcher> {
    let http = http.to_vec();
    let ports = free_ports(NODES as usize)?;
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let command = tenured_command(
        tenured.to_path_buf(),
        data_root.to_path_buf(),
        addrs.clone(),
        args.to_vec(),
    );
    Ok(Launcher {
        nodes: NODES,
        bin: tenured.to_path_buf(),
        data_root: data_root.to_path_buf(),
        command: Box::new(move |id| {
            let mut cmd = command(id, None);
            // Request logs at info cost CPU that etcd (which logs little) does not spend.
            cmd.env("RUST_LOG", "warn");
            if let Some(gateway) = http.get((id - 1) as usize) {
                cmd.args(["--http-listen", gateway]);
            }
            cmd
        }),
        rejoin: None,
        endpoints: addrs,
        previous: None,
    })
}

fn etcd_launcher(data_root: &Path) -> Result<Launcher> {
    let bin = etcd_bin()?;
    let ports = free_ports(2 * NODES as usize)?;
    let client: Vec<String> = ports[..NODES as usize]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let peer: Vec<String> = ports[NODES as usize..]
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let initial_cluster = peer
        .iter()
        .enumerate()
        .map(|(i, url)| format!("n{}={url}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let data = data_root.to_path_buf();
    let clients = client.clone();
    let program = bin.clone();
    Ok(Launcher {
        nodes: NODES,
        bin,
        data_root: data_root.to_path_buf(),
        command: Box::new(move |id| {
            let i = (id - 1) as usize;
            let client_url = format!("http://{}", clients[i]);
            let mut cmd = Command::new(&program);
            cmd.args(["--name", &format!("n{id}")])
                .arg("--data-dir")
                .arg(data.join(format!("n{id}")))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer[i]])
                .args(["--initial-advertise-peer-urls", &peer[i]])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "tenure-bench"])
                .args(["--logger", "zap", "--log-level", "warn"]);
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("ETCD_") {
                    cmd.env_remove(key);
                }
            }
            cmd
        }),
        rejoin: None,
        endpoints: client,
        previous: None,
    })
}

/// Polls `ready` (an event we cannot subscribe to: another process becoming able to serve)
/// every 20 ms until it succeeds or `timeout` passes.
pub async fn await_ready<F, Fut>(what: &str, timeout: Duration, mut ready: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    loop {
        let error = match ready().await {
            Ok(()) => return Ok(started.elapsed()),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(error.context(format!("{what} not ready after {timeout:?}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
