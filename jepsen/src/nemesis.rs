//! Faults on a schedule drawn from the seed: partitions (random halves, the leader alone, a
//! bridge), kill -9 and restart, SIGSTOP of the leader past the election timeout, clock rate
//! changes and steps through the nodes' fault-injection clock control, random packet loss,
//! and membership changes: a member (the leader half the time) removed, its disk wiped and
//! the host rejoining under a new Raft id, or leadership handed to another voter.
//!
//! Faults name host slots 1..=n; after a replacement a slot's Raft id differs from its number
//! (`Procs::raft_id`), so the leader a node names is mapped back to its slot.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tenure_client::Client;
use tenure_proto::raft::v1::RaftBytes;
use tokio::time::Instant;

use crate::history::{now_ns, NemesisEvent};
use crate::hosts::Hosts;
use crate::procs::Procs;
use crate::secure::Connect;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Partition,
    Kill,
    Pause,
    Clock,
    Loss,
    Member,
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
            other => {
                anyhow::bail!(
                    "unknown nemesis `{other}` (partition, kill, pause, clock, loss, member)"
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
    rng: SmallRng,
    /// The Raft id the next replacement member gets.
    next_id: u64,
    /// Set when the run is interrupted: faults are healed at once and no new one starts.
    stop: tokio::sync::watch::Receiver<bool>,
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

/// Steps and/or re-rates both clocks of a node (its fault-injection `SetClock` RPC).
pub async fn set_clock(
    connect: &Connect,
    endpoint: &str,
    step_ms: i64,
    rate_ppm: i64,
) -> anyhow::Result<()> {
    let (mut client, token) = connect.raft(endpoint).await?;
    let body =
        serde_json::to_vec(&serde_json::json!({ "step_ms": step_ms, "rate_ppm": rate_ppm }))?;
    let mut request = tonic::Request::new(RaftBytes { data: body });
    request.set_timeout(Duration::from_secs(2));
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", token.parse()?);
    }
    client.set_clock(request).await?;
    Ok(())
}

impl Nemesis {
    /// A nemesis over `targets`, drawing its schedule from `seed`; `stop` interrupts it.
    pub fn new(
        targets: Targets,
        faults: Vec<Fault>,
        clock_epsilon: f64,
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
            rng: SmallRng::seed_from_u64(seed ^ 0x006e_656d_6573_6973),
            next_id: nodes + 1,
            stop,
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
        let event = NemesisEvent {
            kind: kind.into(),
            detail,
            start_ns,
            end_ns,
        };
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
        self.wait(Duration::from_secs(2)).await;
        while !self.faults.is_empty()
            && !self.stopped()
            && Instant::now() + Duration::from_secs(4) < deadline
        {
            let fault = *self
                .faults
                .choose(&mut self.rng)
                .unwrap_or(&Fault::Partition);
            let hold = Duration::from_millis(self.rng.random_range(1_500..5_000));
            if let Err(e) = self.inject(fault, hold).await {
                tracing::warn!(fault = fault.name(), "nemesis failed: {e:#}");
            }
            let quiet = Duration::from_millis(self.rng.random_range(500..3_000));
            self.wait(quiet.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
        self.heal_all().await;
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    async fn inject(&mut self, fault: Fault, hold: Duration) -> anyhow::Result<()> {
        let nodes: Vec<u64> = (1..=self.nodes).collect();
        match fault {
            Fault::Partition => {
                let leader = self.leader_slot().await;
                let (groups, detail) = match (self.rng.random_range(0..3), leader) {
                    (0, Some(leader)) => {
                        let rest: Vec<u64> =
                            nodes.iter().copied().filter(|n| *n != leader).collect();
                        (
                            vec![vec![leader], rest],
                            format!("leader n{leader} isolated"),
                        )
                    }
                    (1, _) if self.nodes >= 5 => {
                        // A bridge: two halves that each reach one node in the middle.
                        let mut shuffled = nodes.clone();
                        rand::seq::SliceRandom::shuffle(shuffled.as_mut_slice(), &mut self.rng);
                        let (bridge, left, right) =
                            (shuffled[0], shuffled[1..3].to_vec(), shuffled[3..].to_vec());
                        for l in &left {
                            for r in &right {
                                self.hosts.one_way(*l, *r)?;
                                self.hosts.one_way(*r, *l)?;
                            }
                        }
                        let start = now_ns();
                        self.wait(hold).await;
                        self.hosts.heal()?;
                        self.record(
                            "partition",
                            format!("bridge n{bridge} between {left:?} and {right:?}"),
                            start,
                            Some(now_ns()),
                        );
                        return Ok(());
                    }
                    _ => {
                        let mut shuffled = nodes.clone();
                        rand::seq::SliceRandom::shuffle(shuffled.as_mut_slice(), &mut self.rng);
                        let cut = (self.nodes as usize) / 2;
                        let (a, b) = (shuffled[..cut].to_vec(), shuffled[cut..].to_vec());
                        let detail = format!("{a:?} | {b:?}");
                        (vec![a, b], detail)
                    }
                };
                self.hosts.partition(&groups)?;
                let start = now_ns();
                self.wait(hold).await;
                self.hosts.heal()?;
                self.record("partition", detail, start, Some(now_ns()));
            }
            Fault::Kill => {
                let target = match self.leader_slot().await {
                    Some(leader) if self.rng.random_bool(0.5) => leader,
                    _ => *nodes.choose(&mut self.rng).unwrap_or(&1),
                };
                self.procs().kill9(target)?;
                let start = now_ns();
                self.wait(hold).await;
                self.procs().restart(target)?;
                self.record(
                    "kill",
                    format!("n{target} kill -9, restarted"),
                    start,
                    Some(now_ns()),
                );
            }
            Fault::Pause => {
                let Some(target) = self.leader_slot().await else {
                    return Ok(());
                };
                self.procs().pause(target)?;
                let start = now_ns();
                // Past the election timeout (1 s), so the others elect a new leader.
                self.wait(hold.max(Duration::from_millis(1_500))).await;
                self.procs().resume(target)?;
                self.record(
                    "pause",
                    format!("leader n{target} SIGSTOP"),
                    start,
                    Some(now_ns()),
                );
            }
            Fault::Clock => {
                let leader = self.leader_slot().await;
                let target = *nodes.choose(&mut self.rng).unwrap_or(&1);
                let max_ppm = (self.clock_epsilon * 1_000_000.0) as i64;
                let rate_ppm = self.rng.random_range(-max_ppm..=max_ppm);
                // Monotonic clocks never jump on a real leader; step only a follower's clocks.
                let step_ms = if Some(target) != leader {
                    self.rng.random_range(-120_000..=3_600_000)
                } else {
                    0
                };
                let endpoint = self.endpoint(target);
                set_clock(&self.connect, &endpoint, step_ms, rate_ppm).await?;
                let start = now_ns();
                self.wait(hold).await;
                set_clock(&self.connect, &endpoint, 0, 0).await?;
                self.record(
                    "clock",
                    format!("n{target} step {step_ms} ms, rate {rate_ppm} ppm"),
                    start,
                    Some(now_ns()),
                );
            }
            Fault::Member => self.change_member().await?,
            Fault::Loss => {
                let percent = self.rng.random_range(10..40);
                self.hosts.loss(&nodes, percent)?;
                let start = now_ns();
                self.wait(hold).await;
                self.hosts.heal()?;
                self.record(
                    "loss",
                    format!("{percent}% on every node"),
                    start,
                    Some(now_ns()),
                );
            }
        }
        Ok(())
    }

    /// The host slot of the leader most nodes name.
    async fn leader_slot(&self) -> Option<u64> {
        let leader = current_leader(&self.per_node).await?;
        self.procs().slot_of(leader)
    }

    /// A client of every node for cluster administration (an admin's, with `--secure`).
    fn admin(&self) -> anyhow::Result<Client> {
        Ok(self
            .connect
            .client(self.procs().endpoints())?
            .with_timeout(Duration::from_secs(10)))
    }

    /// A third of the time hands leadership to another voter; otherwise removes a member (the
    /// leader half the time), wipes its host and adds it back under a new Raft id: learner
    /// until caught up, then voter. Each step is retried (the cluster may be electing).
    async fn change_member(&mut self) -> anyhow::Result<()> {
        let admin = self.admin()?;
        let start = now_ns();
        if self.rng.random_bool(1.0 / 3.0) {
            let moved = admin.transfer_leader(0).await?;
            self.record(
                "member",
                format!(
                    "transfer leadership {} → {}{}",
                    moved.previous_leader_id,
                    moved.leader_id,
                    if moved.transferred {
                        ""
                    } else {
                        " (did not move as asked)"
                    }
                ),
                start,
                Some(now_ns()),
            );
            return Ok(());
        }
        let slot = match self.leader_slot().await {
            Some(leader) if self.rng.random_bool(0.5) => leader,
            _ => self.rng.random_range(1..=self.nodes),
        };
        let old = self.procs().raft_id(slot);
        let new = self.next_id;
        self.next_id += 1;
        let addr = self.endpoint(slot);
        retry("remove the member", || {
            admin.change_membership(Vec::new(), vec![old])
        })
        .await?;
        self.procs().replace(slot, new)?;
        self.readmit(&admin, new, &addr).await?;
        self.record(
            "member",
            format!("n{slot}: member {old} removed, disk wiped, rejoined as {new}"),
            start,
            Some(now_ns()),
        );
        Ok(())
    }

    /// Adds `id` at `addr` as a learner and promotes it once it has caught up.
    async fn readmit(&self, admin: &Client, id: u64, addr: &str) -> anyhow::Result<()> {
        retry("add the learner", || async {
            let added = admin.add_learner(id, addr, true).await?;
            anyhow::ensure!(added.caught_up, "learner {id} has not caught up yet");
            Ok(added)
        })
        .await?;
        retry("promote the learner", || {
            admin.change_membership(vec![id], Vec::new())
        })
        .await?;
        Ok(())
    }

    /// After the run: every host slot's member is a voter again (a membership change the run
    /// cut short is finished).
    async fn readmit_all(&self) -> anyhow::Result<()> {
        let admin = self.admin()?;
        let voters: Vec<u64> = retry("read the membership", || async {
            for i in 0..self.nodes as usize {
                if let Ok(status) = admin.node_status(i).await {
                    if status.state == "Leader" {
                        return Ok(status
                            .members
                            .iter()
                            .filter(|m| m.voter)
                            .map(|m| m.id)
                            .collect());
                    }
                }
            }
            anyhow::bail!("no leader answered")
        })
        .await?;
        for slot in 1..=self.nodes {
            let id = self.procs().raft_id(slot);
            if !voters.contains(&id) {
                tracing::info!(slot, id, "re-admitting a member the run left out");
                self.readmit(&admin, id, &self.endpoint(slot)).await?;
            }
        }
        Ok(())
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

/// Runs `step` until it succeeds, for up to a minute (elections and catching up take time).
async fn retry<T, E, F, Fut>(what: &str, mut step: F) -> anyhow::Result<T>
where
    E: Into<anyhow::Error>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(e) => {
                let e = e.into();
                if Instant::now() > deadline {
                    return Err(e.context(format!("{what}: gave up after a minute")));
                }
                tracing::debug!("{what}: {e:#}; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}
