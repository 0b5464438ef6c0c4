//! Upgrades and downgrades under load (spec §4.26): the run starts on the release before this
//! build, and each `upgrade` fault swaps one node's binary, as an operator does (SIGTERM, the
//! other binary on the same data directory): to this build, or back to the release before
//! while the cluster's rules version still allows it. Nodes of this build run with
//! `--max-rules` of the release before meanwhile, so the cluster cannot raise its version
//! under the swaps. From 60 % of the run on, the upgrade is finished: every node onto this
//! build, one at a time with the leader last, then each restarted without the hold; the
//! leader then raises the rules, and what needed them is served. After that no node goes
//! back.

use std::time::Duration;

use rand::seq::IndexedRandom;
use rand::Rng;
use tokio::time::Instant;

use super::Nemesis;
use crate::history::now_ns;
use crate::procs::Release;

/// How long a node has to stop on SIGTERM before it is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(10);
/// How long a swapped node has to catch up with the leader, and the cluster to raise its
/// rules once every node may.
const SETTLE: Duration = Duration::from_secs(15);

/// The `detail` of an upgrade event that moved a node onto this build.
pub const UPGRADED: &str = "(upgrade)";
/// The `detail` of one that moved a node back to the release before.
pub const DOWNGRADED: &str = "(downgrade)";
/// The `detail` prefix of the event of the raise.
pub const RAISED: &str = "rules raised to";
/// The `detail` of the event that ends the upgrade: every node on this build, the rules
/// raised if this build has higher ones, and the release before refusing the raised data.
pub const FINISHED: &str = "upgrade finished";
/// The `detail` of the event of a node that did not start on the binary it was swapped to.
pub const SWAP_FAILED: &str = "SWAP FAILED";
/// The `detail` of the event of a release before that started on data of raised rules.
pub const DOWNGRADE_ACCEPTED: &str = "DOWNGRADE ACCEPTED";
/// The `detail` of an event that found a node behind the leader before or after a swap: in a
/// cluster of two releases every member keeps up, or one cannot apply what the other wrote.
pub const LAGGING: &str = "LAGGING";

/// Where the upgrade stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Stage {
    /// Nodes of both builds; the rules held at the release before's.
    #[default]
    Mixed,
    /// Every node on this build, the rules raised (or the raise failed: see the events).
    Finished,
}

impl Nemesis {
    /// The upgrade as an operator makes it, once: every node onto this build one at a time,
    /// the leader last, from a quarter of the run on; no hold, no way back.
    pub fn rolling(mut self) -> Self {
        self.rolling = true;
        self
    }

    /// Whether the upgrade should be finished now: from 60 % of the run on (a quarter, when
    /// rolling).
    pub(super) fn upgrade_due(&self) -> bool {
        let Some((started, deadline)) = self.span else {
            return false;
        };
        let from = if self.rolling { 0.25 } else { 0.6 };
        self.stage == Stage::Mixed
            && Instant::now() >= started + deadline.saturating_duration_since(started).mul_f64(from)
    }

    /// The highest rules version the release before applies: what its nodes announce (a node
    /// of 0.1.0 announces none: 1).
    async fn previous_rules(&self) -> u32 {
        for slot in 1..=self.nodes {
            if self.procs().release_of(slot) != Release::Previous {
                continue;
            }
            let status = self.per_node[(slot - 1) as usize]
                .with_timeout(Duration::from_secs(1))
                .node_status(0)
                .await;
            if let Ok(status) = status {
                return status
                    .rules_range
                    .split_once('-')
                    .and_then(|(_, max)| max.parse().ok())
                    .unwrap_or(1);
            }
        }
        self.held.unwrap_or(1)
    }

    /// One `upgrade` fault: a node swapped while the run is mixed; the upgrade finished once
    /// it is due.
    pub(super) async fn upgrade(&mut self) -> anyhow::Result<()> {
        if !self.procs().has_previous() {
            anyhow::bail!("the run has no previous release to swap with (--old-bin)");
        }
        match self.stage {
            // Nothing left to swap: every node runs this build and the rules were raised,
            // so none may go back.
            Stage::Finished => Ok(()),
            Stage::Mixed if self.upgrade_due() => self.finish_upgrade().await,
            // A rolling upgrade waits for its time; a mixed run swaps meanwhile.
            Stage::Mixed if self.rolling => Ok(()),
            Stage::Mixed => self.swap_one().await,
        }
    }

    async fn swap_one(&mut self) -> anyhow::Result<()> {
        let hold = self.previous_rules().await;
        self.held = Some(hold);
        self.procs().set_hold(Some(hold));
        let (previous, current): (Vec<u64>, Vec<u64>) =
            (1..=self.nodes).partition(|slot| self.procs().release_of(*slot) == Release::Previous);
        let up = current.is_empty() || (!previous.is_empty() && self.rng.random_bool(0.6));
        if !up {
            // Back only while the cluster has not raised its rules past the release before.
            if let Some(rules) = self.cluster_rules().await {
                anyhow::ensure!(
                    rules <= hold,
                    "the cluster runs rules {rules} while held at {hold}: no way back"
                );
            }
            let slot = *current.choose(&mut self.rng).unwrap_or(&1);
            return self.swap(slot, Release::Previous).await;
        }
        let slot = *previous.choose(&mut self.rng).unwrap_or(&1);
        self.swap(slot, Release::Current).await?;
        // The new build then leads the old one until its gate has been probed, and half the
        // times after: what it proposes, a node of the release before must decode and apply.
        // Left to chance, a short run can end its mixed part without the new build ever
        // leading, or with its one leadership unprobed (a transfer or a grant that timed out).
        if !self.gate_probed || self.rng.random_bool(0.5) {
            let to = self.procs().raft_id(slot);
            let start = now_ns();
            let moved = self.per_node[(slot - 1) as usize]
                .with_timeout(Duration::from_secs(5))
                .transfer_leader(to)
                .await;
            let detail = match &moved {
                Ok(m) if m.transferred => format!("leadership to n{slot} (this build)"),
                Ok(m) => format!("leadership to n{slot} not moved: {}", m.detail),
                Err(e) => format!("leadership to n{slot} not moved: {e}"),
            };
            let led = matches!(&moved, Ok(m) if m.transferred);
            self.record("upgrade", detail, start, Some(now_ns()));
            if led && self.probe_gate(slot, hold).await {
                self.gate_probed = true;
            }
        }
        Ok(())
    }

    /// Swaps `slot` to `to` once every node has caught up with the leader, and waits until
    /// they all have again.
    async fn swap(&mut self, slot: u64, to: Release) -> anyhow::Result<()> {
        self.check_lag("before a swap").await;
        let start = now_ns();
        let from = self.procs().release_of(slot);
        let procs = self.procs.clone();
        let swapped = tokio::task::spawn_blocking(move || {
            procs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .swap(slot, to, STOP_PATIENCE)
        })
        .await?;
        if let Err(e) = swapped {
            let detail = format!("{SWAP_FAILED}: n{slot} {from:?} → {to:?}: {e:#}");
            self.record("upgrade", detail, start, Some(now_ns()));
            return Err(e);
        }
        let what = match (from, to) {
            (Release::Previous, Release::Current) => format!("previous → this build {UPGRADED}"),
            (Release::Current, Release::Previous) => format!("this build → previous {DOWNGRADED}"),
            _ => format!(
                "restarted on this build{}",
                match self.procs().hold() {
                    Some(hold) => format!(" held at rules {hold}"),
                    None => " without --max-rules".into(),
                }
            ),
        };
        self.record("upgrade", format!("n{slot}: {what}"), start, Some(now_ns()));
        self.check_lag("after a swap").await;
        Ok(())
    }

    /// Records a [`LAGGING`] event naming every running node that has not applied what the
    /// leader had committed within [`SETTLE`].
    async fn check_lag(&self, when: &str) {
        let start = now_ns();
        let behind = self.lagging().await;
        if !behind.is_empty() {
            let detail = format!("{LAGGING} {when}: {}", behind.join("; "));
            self.record("upgrade", detail, start, Some(now_ns()));
        }
    }

    /// Every node onto this build, the leader last; the hold released; the raise awaited.
    pub(super) async fn finish_upgrade(&mut self) -> anyhow::Result<()> {
        let hold = self.previous_rules().await;
        self.held = Some(hold);
        self.stage = Stage::Finished;
        self.procs().set_hold(None);
        let leader = self.leader_slot().await;
        let mut order: Vec<u64> = (1..=self.nodes).filter(|s| Some(*s) != leader).collect();
        order.extend(leader);
        // Every node, even past one that failed (its failure is an event of its own).
        let mut failed = None;
        for slot in order {
            if let Err(e) = self.swap(slot, Release::Current).await {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        // A raise is due only if this build applies rules the release before does not.
        let ours = self.current_rules().await;
        let start = now_ns();
        if ours.is_some_and(|max| max <= hold) {
            self.record(
                "upgrade",
                format!("{FINISHED}: both releases apply rules up to {hold}, nothing to raise"),
                start,
                Some(start),
            );
            return Ok(());
        }
        let deadline = Instant::now() + SETTLE;
        loop {
            let rules = self.cluster_rules().await;
            if rules.is_some_and(|r| r > hold) {
                let rules = rules.unwrap_or(hold);
                self.record(
                    "upgrade",
                    format!("{RAISED} {rules}"),
                    start,
                    Some(now_ns()),
                );
                self.downgrade_refused().await?;
                let now = now_ns();
                self.record("upgrade", FINISHED.to_string(), now, Some(now));
                return Ok(());
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "every node runs this build, and the rules were not raised in {SETTLE:?}"
                );
            }
            self.wait(Duration::from_millis(200)).await;
        }
    }

    /// The highest rules version this build applies, as one of its nodes announces it.
    async fn current_rules(&self) -> Option<u32> {
        for slot in 1..=self.nodes {
            if self.procs().release_of(slot) != Release::Current {
                continue;
            }
            let status = self.per_node[(slot - 1) as usize]
                .with_timeout(Duration::from_secs(1))
                .node_status(0)
                .await;
            if let Some(max) = status.ok().and_then(|s| {
                s.rules_range
                    .split_once('-')
                    .and_then(|(_, max)| max.parse::<u32>().ok())
            }) {
                return Some(max);
            }
        }
        None
    }

    /// After the raise the release before must refuse a node's data: one follower, once its
    /// snapshot covers the raise, is started on the release before, which must exit at once
    /// (a 0.1.0 node refuses the snapshot format the raise brought, naming it); then it runs
    /// this build again. Started instead, it is a [`DOWNGRADE_ACCEPTED`] event.
    async fn downgrade_refused(&mut self) -> anyhow::Result<()> {
        let leader = self.leader_slot().await;
        let Some(slot) = (1..=self.nodes).find(|s| Some(*s) != leader) else {
            return Ok(());
        };
        let client = self.per_node[(slot - 1) as usize].with_timeout(Duration::from_secs(1));
        let covered = match leader {
            Some(leader) => self.per_node[(leader - 1) as usize]
                .with_timeout(Duration::from_secs(1))
                .node_status(0)
                .await
                .map_or(0, |s| s.applied_index),
            None => 0,
        };
        let deadline = Instant::now() + SETTLE;
        while Instant::now() < deadline {
            let snapshot = client
                .node_status(0)
                .await
                .ok()
                .and_then(|s| s.storage)
                .map_or(0, |s| s.last_snapshot_index);
            if snapshot >= covered {
                break;
            }
            self.wait(Duration::from_millis(200)).await;
        }
        let start = now_ns();
        let procs = self.procs.clone();
        let tried = tokio::task::spawn_blocking(move || {
            procs.lock().unwrap_or_else(|p| p.into_inner()).swap(
                slot,
                Release::Previous,
                STOP_PATIENCE,
            )
        })
        .await?;
        // It may listen a moment before it reads its data and exits: alive after a few
        // seconds, it took the data.
        let mut refused = tried.is_err();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !refused && Instant::now() < deadline {
            refused = !self.procs().is_running(slot);
            self.wait(Duration::from_millis(100)).await;
        }
        let detail = match refused {
            false => format!(
                "{DOWNGRADE_ACCEPTED}: n{slot} started on the release before after the raise"
            ),
            true => {
                let log = self.procs().log_path(slot);
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let why = text
                    .lines()
                    .rev()
                    .find(|l| l.starts_with("Error:"))
                    .unwrap_or("it exited at start")
                    .trim()
                    .to_string();
                format!("n{slot}: the release before refused the raised data: {why}")
            }
        };
        self.record("upgrade", detail, start, Some(now_ns()));
        // Back on this build (not counted as an upgrade: it was on it before the try).
        let start = now_ns();
        let procs = self.procs.clone();
        tokio::task::spawn_blocking(move || {
            procs.lock().unwrap_or_else(|p| p.into_inner()).swap(
                slot,
                Release::Current,
                STOP_PATIENCE,
            )
        })
        .await??;
        self.record(
            "upgrade",
            format!("n{slot}: back on this build"),
            start,
            Some(now_ns()),
        );
        self.check_lag("after the release before was refused").await;
        Ok(())
    }

    /// The rules version the leader runs, if a leader answers.
    async fn cluster_rules(&self) -> Option<u32> {
        let leader = self.leader_slot().await?;
        let status = self.per_node[(leader - 1) as usize]
            .with_timeout(Duration::from_secs(1))
            .node_status(0)
            .await
            .ok()?;
        Some(status.rules_version.max(1))
    }

    /// The running nodes that have not applied, within [`SETTLE`], what the leader had
    /// committed when this was asked (each with its release, and why it halted if it did).
    async fn lagging(&self) -> Vec<String> {
        let deadline = Instant::now() + SETTLE;
        let mut target = None;
        let mut behind = Vec::new();
        while Instant::now() < deadline && !self.stopped() {
            if target.is_none() {
                if let Some(leader) = self.leader_slot().await {
                    target = self.per_node[(leader - 1) as usize]
                        .with_timeout(Duration::from_secs(1))
                        .node_status(0)
                        .await
                        .ok()
                        .map(|s| s.commit_index);
                }
            }
            if let Some(target) = target {
                behind.clear();
                for slot in 1..=self.nodes {
                    let (running, release) = {
                        let mut procs = self.procs();
                        (
                            procs.is_running(slot) && !procs.is_paused(slot),
                            procs.release_of(slot),
                        )
                    };
                    if !running {
                        continue;
                    }
                    let status = self.per_node[(slot - 1) as usize]
                        .with_timeout(Duration::from_secs(1))
                        .node_status(0)
                        .await;
                    match status {
                        Ok(s) if s.applied_index >= target => {}
                        Ok(s) => behind.push(format!(
                            "n{slot} ({release:?}) applied {} of {target}{}",
                            s.applied_index,
                            match s.halted.as_str() {
                                "" => String::new(),
                                why => format!(", halted: {why}"),
                            }
                        )),
                        Err(e) => behind.push(format!("n{slot} ({release:?}) gave no status: {e}")),
                    }
                }
                if behind.is_empty() {
                    return behind;
                }
            }
            self.wait(Duration::from_millis(100)).await;
        }
        if target.is_none() {
            behind.push("no leader named its commit index".into());
        }
        behind
    }
}
