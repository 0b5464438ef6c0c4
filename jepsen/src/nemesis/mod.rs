//! Faults on a schedule drawn from the seed: partitions (random halves, the leader alone, a
//! bridge), kill -9 and restart, SIGSTOP of the leader past the election timeout, clock rate
//! changes and steps through the nodes' fault-injection clock control, random packet loss,
//! membership changes: a member (the leader half the time) removed, its disk wiped and
//! the host rejoining under a new Raft id, or leadership handed to another voter; and power
//! cuts that lose what the nodes had not synced; and upgrades: nodes swapped between this
//! build and the release before, under load (`upgrade`).
//!
//! The schedule deals the faults like cards: each once, in an order drawn from the seed, then
//! again, so a short run sees every fault it names.
//!
//! Faults name host slots 1..=n; after a replacement a slot's Raft id differs from its number
//! (`Procs::raft_id`), so the leader a node names is mapped back to its slot.

mod clock;
mod gate;
mod kill;
mod loss;
mod member;
mod partition;
mod pause;
mod power;
mod upgrade;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tenure_client::Client;
use tokio::time::Instant;

use crate::history::{NemesisEvent, PowerCut};
use crate::hosts::Hosts;
use crate::power::CutMode;
use crate::procs::Procs;
use crate::secure::Connect;
pub use clock::set_clock;
pub use gate::UNGATED;
pub use power::START_FAILED;
pub use upgrade::{
    DOWNGRADED, DOWNGRADE_ACCEPTED, FINISHED, LAGGING, RAISED, SWAP_FAILED, UPGRADED,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Partition,
    Kill,
    Pause,
    Clock,
    Loss,
    Member,
    Power,
    Upgrade,
}

impl Fault {
    pub fn parse(name: &str) -> anyhow::Result<Fault> {
        Ok(match name.trim() {
            "partition" => Fault::Partition,
            "kill" => Fault::Kill,
            "pause" => Fault::Pause,
            "clock" => Fault::Clock,
            "loss" => Fault::Loss,
            "member" => Fault::Member,
            "power" => Fault::Power,
            "upgrade" => Fault::Upgrade,
            other => {
                anyhow::bail!(
                    "unknown nemesis `{other}` (partition, kill, pause, clock, loss, member, power, upgrade)"
                )
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::Partition => "partition",
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Clock => "clock",
            Fault::Loss => "loss",
            Fault::Member => "member",
            Fault::Power => "power",
            Fault::Upgrade => "upgrade",
        }
    }
}

/// What the nemesis breaks: the hosts' network, the node processes, and a client per node.
pub struct Targets {
    pub hosts: Arc<Hosts>,
    pub procs: Arc<Mutex<Procs>>,
    pub per_node: Vec<Client>,
    pub connect: Connect,
}

pub struct Nemesis {
    pub hosts: Arc<Hosts>,
    pub procs: Arc<Mutex<Procs>>,
    pub nodes: u64,
    pub faults: Vec<Fault>,
    /// Largest clock-rate change injected, as a fraction (0.02 = 2 %).
    pub clock_epsilon: f64,
    pub per_node: Vec<Client>,
    pub connect: Connect,
    pub events: Arc<Mutex<Vec<NemesisEvent>>>,
    /// What a power cut keeps of unsynced writes, one drawn per cut.
    pub power_modes: Vec<CutMode>,
    power_cuts: u64,
    /// The faults still to deal in this round of the schedule.
    deck: Vec<Fault>,
    rng: SmallRng,
    /// The Raft id the next replacement member gets.
    next_id: u64,
    /// Set when the run is interrupted: faults are healed at once and no new one starts.
    stop: tokio::sync::watch::Receiver<bool>,
    /// When the run started and ends (set by [`Nemesis::run`]).
    span: Option<(Instant, Instant)>,
    /// Where the `upgrade` nemesis stands.
    stage: upgrade::Stage,
    /// The rules version nodes of this build are held at while the run is mixed.
    held: Option<u32>,
    /// The `upgrade` nemesis makes one rolling upgrade, not swaps both ways.
    rolling: bool,
    /// Whether a node of this build has led a mixed cluster and answered the gate probe.
    gate_probed: bool,
}

/// The leader most nodes name right now, if any.
pub async fn current_leader(per_node: &[Client]) -> Option<u64> {
    let mut votes = std::collections::BTreeMap::<u64, usize>::new();
    for (i, client) in per_node.iter().enumerate() {
        if let Ok(status) = client
            .with_timeout(Duration::from_millis(300))
            .node_status(0)
            .await
        {
            tracing::trace!(node = i + 1, leader = status.leader_id, "status");
            if status.leader_id != 0 {
                *votes.entry(status.leader_id).or_default() += 1;
            }
        }
    }
    votes.into_iter().max_by_key(|(_, n)| *n).map(|(id, _)| id)
}

impl Nemesis {
    /// A nemesis over `targets`, drawing its schedule from `seed`; `stop` interrupts it.
    pub fn new(
        targets: Targets,
        faults: Vec<Fault>,
        clock_epsilon: f64,
        power_modes: Vec<CutMode>,
        seed: u64,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let nodes = targets.per_node.len() as u64;
        Nemesis {
            nodes,
            hosts: targets.hosts,
            procs: targets.procs,
            per_node: targets.per_node,
            connect: targets.connect,
            faults,
            clock_epsilon,
            events: Arc::new(Mutex::new(Vec::new())),
            power_modes,
            power_cuts: 0,
            deck: Vec::new(),
            rng: SmallRng::seed_from_u64(seed ^ 0x006e_656d_6573_6973),
            next_id: nodes + 1,
            stop,
            span: None,
            stage: upgrade::Stage::default(),
            held: None,
            rolling: false,
            gate_probed: false,
        }
    }

    /// Sleeps for `duration`, or less if the run is interrupted.
    async fn wait(&self, duration: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    fn record(&self, kind: &str, detail: String, start_ns: u64, end_ns: Option<u64>) {
        self.record_event(NemesisEvent {
            kind: kind.into(),
            detail,
            start_ns,
            end_ns,
            power: None,
        });
    }

    fn record_power(&self, detail: String, start_ns: u64, power: PowerCut) {
        self.record_event(NemesisEvent {
            kind: "power".into(),
            detail,
            start_ns,
            end_ns: Some(crate::history::now_ns()),
            power: Some(power),
        });
    }

    fn record_event(&self, event: NemesisEvent) {
        tracing::info!(?event, "nemesis");
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    fn procs(&self) -> std::sync::MutexGuard<'_, Procs> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn endpoint(&self, node: u64) -> String {
        self.procs().endpoints()[(node - 1) as usize].clone()
    }

    /// Runs faults until `deadline`, each held for a few seconds, with quiet gaps between.
    pub async fn run(mut self, deadline: Instant) -> Vec<NemesisEvent> {
        self.span = Some((Instant::now(), deadline));
        self.wait(Duration::from_secs(2)).await;
        while !self.faults.is_empty()
            && !self.stopped()
            && Instant::now() + Duration::from_secs(4) < deadline
        {
            // The upgrade is finished when it is due, whatever card comes next, so that the
            // raise and what needs it run under load in every run.
            let fault = match self.faults.contains(&Fault::Upgrade) && self.upgrade_due() {
                true => Fault::Upgrade,
                false => self.deal(),
            };
            let hold = Duration::from_millis(self.rng.random_range(1_500..5_000));
            if let Err(e) = self.inject(fault, hold).await {
                tracing::warn!(fault = fault.name(), "nemesis failed: {e:#}");
            }
            let quiet = Duration::from_millis(self.rng.random_range(500..3_000));
            self.wait(quiet.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
        // A fault that ran past the upgrade's time leaves it unfinished: finished now.
        if self.faults.contains(&Fault::Upgrade)
            && self.stage == upgrade::Stage::Mixed
            && !self.stopped()
        {
            if let Err(e) = self.finish_upgrade().await {
                tracing::warn!("finishing the upgrade: {e:#}");
            }
        }
        self.heal_all().await;
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The next fault: the next card of this round, each fault once per round in an order
    /// drawn from the seed.
    fn deal(&mut self) -> Fault {
        if self.deck.is_empty() {
            self.deck = self.faults.clone();
            self.deck.shuffle(&mut self.rng);
        }
        self.deck.pop().unwrap_or(Fault::Partition)
    }

    async fn inject(&mut self, fault: Fault, hold: Duration) -> anyhow::Result<()> {
        let nodes: Vec<u64> = (1..=self.nodes).collect();
        match fault {
            Fault::Partition => self.partition(nodes, hold).await?,
            Fault::Kill => self.kill(nodes, hold).await?,
            Fault::Pause => self.pause(hold).await?,
            Fault::Clock => self.clock(nodes, hold).await?,
            Fault::Member => self.change_member().await?,
            Fault::Loss => self.loss(nodes, hold).await?,
            Fault::Power => self.power(nodes, hold).await?,
            Fault::Upgrade => self.upgrade().await?,
        }
        Ok(())
    }

    /// The host slot of the leader most nodes name.
    async fn leader_slot(&self) -> Option<u64> {
        let leader = current_leader(&self.per_node).await?;
        self.procs().slot_of(leader)
    }

    /// Ends every fault: network healed, paused nodes resumed, killed nodes restarted,
    /// clock rates back to normal.
    pub async fn heal_all(&self) {
        if let Err(e) = self.hosts.heal() {
            tracing::warn!("heal network: {e:#}");
        }
        for node in 1..=self.nodes {
            let result = {
                let mut procs = self.procs();
                if procs.is_running(node) {
                    procs.resume(node)
                } else {
                    procs.restart(node)
                }
            };
            if let Err(e) = result {
                tracing::warn!(node, "heal process: {e:#}");
                if self.faults.contains(&Fault::Power) {
                    let now = crate::history::now_ns();
                    let detail = format!("n{node} would not start at the end of the run: {e:#}");
                    self.record(START_FAILED, detail, now, Some(now));
                }
            }
            if self.faults.contains(&Fault::Clock) {
                let _ = set_clock(&self.connect, &self.endpoint(node), 0, 0).await;
            }
        }
        if self.faults.contains(&Fault::Member) {
            if let Err(e) = self.readmit_all().await {
                tracing::warn!("re-admitting members: {e:#}");
            }
        }
    }
}
