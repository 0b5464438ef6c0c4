//! Sessions at scale (SPEC §4.24), Tenure only: a fresh cluster loaded with `sessions`
//! sessions each holding `per_session` leases, every session renewed every ttl/3 for `hold`.
//! Measured: the leader's CPU over the hold (the cost of the keepalives, with nothing else
//! running), RSS per node, and, for a sample of sessions then left to expire, the time from
//! each one's expiry to the last of its leases reclaimed, as a watcher sees it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tenure_client::{pb, prost_duration, Client};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::BenchOptions;

/// Tasks creating sessions and acquiring their leases.
const LOADERS: usize = 64;
/// Tasks renewing sessions, each its share in turn.
const KEEPERS: usize = 32;
/// Sessions left to expire at the end, each timed from its expiry to its last reclaim.
const EXPIRING: usize = 100;

#[derive(Clone, Debug)]
pub struct SessionsOptions {
    pub sessions: usize,
    pub per_session: usize,
    pub ttl: Duration,
    pub hold: Duration,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct SessionsPoint {
    pub sessions: usize,
    pub leases: usize,
    pub ttl_ms: u64,
    pub load_seconds: f64,
    pub hold_seconds: f64,
    pub renewals: u64,
    pub renewals_per_s: f64,
    pub renewal_errors: u64,
    /// The leader's user + system CPU over the hold, in % of one core.
    pub leader_cpu_percent: f64,
    /// All three nodes' CPU over the hold, in % of one core.
    pub cluster_cpu_percent: f64,
    pub rss_bytes: Vec<u64>,
    /// Sessions left to expire, and from each one's expiry (its last renewal's answer + ttl)
    /// to the watcher seeing the last of its leases reclaimed.
    pub expired: usize,
    pub reclaim_p50_ms: f64,
    pub reclaim_p99_ms: f64,
    pub reclaim_max_ms: f64,
}

/// One session of the load: its id, when its last renewal was answered, and whether it is
/// left to expire (no longer renewed).
struct Kept {
    id: String,
    answered: Instant,
    expiring: bool,
}

pub async fn run(
    options: &BenchOptions,
    sessions: &SessionsOptions,
    data: &Path,
) -> Result<SessionsPoint> {
    let cluster = super::scale::started_tenure(options, data).await?;
    let kept: Arc<Mutex<Vec<Kept>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let renewals = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Keepers run from the first session on (the load takes longer than a ttl), each on a
    // KeepAlive stream of its own to the leader, as a client library holding many sessions
    // would renew them.
    let leader = super::tenure::leader(&cluster.endpoints).await?;
    let counters = Counters {
        kept: kept.clone(),
        stop: stop.clone(),
        renewals: renewals.clone(),
        errors: errors.clone(),
    };
    let mut keepers = JoinSet::new();
    for k in 0..KEEPERS {
        let addr = cluster.endpoints[leader as usize - 1].clone();
        keepers.spawn(keeper(addr, k, counters.clone(), sessions.ttl / 3));
    }
    let load_seconds = load(&cluster.endpoints, sessions, &kept).await?;
    eprintln!(
        "bench: sessions: {} sessions with {} leases each loaded in {load_seconds:.1} s",
        sessions.sessions, sessions.per_session
    );

    // The hold: only keepalives run.
    let (renewed_before, cpu_before, leader_cpu_before) = (
        renewals.load(std::sync::atomic::Ordering::Relaxed),
        cluster.cpu_time(),
        cluster.procs.cpu_time(leader).unwrap_or_default(),
    );
    let held = Instant::now();
    tokio::time::sleep(sessions.hold).await;
    let hold_seconds = held.elapsed().as_secs_f64();
    let renewed = renewals.load(std::sync::atomic::Ordering::Relaxed) - renewed_before;
    let cluster_cpu = cluster.cpu_time().saturating_sub(cpu_before);
    let leader_cpu = cluster
        .procs
        .cpu_time(leader)
        .unwrap_or_default()
        .saturating_sub(leader_cpu_before);
    if let Some(ended) = keepers.try_join_next() {
        bail!("a keeper stopped during the hold: {:?}", ended?);
    }
    if super::tenure::leader(&cluster.endpoints).await? != leader {
        bail!("the leader changed during the hold: its CPU is not the keepalives'");
    }
    let rss_bytes = cluster.rss_bytes();

    // The expiry: the last EXPIRING sessions are no longer renewed.
    let mut events = Client::new(&cluster.endpoints)?
        .watch(pb::WatchRequest {
            prefix: "sess/".into(),
            live_only: true,
            events: vec![pb::EventType::Reclaimed as i32],
            ..Default::default()
        })
        .await?;
    let expiring: HashMap<String, usize> = {
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        let from = kept.len().saturating_sub(EXPIRING);
        (from..kept.len())
            .map(|i| {
                kept[i].expiring = true;
                (kept[i].id.clone(), i)
            })
            .collect()
    };
    let mut reclaimed: BTreeMap<String, (usize, Instant)> = BTreeMap::new();
    let deadline = Instant::now() + sessions.ttl * 2 + Duration::from_secs(30);
    while reclaimed
        .values()
        .filter(|(n, _)| *n == sessions.per_session)
        .count()
        < expiring.len()
    {
        let message = tokio::time::timeout_at(deadline, events.message())
            .await
            .context("not every expired session was reclaimed in time")??
            .context("the watch ended")?;
        let now = Instant::now();
        for event in message.events {
            if expiring.contains_key(&event.session_id) {
                let seen = reclaimed.entry(event.session_id).or_insert((0, now));
                seen.0 += 1;
                seen.1 = now;
            }
        }
    }
    stop.notify_waiters();
    keepers.abort_all();
    // A renewal in flight when its session was marked may have been answered after: the last
    // answer is read now.
    let answered: HashMap<&String, Instant> = {
        let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        expiring
            .iter()
            .map(|(id, &i)| (id, kept[i].answered))
            .collect()
    };
    let mut millis: Vec<f64> = reclaimed
        .iter()
        .map(|(id, (_, last))| {
            let expired_at = answered[id] + sessions.ttl;
            last.saturating_duration_since(expired_at).as_secs_f64() * 1000.0
        })
        .collect();
    millis.sort_by(f64::total_cmp);
    let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
    Ok(SessionsPoint {
        sessions: sessions.sessions,
        leases: sessions.sessions * sessions.per_session,
        ttl_ms: sessions.ttl.as_millis() as u64,
        load_seconds,
        hold_seconds,
        renewals: renewed,
        renewals_per_s: renewed as f64 / hold_seconds,
        renewal_errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        leader_cpu_percent: leader_cpu.as_secs_f64() * 100.0 / hold_seconds,
        cluster_cpu_percent: cluster_cpu.as_secs_f64() * 100.0 / hold_seconds,
        rss_bytes,
        expired: millis.len(),
        reclaim_p50_ms: at(0.5),
        reclaim_p99_ms: at(0.99),
        reclaim_max_ms: at(1.0),
    })
}

/// What the keepers share with the run.
#[derive(Clone)]
struct Counters {
    kept: Arc<Mutex<Vec<Kept>>>,
    stop: Arc<tokio::sync::Notify>,
    renewals: Arc<std::sync::atomic::AtomicU64>,
    errors: Arc<std::sync::atomic::AtomicU64>,
}

/// Renews sessions `k`, `k + KEEPERS`, … every `every` on one KeepAlive stream to `addr`,
/// one message at a time, until stopped (or the stream breaks: then its sessions expire and
/// the run fails).
async fn keeper(addr: String, k: usize, counters: Counters, every: Duration) -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let (requests, outgoing) = tokio::sync::mpsc::channel::<pb::KeepAliveRequest>(16);
    let outgoing = futures::stream::unfold(outgoing, |mut rx| async move {
        rx.recv().await.map(|message| (message, rx))
    });
    let mut answers =
        tenure_proto::v1::leases_client::LeasesClient::connect(format!("http://{addr}"))
            .await?
            .keep_alive(outgoing)
            .await?
            .into_inner();
    let mut seq = 0;
    loop {
        let round = Instant::now();
        let count = counters
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        for i in (k..count).step_by(KEEPERS) {
            let id = {
                let kept = counters.kept.lock().unwrap_or_else(|e| e.into_inner());
                match kept.get(i) {
                    Some(one) if !one.expiring => one.id.clone(),
                    _ => continue,
                }
            };
            seq += 1;
            requests
                .send(pb::KeepAliveRequest {
                    seq,
                    renew: None,
                    session_id: id,
                })
                .await?;
            // A stalled stream fails the keeper (and the run), rather than let its sessions
            // expire unnoticed.
            let answer = tokio::time::timeout(every, answers.message())
                .await
                .context("no KeepAlive answer within ttl/3")??
                .context("the KeepAlive stream ended")?;
            if answer.session.is_some() {
                counters.renewals.fetch_add(1, Relaxed);
                let mut kept = counters.kept.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(one) = kept.get_mut(i) {
                    one.answered = Instant::now();
                }
            } else {
                counters.errors.fetch_add(1, Relaxed);
            }
        }
        tokio::select! {
            () = counters.stop.notified() => return Ok(()),
            () = tokio::time::sleep_until(round + every) => {}
        }
    }
}

/// Creates the sessions and acquires `per_session` leases on each (`sess/<s>/<k>`) from 64
/// clients; each session is handed to the keepers as soon as it exists.
async fn load(
    endpoints: &[String],
    sessions: &SessionsOptions,
    kept: &Arc<Mutex<Vec<Kept>>>,
) -> Result<f64> {
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..LOADERS {
        let client = Client::new(super::rotated(endpoints, i))?;
        let kept = kept.clone();
        let (count, per_session, ttl) = (sessions.sessions, sessions.per_session, sessions.ttl);
        tasks.spawn(async move {
            for s in (i..count).step_by(LOADERS) {
                let holder = format!("owner-{s}");
                let session = client
                    .create_session(pb::CreateSessionRequest {
                        holder: holder.clone(),
                        ttl: Some(prost_duration(ttl)),
                        ..Default::default()
                    })
                    .await?
                    .session
                    .context("created without a session")?;
                kept.lock().unwrap_or_else(|e| e.into_inner()).push(Kept {
                    id: session.session_id.clone(),
                    answered: Instant::now(),
                    expiring: false,
                });
                for k in 0..per_session {
                    let response = client
                        .acquire(pb::AcquireRequest {
                            resource: format!("sess/{s}/{k}"),
                            holder: holder.clone(),
                            session_id: session.session_id.clone(),
                            ..Default::default()
                        })
                        .await?;
                    if !response.granted {
                        bail!("sess/{s}/{k} not granted: {}", response.reason);
                    }
                }
            }
            anyhow::Ok(())
        });
    }
    let mut last_report = Instant::now();
    while let Some(done) = tasks.join_next().await {
        done??;
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            let n = kept.lock().unwrap_or_else(|e| e.into_inner()).len();
            eprintln!("bench: sessions: {n} of {} created", sessions.sessions);
        }
    }
    Ok(started.elapsed().as_secs_f64())
}
