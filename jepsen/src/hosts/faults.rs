//! Faults as nftables rules in each node's `input` chain: partitions, one-way cuts and random
//! loss; healing flushes the chain.

use std::process::Command;

use anyhow::{bail, Result};

use super::tools::run;
use super::{node_ip, node_namespace, Hosts, TABLE};

impl Hosts {
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
