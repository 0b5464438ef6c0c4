//! Power cuts: nodes lose power at once (one node, the leader half the time; a minority; or
//! every node), so what they had not synced is gone (`crate::power`), and come back after the
//! hold. The run's first cut takes every node, so a short run sees a majority lose power. Half
//! the cuts wait until a target is inside a sync (`crate::power::SyncGate`), so they lose
//! written data whose sync never returned, not only what a random moment left unsynced. A
//! node that will not start again is recorded as `start-failed`, an anomaly for the checker.

use std::sync::Arc;
use std::time::Duration;

use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;

use super::Nemesis;
use crate::history::{now_ns, PowerCut};
use crate::power::{CutStats, SyncGate};

/// How long a cut waits for a target to sync something before it cuts anyway.
const SYNC_WAIT: Duration = Duration::from_secs(3);

/// The kind of the event a node that would not start after a power cut leaves.
pub const START_FAILED: &str = "start-failed";

impl Nemesis {
    /// Which nodes lose power this time.
    async fn power_targets(&mut self, nodes: &[u64]) -> Vec<u64> {
        let everyone = nodes.to_vec();
        if self.power_cuts == 0 {
            return everyone;
        }
        match self.rng.random_range(0..3) {
            0 => {
                let one = match self.leader_slot().await {
                    Some(leader) if self.rng.random_bool(0.5) => leader,
                    _ => *nodes.choose(&mut self.rng).unwrap_or(&1),
                };
                vec![one]
            }
            1 => {
                let mut shuffled = everyone;
                shuffled.shuffle(&mut self.rng);
                shuffled.truncate((nodes.len() - 1) / 2);
                shuffled.sort_unstable();
                shuffled
            }
            _ => everyone,
        }
    }

    /// Waits (a few seconds at most) until one of `gates` holds a sync.
    async fn held(&self, gates: &[Arc<SyncGate>]) -> bool {
        if gates.is_empty() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + SYNC_WAIT;
        while tokio::time::Instant::now() < deadline && !self.stopped() {
            if gates.iter().any(|gate| gate.holds()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        false
    }

    pub(super) async fn power(&mut self, nodes: Vec<u64>, hold: Duration) -> anyhow::Result<()> {
        let targets = self.power_targets(&nodes).await;
        let mode = *self
            .power_modes
            .choose(&mut self.rng)
            .unwrap_or(&crate::power::CutMode::Drop);
        // Half the cuts land while a target waits in a sync, its last writes on no disk yet.
        let gates: Vec<Arc<SyncGate>> = if self.rng.random_bool(0.5) {
            let procs = self.procs();
            targets.iter().filter_map(|&n| procs.sync_gate(n)).collect()
        } else {
            Vec::new()
        };
        for gate in &gates {
            gate.arm();
        }
        let during_sync = self.held(&gates).await;
        let start = now_ns();
        let mut total = CutStats::default();
        // Each node's failure is its own: the others are still cut and restarted.
        let mut failed = Vec::new();
        {
            let procs = self.procs.clone();
            let mut procs = procs.lock().unwrap_or_else(|p| p.into_inner());
            // One power failure: every target stops before any disk forgets, and a held sync
            // returns only to a process that is already dead.
            for &node in &targets {
                let _ = procs.send_kill(node);
            }
            for gate in &gates {
                gate.fail_and_open();
            }
            for &node in &targets {
                if let Err(e) = procs.kill9(node) {
                    failed.push((node, format!("kill: {e:#}")));
                }
            }
            for &node in &targets {
                match procs.power_cut(node, mode, &mut self.rng) {
                    Ok(stats) => {
                        total.files += stats.files;
                        total.dropped_bytes += stats.dropped_bytes;
                        total.kept_bytes += stats.kept_bytes;
                        total.undone += stats.undone;
                    }
                    Err(e) => failed.push((node, format!("power cut: {e:#}"))),
                }
            }
        }
        self.power_cuts += 1;
        self.wait(hold).await;
        for &node in &targets {
            if let Err(e) = self.procs().restart(node) {
                failed.push((node, format!("{e:#}")));
            }
        }
        let names: Vec<String> = targets.iter().map(|n| format!("n{n}")).collect();
        self.record_power(
            format!(
                "{} lost power ({}{}): {} unsynced bytes dropped, {} kept, {} name changes undone; restarted",
                names.join(","),
                mode.name(),
                if during_sync { ", during a sync" } else { "" },
                total.dropped_bytes,
                total.kept_bytes,
                total.undone
            ),
            start,
            PowerCut {
                nodes: targets.clone(),
                of: self.nodes,
                mode: mode.name().into(),
                dropped_bytes: total.dropped_bytes,
                kept_bytes: total.kept_bytes,
                undone: total.undone,
                during_sync,
            },
        );
        for (node, error) in failed {
            let now = now_ns();
            self.record(
                START_FAILED,
                format!("n{node} did not come back from a power cut: {error}"),
                now,
                Some(now),
            );
        }
        Ok(())
    }
}
