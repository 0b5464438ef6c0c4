//! How the nodes are started: the `tenured` binary, its command line, and the commands that
//! start the nodes of one cluster on the namespace hosts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::hosts::{node_ip, node_namespace, Hosts};

pub const PORT: u16 = 7100;

/// Which build a node runs: this one, or the release before it ([`Launcher::previous`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Release {
    Current,
    Previous,
}

pub(super) const BUILD_HINT: &str = "build it with `cargo build --bin tenured --features tenure-node/fault-injection` or set TENURED_BIN";

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

/// How the nodes of one cluster are started: the runner below kills, restarts, pauses and
/// measures them the same way whatever they are (`tenured` on namespace hosts for the fault
/// harness; `tenured` or `etcd` on loopback for the benchmarks).
pub struct Launcher {
    pub nodes: u64,
    /// The binary each process ends up as (after a wrapper like `nsenter` execs it).
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
    /// The release before this build, that nodes can be swapped to and from (the `upgrade`
    /// nemesis, `tenure-jepsen upgrade`); None where there is none.
    pub previous: Option<Previous>,
}

/// Another build of `tenured` the same nodes can run: its binary and how its nodes start
/// (the same flags, less those it does not know).
pub struct Previous {
    pub bin: PathBuf,
    pub command: Box<dyn Fn(u64) -> Command + Send>,
    pub rejoin: Option<Box<dyn Fn(u64, u64) -> Command + Send>>,
}

impl Launcher {
    /// `tenured` nodes on the namespace hosts: node N in `t-nN` on `10.77.0.(10+N):7100`.
    /// With `previous` (its binary and its flags), the nodes can run that release too.
    pub fn namespaced(
        hosts: &Hosts,
        bin: PathBuf,
        nodes: u64,
        data_root: PathBuf,
        extra_args: Vec<String>,
        previous: Option<(PathBuf, Vec<String>)>,
    ) -> Result<Launcher> {
        if nodes == 0 || nodes > hosts.nodes() {
            bail!("cannot start {nodes} nodes on {} hosts", hosts.nodes());
        }
        let addrs: Vec<String> = (1..=nodes)
            .map(|n| format!("{}:{PORT}", node_ip(n)))
            .collect();
        let (command, rejoin) =
            namespaced_commands(bin.clone(), data_root.clone(), addrs.clone(), extra_args);
        let previous = previous.map(|(bin, args)| {
            let (command, rejoin) =
                namespaced_commands(bin.clone(), data_root.clone(), addrs.clone(), args);
            Previous {
                bin,
                command,
                rejoin: Some(rejoin),
            }
        });
        Ok(Launcher {
            nodes,
            bin,
            data_root,
            command,
            rejoin: Some(rejoin),
            endpoints: addrs,
            previous,
        })
    }
}

type StartNode = Box<dyn Fn(u64) -> Command + Send>;
type JoinNode = Box<dyn Fn(u64, u64) -> Command + Send>;

/// How `bin` starts host slot N in its namespace, founding or joining.
fn namespaced_commands(
    bin: PathBuf,
    data_root: PathBuf,
    addrs: Vec<String>,
    extra_args: Vec<String>,
) -> (StartNode, JoinNode) {
    let tenured = Arc::new(tenured_command(bin, data_root, addrs, extra_args));
    let rejoining = tenured.clone();
    (
        Box::new(move |id| in_namespace(id, tenured(id, None))),
        Box::new(move |slot, raft_id| in_namespace(slot, rejoining(slot, Some(raft_id)))),
    )
}

impl Launcher {
    /// The binary node processes of `release` end up as.
    pub fn bin_of(&self, release: Release) -> &Path {
        match (release, &self.previous) {
            (Release::Previous, Some(previous)) => &previous.bin,
            _ => &self.bin,
        }
    }
}

/// `inner` run inside host `slot`'s network namespace, by `nsenter`, which enters that
/// namespace and execs `inner` in place. Only the network namespace: unlike `ip netns exec`,
/// which also gives the process a copy of the harness's mounts, so that a data directory
/// the power nemesis unmounts (and mounts again) stays mounted there.
fn in_namespace(slot: u64, inner: Command) -> Command {
    let nsenter = ["/usr/bin/nsenter", "/bin/nsenter"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("nsenter");
    let mut cmd = Command::new(nsenter);
    cmd.arg(format!("--net=/run/netns/{}", node_namespace(slot)))
        .arg("--");
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
