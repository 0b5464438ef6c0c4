//! The clients: concurrent holders contending for a small pool of resources of three kinds,
//! each writing to a simulated downstream fenced store with its token:
//!
//! * `exclusive`: ad-hoc resources `r0…`, exclusive leases (the default policy);
//! * `shared`: registered `s0…` with `shared_modes` READ+WRITE and a pool of `total_units`:
//!   READ or WRITE leases of 1–3 units, sometimes an exclusive one;
//! * `transfer`: registered, transferable, exclusive-only `x0…`: holders hand their lease to
//!   another client, which learns it from the transfer's reply (or, when the transfer's outcome
//!   is unknown, from `ListLeases`) and carries on with the new token, while the old holder's
//!   token is dead (its writes are refused once the new holder wrote, its renew fails);
//! * `waiting`: registered, exclusive-only `w0…` that clients acquire with `on_conflict = WAIT`
//!   and a `wait_timeout` of 1–5 s, so that they queue behind each other and are admitted by the
//!   release or reclaim that frees the resource. Some cancel their own wait with `CancelWait`
//!   from another task; some give up before the wait ends (their outcome is unknown); some try a
//!   plain acquire, which must not barge past the queue.
//!
//! Some holders stall past their ttl before writing, as a paused process would. Every call is
//! recorded as invoke → ok / fail / quota_exceeded / unknown. Watchers (`watchers`) keep
//! `Watch` streams open meanwhile and record what they are sent.

mod calls;
mod watchers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub use calls::{holder_name, Env, FencedStore, Recorder, Tenancy, Wait};
pub use watchers::{read_events, watch_loop};

use crate::history::{Mode, Outcome, ResourcePolicy, Value, WatchScope};

/// The kinds of resources a run uses (`--workload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Exclusive,
    Shared,
    Transfer,
    Waiting,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Exclusive, Kind::Shared, Kind::Transfer, Kind::Waiting];

    pub fn parse(name: &str) -> anyhow::Result<Kind> {
        Ok(match name.trim() {
            "exclusive" => Kind::Exclusive,
            "shared" => Kind::Shared,
            "transfer" => Kind::Transfer,
            "waiting" => Kind::Waiting,
            other => {
                anyhow::bail!("unknown workload `{other}` (exclusive, shared, transfer, waiting)")
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Exclusive => "exclusive",
            Kind::Shared => "shared",
            Kind::Transfer => "transfer",
            Kind::Waiting => "waiting",
        }
    }

    /// The first letter of the kind's resource names (`r0`, `s0`, `x0`, `w0`).
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Exclusive => "r",
            Kind::Shared => "s",
            Kind::Transfer => "x",
            Kind::Waiting => "w",
        }
    }
}

#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub clients: u64,
    /// Ad-hoc exclusive resources (kind `exclusive`).
    pub resources: u64,
    pub kinds: Vec<Kind>,
    /// Registered shared resources (kind `shared`).
    pub shared_resources: u64,
    /// Registered transferable resources (kind `transfer`).
    pub transfer_resources: u64,
    /// Registered resources acquired with `WAIT` (kind `waiting`).
    pub waiting_resources: u64,
    /// The range of a `WAIT` acquire's `wait_timeout`.
    pub wait_min_ms: u64,
    pub wait_max_ms: u64,
    /// Chance that a client cancels its wait from another task before the wait ends.
    pub cancel_probability: f64,
    /// Chance that a client gives up on its wait before the wait ends (outcome unknown).
    pub give_up_probability: f64,
    /// Chance that a client on a waiting resource tries a plain (`FAIL`) acquire instead.
    pub barge_probability: f64,
    /// Tasks that keep `Watch` streams open during the run (see [`WorkloadConfig::watch_scopes`]).
    pub watchers: u64,
    /// The shared resources' pool.
    pub total_units: u64,
    /// The registered resources' renewal grace.
    pub renewal_grace_ms: u64,
    pub ttl_min_ms: u64,
    pub ttl_max_ms: u64,
    /// Chance that a holder stalls for 1.5 × ttl before its next write.
    pub stall_probability: f64,
    /// Chance, per round, that a holder of a transferable lease hands it over.
    pub transfer_probability: f64,
    /// Deadline of each call, retries included: past it the outcome is unknown.
    pub call_timeout: Duration,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            clients: 12,
            resources: 8,
            kinds: Kind::ALL.to_vec(),
            shared_resources: 2,
            transfer_resources: 2,
            waiting_resources: 2,
            wait_min_ms: 1_000,
            wait_max_ms: 5_000,
            cancel_probability: 0.15,
            give_up_probability: 0.1,
            barge_probability: 0.2,
            watchers: 3,
            total_units: 4,
            renewal_grace_ms: 500,
            ttl_min_ms: 1_000,
            ttl_max_ms: 3_000,
            stall_probability: 0.1,
            transfer_probability: 0.4,
            call_timeout: Duration::from_secs(2),
        }
    }
}

impl WorkloadConfig {
    /// Every resource the clients use, with its kind, in a fixed order.
    pub fn all_resources(&self) -> Vec<(String, Kind)> {
        let mut out = Vec::new();
        for kind in Kind::ALL.into_iter().filter(|k| self.kinds.contains(k)) {
            let n = match kind {
                Kind::Exclusive => self.resources,
                Kind::Shared => self.shared_resources,
                Kind::Transfer => self.transfer_resources,
                Kind::Waiting => self.waiting_resources,
            };
            out.extend((0..n).map(|i| (format!("{}{i}", kind.prefix()), kind)));
        }
        out
    }

    /// What each watcher watches, in turn: every resource (prefix ""), the resources of one
    /// kind (by prefix; the waiting ones when they run), one resource of that kind.
    pub fn watch_scopes(&self) -> Vec<WatchScope> {
        let resources = self.all_resources();
        let focus = resources
            .iter()
            .find(|(_, kind)| *kind == Kind::Waiting)
            .or(resources.first());
        (0..self.watchers)
            .map(|i| match (i % 3, focus) {
                (1, Some((_, kind))) => WatchScope::Prefix(kind.prefix().to_owned()),
                (2, Some((name, _))) => WatchScope::Resource(name.clone()),
                _ => WatchScope::Prefix(String::new()),
            })
            .collect()
    }

    /// The quotas a `--secure` run sets for its clients' principal, so that a normal run
    /// reaches them now and then. Each client holds the lease it acquired and, at times, one
    /// handed to it; a lease left to expire stays live (and counted) until it is reclaimed. So
    /// the clients together hold about as many leases as there are clients, at the limit about
    /// a sixth of the time (measured: a 30 s run with every nemesis refuses 10–15 acquires of
    /// some 450). Waits queue on the `waiting` resources only: three at once is reached
    /// about a quarter of the time.
    pub fn quota_limits(&self) -> BTreeMap<String, u64> {
        let mut limits = BTreeMap::new();
        limits.insert("leases".to_owned(), self.clients.max(2));
        if self.kinds.contains(&Kind::Waiting) && self.waiting_resources > 0 {
            limits.insert("waiters".to_owned(), 3);
        }
        limits
    }

    /// The policy the run registers for a resource of this kind (None: ad hoc).
    pub fn policy(&self, kind: Kind) -> Option<ResourcePolicy> {
        let registered = ResourcePolicy {
            renewal_grace_ms: self.renewal_grace_ms,
            default_ttl_ms: self.ttl_max_ms,
            max_ttl_ms: 10 * self.ttl_max_ms,
            ..ResourcePolicy::default()
        };
        match kind {
            Kind::Exclusive => None,
            Kind::Waiting => Some(registered),
            Kind::Shared => Some(ResourcePolicy {
                shared_modes: vec![Mode::Read, Mode::Write],
                total_units: self.total_units,
                ..registered
            }),
            Kind::Transfer => Some(ResourcePolicy {
                transferable: true,
                ..registered
            }),
        }
    }
}

/// A lease handed to a client by a transfer.
#[derive(Clone, Debug)]
pub enum Handoff {
    /// The transfer's reply named the new lease.
    Known(Tenancy),
    /// The transfer's outcome is unknown: look for the lease with `ListLeases`.
    Maybe { resource: String },
}

fn client_rng(seed: u64, process: u64, stream: u64) -> SmallRng {
    SmallRng::seed_from_u64(
        seed.wrapping_mul(1_000_003)
            .wrapping_add(process)
            .wrapping_add(stream << 32),
    )
}

/// One client until `deadline`: acquire a random resource (READ or WRITE with 1–3 units on a
/// shared one, sometimes exclusive); if granted, hold it (see [`hold`]); otherwise back off.
/// Reads are mixed in.
pub async fn client_loop(env: Arc<Env>, process: u64, seed: u64, deadline: Instant) {
    let mut rng = client_rng(seed, process, 0);
    let config = env.config.clone();
    let nodes = env.per_node.len() as u64;
    let resources = config.all_resources();
    if resources.is_empty() {
        return;
    }
    while Instant::now() < deadline {
        let (resource, kind) = &resources[rng.random_range(0..resources.len())];
        if rng.random_bool(0.15) {
            env.read(process, resource, rng.random_range(1..=nodes))
                .await;
            continue;
        }
        let ttl_ms = rng.random_range(config.ttl_min_ms..=config.ttl_max_ms);
        let (mode, units) = match kind {
            Kind::Shared => match rng.random_range(0..10) {
                0..=1 => (Mode::Exclusive, 0),
                2..=5 => (Mode::Read, rng.random_range(1..=3)),
                _ => (Mode::Write, rng.random_range(1..=3)),
            },
            _ => (Mode::Exclusive, 0),
        };
        let acquired = match kind {
            Kind::Waiting if !rng.random_bool(config.barge_probability) => {
                wait_turn(&env, process, &mut rng, resource, ttl_ms).await
            }
            _ => {
                env.acquire(process, resource, ttl_ms, (mode, units), None)
                    .await
            }
        };
        let Some((token, lease_id)) = acquired else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
            continue;
        };
        let lease = Tenancy {
            resource: resource.clone(),
            lease_id,
            token,
            mode,
            transferable: *kind == Kind::Transfer,
        };
        hold(&env, process, &mut rng, lease, ttl_ms, false).await;
    }
}

/// An exclusive `WAIT` acquire of `resource`, with a wait of 1–5 s. Sometimes another task
/// cancels the wait meanwhile, sometimes the client gives up before the wait can end.
async fn wait_turn(
    env: &Arc<Env>,
    process: u64,
    rng: &mut SmallRng,
    resource: &str,
    ttl_ms: u64,
) -> Option<(u64, String)> {
    let config = &env.config;
    let timeout_ms = rng.random_range(config.wait_min_ms..=config.wait_max_ms);
    let give_up_after = rng
        .random_bool(config.give_up_probability)
        .then(|| Duration::from_millis(rng.random_range(timeout_ms / 4..=timeout_ms)));
    let cancel_after = rng
        .random_bool(config.cancel_probability)
        .then(|| Duration::from_millis(rng.random_range(0..=timeout_ms)));
    let wait = Wait {
        timeout_ms,
        give_up_after,
    };
    let acquire = env.acquire(process, resource, ttl_ms, (Mode::Exclusive, 0), Some(wait));
    let Some(cancel_after) = cancel_after else {
        return acquire.await;
    };
    tokio::pin!(acquire);
    tokio::select! {
        acquired = &mut acquire => acquired,
        _ = tokio::time::sleep(cancel_after) => {
            let canceller = tokio::spawn({
                let (env, resource) = (env.clone(), resource.to_owned());
                async move { env.cancel_wait(process, &resource).await }
            });
            let acquired = acquire.await;
            // The cancel must not outlive this wait: it would end the holder's next one.
            let _ = canceller.await;
            acquired
        }
    }
}

/// One client's second task until `deadline`: take the leases others hand over and hold them.
pub async fn receiver_loop(
    env: Arc<Env>,
    process: u64,
    seed: u64,
    deadline: Instant,
    mut inbox: mpsc::UnboundedReceiver<Handoff>,
) {
    let mut rng = client_rng(seed, process, 1);
    let config = env.config.clone();
    loop {
        let handoff = tokio::select! {
            handoff = inbox.recv() => handoff,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        let Some(handoff) = handoff else { break };
        let lease = match handoff {
            Handoff::Known(lease) => lease,
            Handoff::Maybe { resource } => match env.list_leases(process, &resource).await {
                Some(found) => Tenancy {
                    resource,
                    mode: calls::held(&found).mode,
                    lease_id: found.lease_id,
                    token: found.fencing_token,
                    transferable: true,
                },
                None => continue,
            },
        };
        let ttl_ms = rng.random_range(config.ttl_min_ms..=config.ttl_max_ms);
        hold(&env, process, &mut rng, lease, ttl_ms, true).await;
    }
}

/// Hold a lease for a few rounds of write-to-the-fenced-store → renew (sometimes stalling past
/// the ttl first), handing a transferable one over at times, then release it or let it expire.
/// A lease just handed over (`adopted`) is written with at once: its expiry is the old one's.
async fn hold(
    env: &Env,
    process: u64,
    rng: &mut SmallRng,
    lease: Tenancy,
    ttl_ms: u64,
    adopted: bool,
) {
    let config = &env.config;
    let rounds = rng.random_range(0..=3);
    if rounds == 0 {
        env.write(process, &lease);
    }
    for round in 0..rounds {
        let pause = if adopted && round == 0 {
            0
        } else if rng.random_bool(config.stall_probability) {
            ttl_ms * 3 / 2
        } else {
            ttl_ms / 4
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        env.write(process, &lease);
        if rng.random_bool(0.3) {
            env.validate(process, &lease.resource, lease.token).await;
        }
        if lease.transferable
            && rng.random_bool(config.transfer_probability)
            && hand_over(env, process, rng, &lease, ttl_ms).await
        {
            return;
        }
        if !matches!(env.renew(process, &lease, ttl_ms).await, Outcome::Ok { .. }) {
            return;
        }
    }
    if rng.random_bool(0.8) {
        env.release(process, &lease).await;
    }
}

/// Transfer `lease` to another client; true when it is (or may be) no longer ours. The old
/// holder then sometimes tries its dead token: a write after the new holder's (refused by the
/// store) and a renew (refused by the cluster).
async fn hand_over(
    env: &Env,
    process: u64,
    rng: &mut SmallRng,
    lease: &Tenancy,
    ttl_ms: u64,
) -> bool {
    let clients = env.config.clients;
    if clients < 2 {
        return false;
    }
    let to = loop {
        let to = rng.random_range(1..=clients);
        if to != process {
            break to;
        }
    };
    let inbox = &env.inboxes[(to - 1) as usize];
    match env.transfer(process, lease, to).await {
        Outcome::Ok {
            value: Value::Transferred {
                token, lease_id, ..
            },
        } => {
            let _ = inbox.send(Handoff::Known(Tenancy {
                lease_id,
                token,
                ..lease.clone()
            }));
            if rng.random_bool(0.5) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..300))).await;
                env.write(process, lease);
            }
            if rng.random_bool(0.3) {
                env.renew(process, lease, ttl_ms).await;
            }
            true
        }
        Outcome::Unknown { .. } => {
            let _ = inbox.send(Handoff::Maybe {
                resource: lease.resource.clone(),
            });
            true
        }
        // Refused (e.g. the other client holds a lease here already): keep it.
        _ => false,
    }
}
