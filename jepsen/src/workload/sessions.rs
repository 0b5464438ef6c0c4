//! The `sessions` workload (SPEC §4.24): leases that live on a session, renewed as one.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{holder_name, Env, Kind, SessionRef, Tenancy, Wait};
use crate::history::Mode;

/// One session of client `process` (its `n`th): created with a holder of its own and a ttl of
/// 2–3 s, renewed from a second task ([`keep_alive`]), carrying one to three leases on the
/// `sessions` resources (some acquired with `WAIT`), each written to with its token; at times
/// one is released. Then the session is closed or, at times, left to expire. No lease is
/// asked for past `deadline`.
pub(super) async fn session_round(
    env: &Arc<Env>,
    process: u64,
    n: u64,
    rng: &mut SmallRng,
    all: &[(String, Kind)],
    deadline: Instant,
) {
    let config = &env.config;
    let holder = format!("{}.s{n}", holder_name(process));
    let ttl_ms = rng.random_range(config.session_ttl_min_ms..=config.session_ttl_max_ms);
    let Some(session) = env.create_session(process, &holder, ttl_ms).await else {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
        return;
    };
    let session = Arc::new(session);
    // At times the keeper stalls past the ttl once, as a paused process would: the session
    // expires, its leases are reclaimed, and this task learns it only from its next call.
    let stall = rng
        .random_bool(config.stall_probability)
        .then(|| Duration::from_millis(rng.random_range(0..ttl_ms)));
    let (stop, stopped) = oneshot::channel();
    let keeper = tokio::spawn(keep_alive(
        env.clone(),
        process,
        session.clone(),
        stall,
        stopped,
    ));

    let mut names: Vec<&String> = all
        .iter()
        .filter(|(_, kind)| *kind == Kind::Sessions)
        .map(|(name, _)| name)
        .collect();
    names.shuffle(rng);
    names.truncate(rng.random_range(1..=3));
    let mut held: Vec<Tenancy> = Vec::new();
    for resource in names {
        if session.ended() || Instant::now() >= deadline {
            break;
        }
        let wait = rng.random_bool(0.4).then(|| Wait {
            timeout_ms: rng.random_range(config.wait_min_ms..=config.wait_max_ms),
            give_up_after: None,
        });
        let exclusive = (Mode::Exclusive, 0);
        if let Some((token, lease_id)) = env
            .acquire(process, resource, ttl_ms, exclusive, wait, Some(&session))
            .await
        {
            let lease = Tenancy {
                resource: resource.clone(),
                holder: holder.clone(),
                lease_id,
                token,
                mode: Mode::Exclusive,
                transferable: false,
            };
            env.write(process, &lease);
            held.push(lease);
        }
        tokio::time::sleep(Duration::from_millis(ttl_ms / 4)).await;
        for lease in &held {
            env.write(process, lease);
        }
    }
    if !held.is_empty() && rng.random_bool(0.2) {
        let lease = held.swap_remove(rng.random_range(0..held.len()));
        env.release(process, &lease).await;
    }
    tokio::time::sleep(Duration::from_millis(ttl_ms / 4)).await;
    for lease in &held {
        env.write(process, lease);
    }
    if !session.ended() && rng.random_bool(0.7) {
        env.close_session(process, &session).await;
    }
    // Otherwise the session is left to expire, with whatever it carries.
    drop(stop);
    let _ = keeper.await;
}

/// Renews `session` every third of its ttl until told to stop or told the session is gone;
/// with `stall`, once, after that long, it stops renewing for 1.5 × the ttl.
async fn keep_alive(
    env: Arc<Env>,
    process: u64,
    session: Arc<SessionRef>,
    mut stall: Option<Duration>,
    mut stop: oneshot::Receiver<()>,
) {
    let every = Duration::from_millis(session.ttl_ms / 3);
    let mut elapsed = Duration::ZERO;
    while !session.ended() {
        let pause = match stall {
            Some(after) if elapsed + every > after => {
                stall = None;
                Duration::from_millis(session.ttl_ms * 3 / 2)
            }
            _ => every,
        };
        elapsed += pause;
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(pause) => {}
        }
        // Closed meanwhile: a renewal now would only be told the session is gone.
        if session.ended() {
            return;
        }
        env.renew_session(process, &session).await;
    }
}
