//! The clients' tasks: each acquires, holds, writes with its token, renews, hands over and
//! releases leases; a second task per client takes the leases others hand over.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::sessions::session_round;
use super::{calls, Env, Handoff, Kind, Tenancy, Wait};
use crate::history::{Mode, Outcome, Value};

pub(super) fn client_rng(seed: u64, process: u64, stream: u64) -> SmallRng {
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
    let mut sessions = 0;
    while Instant::now() < deadline {
        let (resource, kind) = &resources[rng.random_range(0..resources.len())];
        match kind {
            Kind::Many => {
                take_many(&env, process, &mut rng, &resources).await;
                continue;
            }
            Kind::Sessions => {
                sessions += 1;
                session_round(&env, process, sessions, &mut rng, &resources, deadline).await;
                continue;
            }
            _ => {}
        }
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
                env.acquire(process, resource, ttl_ms, (mode, units), None, None)
                    .await
            }
        };
        let Some((token, lease_id)) = acquired else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
            continue;
        };
        let lease = Tenancy {
            resource: resource.clone(),
            holder: calls::holder_name(process),
            lease_id,
            token,
            mode,
            transferable: *kind == Kind::Transfer,
        };
        hold(&env, process, &mut rng, lease, ttl_ms, false).await;
    }
}

/// Two or three `many` resources in a random order with one waiting `AcquireMany` (sometimes
/// given up on); granted, each is written to with the one token, held a quarter ttl (or, at
/// times, past the ttl), written again, and all are released (or left to expire).
async fn take_many(env: &Arc<Env>, process: u64, rng: &mut SmallRng, all: &[(String, Kind)]) {
    let config = &env.config;
    let mut names: Vec<String> = all
        .iter()
        .filter(|(_, kind)| *kind == Kind::Many)
        .map(|(name, _)| name.clone())
        .collect();
    names.shuffle(rng);
    names.truncate(rng.random_range(2..=3).min(names.len()));
    let ttl_ms = rng.random_range(config.ttl_min_ms..=config.ttl_max_ms);
    let timeout_ms = rng.random_range(config.wait_min_ms..=config.wait_max_ms);
    let wait = Wait {
        timeout_ms,
        give_up_after: rng
            .random_bool(config.give_up_probability)
            .then(|| Duration::from_millis(rng.random_range(timeout_ms / 4..=timeout_ms))),
    };
    let Some(leases) = env.acquire_many(process, &names, ttl_ms, wait).await else {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
        return;
    };
    for lease in &leases {
        env.write(process, lease);
    }
    let pause = if rng.random_bool(config.stall_probability) {
        ttl_ms * 3 / 2
    } else {
        ttl_ms / 4
    };
    tokio::time::sleep(Duration::from_millis(pause)).await;
    for lease in &leases {
        env.write(process, lease);
    }
    if rng.random_bool(0.8) {
        for lease in &leases {
            env.release(process, lease).await;
        }
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
    let acquire = env.acquire(
        process,
        resource,
        ttl_ms,
        (Mode::Exclusive, 0),
        Some(wait),
        None,
    );
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
                    holder: calls::holder_name(process),
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
        write(env, process, rng, &lease, ttl_ms).await;
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
        write(env, process, rng, &lease, ttl_ms).await;
        if rng.random_bool(0.3) {
            env.validate(process, &lease.resource, lease.token).await;
        }
        if lease.transferable
            && rng.random_bool(config.transfer_probability)
            && hand_over(env, process, rng, &lease, ttl_ms).await
        {
            return;
        }
        match env.renew(process, &lease, ttl_ms).await {
            Outcome::Ok { .. } => {}
            // A renew of rules the cluster has not reached did nothing: the lease is as it
            // was, and released as usual.
            Outcome::Fail { reason }
                if tenure_client::Reason::RulesNotReached == reason.as_str() =>
            {
                break;
            }
            _ => return,
        }
    }
    if !rng.random_bool(config.abandon_probability) {
        env.release(process, &lease).await;
    }
}

/// A write with `lease`'s token: to the PostgreSQL register for a `fenced` resource, where
/// it stalls at times for 1.5 × ttl inside its transaction (after the guard's check, holding
/// the register's row), as a process paused mid-write would; to the simulated store otherwise.
async fn write(env: &Env, process: u64, rng: &mut SmallRng, lease: &Tenancy, ttl_ms: u64) {
    if env.register.is_some() && Kind::of(&lease.resource) == Some(Kind::Fenced) {
        let stall = rng
            .random_bool(env.config.stall_probability)
            .then(|| Duration::from_millis(ttl_ms * 3 / 2));
        env.register_write(process, lease, stall).await;
    } else {
        env.write(process, lease);
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
                holder: calls::holder_name(to),
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
