//! Network-namespace hosts: one namespace per node (`t-n1` …), one for the clients (`t-cl`),
//! and a switch namespace (`t-sw`) holding the bridge `br0`. Every host has a veth pair:
//! `eth0` inside the host, `tv-<host>` inside `t-sw`, enslaved to `br0`. The subnet
//! 10.77.0.0/24 exists only inside these namespaces: the root namespace gets no bridge, no
//! veth and no address in it, so no packet of a test can reach the root namespace's
//! transparent proxy, which accepts any TCP connect: a test that reached it would look healthy
//! while talking to nothing (docs/fault-testing.md, "What runs"). Faults are nftables rules in
//! one table per node (`table inet tenure`, chain `input`, priority −10); healing flushes that
//! chain.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sched::{setns, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The test subnet; it exists only inside the namespaces made here.
pub const SUBNET: &str = "10.77.0.0/24";
/// Every namespace this module makes starts with this prefix.
pub const PREFIX: &str = "t-";
pub const CLIENT_NAMESPACE: &str = "t-cl";
pub const SWITCH_NAMESPACE: &str = "t-sw";
pub const MAX_NODES: u64 = 9;
const BRIDGE: &str = "br0";
const TABLE: &str = "inet tenure";

pub fn node_namespace(id: u64) -> String {
    format!("t-n{id}")
}

pub fn node_ip(id: u64) -> String {
    format!("10.77.0.{}", 10 + id)
}

pub fn client_ip() -> String {
    "10.77.0.100".to_string()
}

/// Moves the calling thread into `t-cl`. Threads inherit the network namespace of the thread
/// that creates them, so call this on the main thread *before* building the tokio runtime:
/// every runtime thread, and every socket the clients open, then lives in `t-cl`. Processes
/// spawned from such a thread also start in `t-cl`.
pub fn enter_client_namespace() -> Result<()> {
    enter_namespace(CLIENT_NAMESPACE)
}

/// Moves the calling thread into the named namespace (`/run/netns/NAME`).
pub fn enter_namespace(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let file =
        File::open(&path).with_context(|| format!("opening {path} (is the host set up?)"))?;
    setns(file, CloneFlags::CLONE_NEWNET).with_context(|| format!("setns into {name}"))
}

/// Runs `f` on a fresh thread inside namespace `name` and returns its result.
pub fn in_namespace<T: Send>(name: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_namespace(name)?;
            f()
        })
        .join()
        .map_err(|_| anyhow!("thread inside {name} panicked"))?
    })
}

/// Proves that a TCP payload goes from namespace `from` to `to_ip` (inside namespace `to`) and
/// back within `timeout`: a listener inside `to` echoes a nonce the connector sends. A connect
/// alone proves nothing (paused processes and transparent proxies accept connects).
pub fn probe(from: &str, to: &str, to_ip: &str, timeout: Duration) -> Result<()> {
    let listener = in_namespace(to, || {
        let l = TcpListener::bind((to_ip, 0)).with_context(|| format!("bind {to_ip} in {to}"))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })?;
    let addr: SocketAddr = listener.local_addr()?;
    let nonce = format!(
        "tenure-probe-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    );
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| echo_until(&listener, &done, Instant::now() + timeout));
        let sent = in_namespace(from, || {
            let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            stream.write_all(nonce.as_bytes())?;
            let mut back = vec![0; nonce.len()];
            stream.read_exact(&mut back)?;
            Ok(back)
        });
        done.store(true, Ordering::SeqCst);
        match sent {
            Ok(back) if back == nonce.as_bytes() => Ok(()),
            Ok(_) => bail!("{from} -> {addr}: the echo does not match the payload sent"),
            Err(e) => Err(e.context(format!("{from} -> {addr} ({to})"))),
        }
    })
}

fn echo_until(listener: &TcpListener, done: &AtomicBool, deadline: Instant) {
    while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 256];
                if let Ok(n) = stream.read(&mut buf) {
                    let _ = stream.write_all(&buf[..n]);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Absolute paths of `ip` and `nft`, or a clear error naming what to install.
struct Tools {
    ip: PathBuf,
    nft: PathBuf,
}

impl Tools {
    fn find() -> Result<Tools> {
        Ok(Tools {
            ip: find_tool("ip", "iproute2")?,
            nft: find_tool("nft", "nftables")?,
        })
    }

    /// Runs `ip ARGS…`, failing with the command and its stderr.
    fn ip(&self, args: &[&str]) -> Result<String> {
        run(Command::new(&self.ip).args(args), None)
    }

    /// Runs an nft script inside a namespace, atomically (`nft -f -`).
    fn nft(&self, ns: &str, script: &str) -> Result<String> {
        let mut cmd = Command::new(&self.ip);
        cmd.args(["netns", "exec", ns])
            .arg(&self.nft)
            .args(["-f", "-"]);
        run(&mut cmd, Some(script))
    }

    fn namespaces(&self) -> Result<Vec<String>> {
        let out = self.ip(&["netns", "list"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(PREFIX))
            .map(str::to_string)
            .collect())
    }

    /// Processes whose network namespace is `ns`, this process excepted.
    fn pids(&self, ns: &str) -> Result<Vec<i32>> {
        let me = std::process::id() as i32;
        let out = self.ip(&["netns", "pids", ns])?;
        Ok(out
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|&p| p != me)
            .collect())
    }
}

fn find_tool(name: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("`{name}` not found: install it (`apt-get install -y {package}`)"))
}

fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    let shown = format!("{cmd:?}").replace('"', "");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {shown}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("{shown} failed ({}): {}", out.status, err.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The namespaces, bridge, veths and fault tables of one test run. Dropping it tears
/// everything down (errors are logged).
pub struct Hosts {
    nodes: u64,
    tools: Tools,
}

impl Hosts {
    /// Builds hosts for nodes `1..=nodes` and the client, then proves TCP payloads flow between
    /// every pair of hosts. Refuses to run over leftovers; tears down on failure.
    pub fn setup(nodes: u64) -> Result<Hosts> {
        if !(1..=MAX_NODES).contains(&nodes) {
            bail!("nodes must be 1..={MAX_NODES}, not {nodes}");
        }
        let tools = Tools::find()?;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if !status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        {
            bail!("network-namespace hosts need root (ip netns, veths, nftables)");
        }
        let left = tools.namespaces().context("listing network namespaces")?;
        if !left.is_empty() {
            bail!(
                "leftovers from an earlier run: {} ; run `tenure-jepsen teardown`",
                left.join(", ")
            );
        }
        // From here on the guard tears down whatever was built if a step fails.
        let hosts = Hosts { nodes, tools };
        hosts
            .build()
            .context("setting up the network-namespace hosts")?;
        Ok(hosts)
    }

    fn build(&self) -> Result<()> {
        let t = &self.tools;
        t.ip(&["netns", "add", SWITCH_NAMESPACE])?;
        t.ip(&["-n", SWITCH_NAMESPACE, "link", "set", "lo", "up"])?;
        t.ip(&[
            "-n",
            SWITCH_NAMESPACE,
            "link",
            "add",
            BRIDGE,
            "type",
            "bridge",
        ])?;
        t.ip(&["-n", SWITCH_NAMESPACE, "link", "set", BRIDGE, "up"])?;
        let mut hosts: Vec<(String, String, String)> = (1..=self.nodes)
            .map(|n| (node_namespace(n), format!("tv-n{n}"), node_ip(n)))
            .collect();
        hosts.push((CLIENT_NAMESPACE.into(), "tv-cl".into(), client_ip()));
        for (ns, veth, ip) in &hosts {
            t.ip(&["netns", "add", ns])?;
            t.ip(&["-n", ns, "link", "set", "lo", "up"])?;
            // Both ends are created directly in their namespaces: nothing in the root one.
            let sw = SWITCH_NAMESPACE;
            t.ip(&[
                "-n", sw, "link", "add", veth, "type", "veth", "peer", "eth0", "netns", ns,
            ])?;
            t.ip(&["-n", sw, "link", "set", veth, "master", BRIDGE, "up"])?;
            t.ip(&["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
            t.ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        for n in 1..=self.nodes {
            let table = format!(
                "table {TABLE} {{\n chain input {{ type filter hook input priority -10; policy accept; }}\n}}\n"
            );
            t.nft(&node_namespace(n), &table)?;
        }
        let route = t.ip(&["-n", CLIENT_NAMESPACE, "route", "get", &node_ip(1)]);
        if !route.as_deref().unwrap_or("").contains("dev eth0") {
            bail!(
                "{CLIENT_NAMESPACE} does not route {} through eth0: {route:?}",
                node_ip(1)
            );
        }
        for (from, _, _) in &hosts {
            for (to, _, to_ip) in &hosts {
                if from != to {
                    probe(from, to, to_ip, Duration::from_secs(5))
                        .context("connectivity check after setup")?;
                }
            }
        }
        Ok(())
    }

    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    pub(crate) fn ip_bin(&self) -> &Path {
        &self.tools.ip
    }

    fn check(&self, id: u64) -> Result<()> {
        if !(1..=self.nodes).contains(&id) {
            bail!("no node {id}: the hosts are nodes 1..={}", self.nodes);
        }
        Ok(())
    }

    fn add_rules(&self, node: u64, rules: &[String]) -> Result<()> {
        if rules.is_empty() {
            return Ok(());
        }
        let script: String = rules
            .iter()
            .map(|r| format!("add rule {TABLE} input iifname \"eth0\" {r}\n"))
            .collect();
        self.tools.nft(&node_namespace(node), &script).map(drop)
    }

    /// Nodes in different groups cannot reach each other (each drops, on input, packets from the
    /// nodes of other groups). Nodes in no group keep reaching everyone; the client is never cut
    /// off. Rules add to those already in place: `heal` first for a fresh topology.
    pub fn partition(&self, groups: &[Vec<u64>]) -> Result<()> {
        let mut group_of = vec![None; self.nodes as usize + 1];
        for (g, group) in groups.iter().enumerate() {
            for &n in group {
                self.check(n)?;
                if group_of[n as usize].replace(g).is_some() {
                    bail!("node {n} is in more than one group of {groups:?}");
                }
            }
        }
        for n in 1..=self.nodes {
            let Some(mine) = group_of[n as usize] else {
                continue;
            };
            let others: Vec<String> = (1..=self.nodes)
                .filter(|&p| matches!(group_of[p as usize], Some(g) if g != mine))
                .map(node_ip)
                .collect();
            if !others.is_empty() {
                self.add_rules(n, &[format!("ip saddr {{ {} }} drop", others.join(", "))])?;
            }
        }
        Ok(())
    }

    /// Cuts `node` off from every other node (not from the client).
    pub fn isolate(&self, node: u64) -> Result<()> {
        self.check(node)?;
        let rest: Vec<u64> = (1..=self.nodes).filter(|&n| n != node).collect();
        self.partition(&[vec![node], rest])
    }

    /// Drops packets from `from` arriving at `to`; the other direction still flows (but TCP
    /// stalls both ways, as its acknowledgements are lost).
    pub fn one_way(&self, from: u64, to: u64) -> Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.add_rules(to, &[format!("ip saddr {} drop", node_ip(from))])
    }

    /// Random loss of `percent`% of everything arriving at these nodes (peers and clients).
    pub fn loss(&self, nodes: &[u64], percent: u8) -> Result<()> {
        if percent > 100 {
            bail!("loss percent must be 0..=100, not {percent}");
        }
        for &n in nodes {
            self.check(n)?;
            match percent {
                0 => {}
                100 => self.add_rules(n, &["drop".to_string()])?,
                p => self.add_rules(n, &[format!("numgen random mod 100 < {p} drop")])?,
            }
        }
        Ok(())
    }

    /// Removes every fault rule on every node.
    pub fn heal(&self) -> Result<()> {
        for n in 1..=self.nodes {
            self.tools
                .nft(&node_namespace(n), &format!("flush chain {TABLE} input\n"))?;
        }
        Ok(())
    }

    /// The fault chain of one node, as `nft list` prints it.
    pub fn rules(&self, node: u64) -> Result<String> {
        self.check(node)?;
        let ns = node_namespace(node);
        let mut cmd = Command::new(&self.tools.ip);
        cmd.args(["netns", "exec", &ns]).arg(&self.tools.nft);
        run(cmd.args(["list", "chain", "inet", "tenure", "input"]), None)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Err(e) = teardown_with(&self.tools) {
            tracing::error!("tearing down the network-namespace hosts: {e:#}");
        }
    }
}

/// Removes every `t-*` namespace: kills the processes in each (this process excepted), waits
/// until they are gone, deletes the veths, the host namespaces, then the switch namespace.
pub fn teardown_leftovers() -> Result<()> {
    teardown_with(&Tools::find()?)
}

fn teardown_with(t: &Tools) -> Result<()> {
    let spaces = t.namespaces()?;
    let mut first_error: Option<anyhow::Error> = None;
    let mut note = |r: Result<String>| {
        if let Err(e) = r {
            tracing::warn!("teardown: {e:#}");
            first_error.get_or_insert(e);
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut alive = Vec::new();
        for ns in &spaces {
            for pid in t.pids(ns).unwrap_or_default() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                alive.push(format!("{pid} in {ns}"));
            }
        }
        if alive.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("processes survive SIGKILL: {}", alive.join(", "));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if spaces.iter().any(|s| s == SWITCH_NAMESPACE) {
        let links = t.ip(&["-n", SWITCH_NAMESPACE, "-o", "link", "show", "type", "veth"]);
        for line in links.unwrap_or_default().lines() {
            // "5: tv-n1@if2: <…" → "tv-n1"
            if let Some(name) = line.split(": ").nth(1).and_then(|n| n.split('@').next()) {
                note(t.ip(&["-n", SWITCH_NAMESPACE, "link", "del", name]));
            }
        }
    }
    for ns in spaces.iter().filter(|s| *s != SWITCH_NAMESPACE) {
        note(t.ip(&["netns", "del", ns]));
    }
    if spaces.iter().any(|s| s == SWITCH_NAMESPACE) {
        note(t.ip(&["netns", "del", SWITCH_NAMESPACE]));
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
