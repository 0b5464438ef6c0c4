//! The noisy neighbour: attacks by one principal (`noisy`) that holds a valid client token and
//! the default quotas (and four all-resource watches per node), each trying to grow what every
//! node keeps for it, or to take the leader's time from everyone else:
//!
//! - `refused-flood`: it holds a resource with 16 KiB of metadata and sends acquires of it,
//!   each with 16 KiB of metadata and a fresh request id, that are all refused (every one
//!   an exactly-once record on every node);
//! - `quota-flood`: its `metadata_bytes` quota set to 1 MiB for the phase (so that filling it
//!   is not what is measured), it fills it with leases of 16 KiB each, then sends acquires of
//!   fresh names with 16 KiB of metadata, which the quota refuses (the leader answers them
//!   without proposing them);
//! - `ad-hoc`: acquires on fresh names, as fast as it can (leases, ad-hoc resources, their
//!   histories; each lease lives 20 s, so it also makes mass expiries);
//! - `waiters`: holds a resource and queues 10,000 waiting acquires on it;
//! - `watch-all`: Watch streams over every resource from revision 0 that it never reads,
//!   opened again whenever a node cuts them off;
//! - `list-flood`: holds 1,000 leases and lists them, stale and linearizable, page after
//!   page, from 16 tasks at once.
//!
//! Each reports what it did and what the nodes answered, counted by reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_client::{pb, prost_duration, release_request, Client};
use tokio::sync::watch;

use crate::bench::tenure::acquire_request;
use tokio::task::JoinSet;

/// The quota attacks, in the order a run makes them.
pub const ATTACKS: [&str; 6] = [
    "refused-flood",
    "quota-flood",
    "ad-hoc",
    "waiters",
    "watch-all",
    "list-flood",
];

/// The noisy principal's name in the token file.
pub const PRINCIPAL: &str = "noisy";
/// Its all-resource watches per node (the default is none).
pub const ALL_RESOURCE_WATCHES: u64 = 4;
/// Calls each flood keeps going at once.
const FLOOD_TASKS: usize = 16;
/// Waiting acquires the `waiters` attack asks for.
const WAITERS: usize = 10_000;
/// Leases the `list-flood` attack holds and lists.
const LISTED: usize = 1_000;
/// What the policy allows per lease by default: 16 KiB of keys and values, less the
/// 64 bytes an entry costs.
const BLOB: usize = 16 * 1024 - 64 - "blob".len();

/// What the nodes answered, by outcome.
#[derive(Default)]
struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    fn add(&self, outcome: impl Into<String>) {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry(outcome.into()).or_default() += 1;
    }

    fn acquire(&self, answer: &Result<pb::AcquireResponse, tenure_client::Error>) {
        match answer {
            Ok(response) if response.granted => self.add("granted"),
            Ok(response) => self.add(format!("refused {}", response.reason)),
            Err(e) => self.add(format!("error {}", e.reason_str())),
        }
    }

    fn describe(&self) -> String {
        let counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if counts.is_empty() {
            return "no answers".into();
        }
        counts
            .iter()
            .map(|(outcome, n)| format!("{n} {outcome}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `n` clients of the noisy principal, client `i` trying node `i % 3` first.
fn clients(endpoints: &[String], token: &str, n: usize) -> anyhow::Result<Vec<Client>> {
    (0..n)
        .map(|i| {
            let mut order = endpoints.to_vec();
            order.rotate_left(i % endpoints.len());
            Ok(Client::new(&order)?.with_token(token)?)
        })
        .collect()
}

/// A lease the attack holds for the length of the phase.
async fn hold(client: &Client, request: pb::AcquireRequest) -> anyhow::Result<pb::Lease> {
    let resource = request.resource.clone();
    let response = client.acquire(request).await?;
    match response.lease {
        Some(lease) if response.granted => Ok(lease),
        _ => anyhow::bail!("could not hold {resource}: {}", response.reason),
    }
}

/// `stop` as a channel tasks can await (polled every 100 ms).
fn stopped(stop: Arc<AtomicBool>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = tx.send(true);
    });
    rx
}

/// Runs `attack` (one of [`ATTACKS`]) as the principal of `token` until `stop`; what it did.
pub async fn run(
    attack: &str,
    endpoints: Vec<String>,
    (token, admin): (String, String),
    stop: Arc<AtomicBool>,
) -> String {
    let result = match attack {
        "refused-flood" => refused_flood(&endpoints, &token, stop).await,
        "quota-flood" => quota_flood(&endpoints, (&token, &admin), stop).await,
        "ad-hoc" => ad_hoc(&endpoints, &token, stop).await,
        "waiters" => waiters(&endpoints, &token, stop).await,
        "watch-all" => watch_all(&endpoints, &token, stop).await,
        "list-flood" => list_flood(&endpoints, &token, stop).await,
        other => Err(anyhow::anyhow!("unknown quota attack `{other}`")),
    };
    result.unwrap_or_else(|e| format!("the attack failed: {e:#}"))
}

/// Runs `op(client, task, n)` from [`FLOOD_TASKS`] tasks, each in a closed loop, until `stop`.
async fn flood<F, Fut>(clients: &[Client], stop: &AtomicBool, op: F)
where
    F: Fn(Client, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let stop_rx = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    for task in 0..FLOOD_TASKS {
        let (client, op, done) = (
            clients[task % clients.len()].clone(),
            op.clone(),
            stop_rx.clone(),
        );
        tasks.spawn(async move {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                op(client.clone(), task, n).await;
            }
        });
    }
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_rx.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
}

async fn refused_flood(
    endpoints: &[String],
    token: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    let clients = clients(endpoints, token, 3)?;
    let metadata = HashMap::from([("blob".to_string(), "x".repeat(BLOB))]);
    let resource = "noisy/held";
    let mut request = acquire_request(resource, "noisy", Duration::from_secs(600));
    request.metadata = metadata.clone();
    let lease = hold(&clients[0], request.clone()).await?;
    let tally = Arc::new(Tally::default());
    let counts = tally.clone();
    flood(&clients, &stop, move |client, _, _| {
        let (tally, mut request) = (counts.clone(), request.clone());
        request.holder = "other".into();
        async move { tally.acquire(&client.acquire(request).await) }
    })
    .await;
    let _ = clients[0].release(release_request(&lease)).await;
    Ok(format!(
        "acquires of a held resource with {} KiB of metadata and fresh request ids: {}",
        BLOB / 1024,
        tally.describe()
    ))
}

/// The noisy principal's `metadata_bytes` quota during `quota-flood`.
const FLOOD_METADATA_QUOTA: u64 = 1 << 20;

async fn quota_flood(
    endpoints: &[String],
    (token, admin): (&str, &str),
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    let clients = clients(endpoints, token, 3)?;
    let admin = Client::new(endpoints)?.with_token(admin)?;
    let set_quota = |limit: u64, reset: bool| pb::SetQuotaRequest {
        principal: PRINCIPAL.into(),
        changes: vec![pb::QuotaChange {
            quota: "metadata_bytes".into(),
            limit,
            reset,
        }],
        request_id: String::new(),
    };
    admin
        .set_quota(set_quota(FLOOD_METADATA_QUOTA, false))
        .await?;
    let metadata = HashMap::from([("blob".to_string(), "x".repeat(BLOB))]);
    // Its metadata quota filled: 30 s leases of 16 KiB each until the quota refuses one (or
    // the phase ends).
    let filled = Arc::new(AtomicBool::new(false));
    {
        let (filled, stop) = (filled.clone(), stop.clone());
        tokio::spawn(async move {
            while !filled.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            filled.store(true, Ordering::Relaxed);
        });
    }
    let fill = Arc::new(Tally::default());
    {
        let (fill, marker, metadata) = (fill.clone(), filled.clone(), metadata.clone());
        flood(&clients, &filled, move |client, task, n| {
            let (fill, full) = (fill.clone(), marker.clone());
            let mut request = acquire_request(
                &format!("noisy/q/{task}/{n}"),
                "noisy",
                Duration::from_secs(30),
            );
            request.metadata = metadata.clone();
            async move {
                let answer = client.acquire(request).await;
                if matches!(&answer, Err(e) if e.reason_str() == "resource_exhausted") {
                    full.store(true, Ordering::Relaxed);
                }
                fill.acquire(&answer);
            }
        })
        .await;
    }
    let tally = Arc::new(Tally::default());
    let counts = tally.clone();
    flood(&clients, &stop, move |client, task, n| {
        let tally = counts.clone();
        let mut request = acquire_request(
            &format!("noisy/qf/{task}/{n}"),
            "noisy",
            Duration::from_secs(30),
        );
        request.metadata = metadata.clone();
        async move { tally.acquire(&client.acquire(request).await) }
    })
    .await;
    admin.set_quota(set_quota(0, true)).await?;
    Ok(format!(
        "its metadata quota ({} MiB) filled ({}), then acquires of fresh names with {} KiB of metadata: {}",
        FLOOD_METADATA_QUOTA >> 20,
        fill.describe(),
        BLOB / 1024,
        tally.describe()
    ))
}

async fn ad_hoc(
    endpoints: &[String],
    token: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    let clients = clients(endpoints, token, 3)?;
    let tally = Arc::new(Tally::default());
    let counts = tally.clone();
    flood(&clients, &stop, move |client, task, n| {
        let tally = counts.clone();
        let request = acquire_request(
            &format!("noisy/a/{task}/{n}"),
            "noisy",
            Duration::from_secs(20),
        );
        async move { tally.acquire(&client.acquire(request).await) }
    })
    .await;
    Ok(format!(
        "acquires of fresh ad-hoc names, 20 s leases: {}",
        tally.describe()
    ))
}

async fn waiters(
    endpoints: &[String],
    token: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    // A connection takes 1,024 streams at once: ten clients, each with a connection to
    // every node.
    let clients = clients(endpoints, token, 10)?;
    let resource = "noisy/w";
    let lease = hold(
        &clients[0],
        acquire_request(resource, "noisy", Duration::from_secs(600)),
    )
    .await?;
    let tally = Arc::new(Tally::default());
    let done = stopped(stop);
    let mut calls = JoinSet::new();
    for i in 0..WAITERS {
        let client = clients[i % clients.len()].clone();
        let mut request = acquire_request(resource, &format!("w{i}"), Duration::from_secs(30));
        request.on_conflict = pb::OnConflict::Wait as i32;
        request.wait_timeout = Some(prost_duration(Duration::from_secs(600)));
        let (tally, mut done) = (tally.clone(), done.clone());
        calls.spawn(async move {
            tokio::select! {
                answer = client.acquire(request) => tally.acquire(&answer),
                // Still waiting when the phase ends: the call goes away, and with it the wait.
                _ = done.wait_for(|stopped| *stopped) => tally.add("still waiting at the end"),
            }
        });
    }
    while calls.join_next().await.is_some() {}
    let _ = clients[0].release(release_request(&lease)).await;
    Ok(format!(
        "{WAITERS} waiting acquires of one held resource: {}",
        tally.describe()
    ))
}

async fn watch_all(
    endpoints: &[String],
    token: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    // Twice what its quota lets it open, over and over: a node cuts off a watcher that reads
    // nothing (--slow-watcher), and the attacker comes back.
    let count = 2 * ALL_RESOURCE_WATCHES as usize * endpoints.len();
    let (mut opened, mut refused, mut rounds) = (0, 0, 0);
    while !stop.load(Ordering::Relaxed) {
        let round = super::unread_watches(endpoints, count, token).await;
        opened += round.opened;
        refused += round.refused;
        rounds += 1;
        for _ in 0..50 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(round);
    }
    Ok(format!(
        "{rounds} rounds of {count} Watch streams over every resource from revision 0, never \
         read: {opened} opened, {refused} refused"
    ))
}

async fn list_flood(
    endpoints: &[String],
    token: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    let clients = clients(endpoints, token, 3)?;
    let mut held = JoinSet::new();
    for task in 0..FLOOD_TASKS {
        let client = clients[task % clients.len()].clone();
        held.spawn(async move {
            let mut leases = Vec::new();
            for i in (task..LISTED).step_by(FLOOD_TASKS) {
                let request =
                    acquire_request(&format!("noisy/l/{i}"), "noisy", Duration::from_secs(600));
                leases.push(hold(&client, request).await?);
            }
            anyhow::Ok(leases)
        });
    }
    let mut leases = Vec::new();
    while let Some(task) = held.join_next().await {
        leases.extend(task??);
    }
    let tally = Arc::new(Tally::default());
    let counts = tally.clone();
    flood(&clients, &stop, move |client, _, n| {
        let tally = counts.clone();
        let consistency = if n % 2 == 0 {
            pb::Consistency::Stale
        } else {
            pb::Consistency::Linearizable
        };
        async move {
            let mut page_token = String::new();
            loop {
                let answer = client
                    .list_leases(pb::ListLeasesRequest {
                        principal: PRINCIPAL.into(),
                        page_size: 1000,
                        page_token: page_token.clone(),
                        consistency: consistency as i32,
                        ..Default::default()
                    })
                    .await;
                match answer {
                    Ok(page) => {
                        tally.add("pages");
                        if page.next_page_token.is_empty() {
                            break;
                        }
                        page_token = page.next_page_token;
                    }
                    Err(e) => {
                        tally.add(format!("error {}", e.reason_str()));
                        break;
                    }
                }
            }
        }
    })
    .await;
    for lease in &leases {
        let _ = clients[0].release(release_request(lease)).await;
    }
    Ok(format!(
        "ListLeases of its {} leases, page after page: {}",
        leases.len(),
        tally.describe()
    ))
}
