//! Network-namespace hosts: one namespace per node (`t-n1` …), one for the clients (`t-cl`),
//! and a switch namespace (`t-sw`) holding the bridge `br0`. Every host has a veth pair:
//! `eth0` inside the host, `tv-<host>` inside `t-sw`, enslaved to `br0`. The subnet
//! 10.77.0.0/24 exists only inside these namespaces: the root namespace gets no bridge, no
//! veth and no address in it, so no packet of a test can reach the root namespace's
//! transparent proxy, which accepts any TCP connect: a test that reached it would look healthy
//! while talking to nothing (docs/fault-testing.md, "What runs"). Faults are nftables rules in
//! one table per node (`table inet tenure`, chain `input`, priority −10); healing flushes that
//! chain.

mod faults;
mod namespace;
mod tools;

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub use namespace::{enter_client_namespace, enter_namespace, in_namespace, probe};
use tools::Tools;

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

    fn check(&self, id: u64) -> Result<()> {
        if !(1..=self.nodes).contains(&id) {
            bail!("no node {id}: the hosts are nodes 1..={}", self.nodes);
        }
        Ok(())
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
