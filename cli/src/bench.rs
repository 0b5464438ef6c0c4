//! `tenure bench`: latency seen from this client. Without flags, sequential acquire and
//! release cycles on one resource of the run's own; with `--handoff`, how fast a release hands a
//! resource to a blocked waiter.
//!
//! The handoff bench: one holder and `--waiters N` clients, each on its own connections,
//! queue for one resource with `WAIT`. The holder waits until the waiting room shows all N
//! (at a revision after its own grant, read from a `Watch`), notes the time, sends its
//! release, and queues again; the waiter the release admits takes the time its blocked
//! acquire returned, minus the noted time, as one handoff, and becomes the holder. So every
//! sample is release *send* → head waiter's acquire answered `granted`, with N waiting.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;
use tenure_client::{pb, prost_duration, release_request, Client, Error};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::output::{self, Output};

#[derive(Args)]
pub struct BenchArgs {
    /// Cycles (or, with --handoff, handoffs) to measure.
    #[arg(long, default_value_t = 1000)]
    pub count: u32,
    /// The resource is named PREFIX/RUN (RUN: random per run). It is left ad hoc and free,
    /// with the run's events, which the cluster trims (at most 10,000 events of one
    /// resource) and then forgets.
    #[arg(long, default_value = "bench")]
    prefix: String,
    /// Measure release → blocked waiter granted, instead of acquire and release.
    #[arg(long)]
    pub handoff: bool,
    /// With --handoff: clients blocked in the waiting room at each release.
    #[arg(long, default_value_t = 1, requires = "handoff")]
    pub waiters: u32,
}

const HOLD_TTL: Duration = Duration::from_secs(30);
/// Long enough that no wait ends before its handoff.
const WAIT_TIMEOUT: Duration = Duration::from_secs(3600);

fn histogram() -> Result<Histogram<u64>, Error> {
    Histogram::new(3).map_err(|e| Error::Local(e.to_string()))
}

/// Milliseconds at quantile `q` (1.0: the max).
fn ms(histogram: &Histogram<u64>, q: f64) -> f64 {
    histogram.value_at_quantile(q) as f64 / 1000.0
}

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// Sequential acquire + release cycles on one resource of the run's own: each acquire is
/// granted at once (the release before it freed the resource), and the run leaves behind one
/// free ad-hoc resource with a bounded history, not one per cycle.
pub async fn cycles(out: Output, client: &Client, args: &BenchArgs) -> Result<ExitCode, Error> {
    let count = args.count;
    let mut acquire = histogram()?;
    let mut release = histogram()?;
    let run = run_id();
    let started = Instant::now();
    let resource = format!("{}/{run}", args.prefix);
    for _ in 0..count {
        let t = Instant::now();
        let granted = client
            .acquire(pb::AcquireRequest {
                resource: resource.clone(),
                holder: "bench".into(),
                ttl: Some(prost_duration(HOLD_TTL)),
                ..Default::default()
            })
            .await?;
        let _ = acquire.record(t.elapsed().as_micros() as u64);
        let lease = granted
            .lease
            .ok_or_else(|| Error::Local(format!("{resource} not granted")))?;
        let t = Instant::now();
        client.release(release_request(&lease)).await?;
        let _ = release.record(t.elapsed().as_micros() as u64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let value = json!({
        "count": count,
        "acquire_ms": {"p50": ms(&acquire, 0.5), "p99": ms(&acquire, 0.99), "max": ms(&acquire, 1.0)},
        "release_ms": {"p50": ms(&release, 0.5), "p99": ms(&release, 0.99), "max": ms(&release, 1.0)},
        "cycles_per_second": count as f64 / elapsed,
        "resource": resource,
    });
    output::print(out, &value, || {
        format!(
            "{count} acquire+release cycles on {resource} in {elapsed:.1}s ({:.0}/s)\nacquire  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms\nrelease  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms\n(left behind: {resource}, free, with its history until the cluster trims it)",
            count as f64 / elapsed,
            ms(&acquire, 0.5), ms(&acquire, 0.99), ms(&acquire, 1.0),
            ms(&release, 0.5), ms(&release, 0.99), ms(&release, 1.0),
        )
    });
    Ok(ExitCode::SUCCESS)
}

/// What the participants of a handoff bench share.
struct Handoff {
    resource: String,
    waiters: u32,
    count: u32,
    /// When the current holder sent its release; taken by the waiter it admits.
    release_sent: Mutex<Option<Instant>>,
    latencies: Mutex<Histogram<u64>>,
    recorded: AtomicU32,
    /// (waiting, revision): the waiting room's size as of a revision, from a Watch.
    queue: watch::Receiver<(u32, u64)>,
}

/// Release → head waiter granted, with `args.waiters` waiting; `clients` holds one client
/// per participant (holder + waiters), each on its own connections.
pub async fn handoff(
    out: Output,
    clients: Vec<Client>,
    args: &BenchArgs,
) -> Result<ExitCode, Error> {
    let run = run_id();
    let resource = format!("{}/{run}", args.prefix);
    let observer = clients[0].clone();
    let (queue_tx, queue) = watch::channel((0, 0));
    let bench = Arc::new(Handoff {
        resource: resource.clone(),
        waiters: args.waiters,
        count: args.count,
        release_sent: Mutex::new(None),
        latencies: Mutex::new(histogram()?),
        recorded: AtomicU32::new(0),
        queue,
    });
    let mut tasks = JoinSet::new();
    tasks.spawn(count_waiters(observer.clone(), resource.clone(), queue_tx));
    let holders: Vec<String> = (0..clients.len())
        .map(|i| format!("bench-{run}-{i}"))
        .collect();
    let first = clients[0]
        .acquire(acquire_request(&resource, &holders[0], false))
        .await?;
    let first = first
        .lease
        .filter(|_| first.granted)
        .ok_or_else(|| Error::Local(format!("{resource}: first acquire not granted")))?;
    let started = Instant::now();
    let mut lease = Some(first);
    for (client, holder) in clients.into_iter().zip(&holders) {
        tasks.spawn(participant(
            bench.clone(),
            client,
            holder.clone(),
            lease.take(),
        ));
    }
    let last = loop {
        match tasks.join_next().await {
            Some(Ok(Ok(Some(lease)))) => break lease,
            Some(Ok(Ok(None))) => {}
            Some(Ok(Err(error))) => return Err(error),
            Some(Err(join)) => return Err(Error::Local(format!("a bench task failed: {join}"))),
            None => return Err(Error::Local("the bench ended without a holder".into())),
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    // Stop the blocked acquires and take their waits out before the release, which would
    // otherwise admit one of them.
    tasks.shutdown().await;
    for holder in holders.iter().filter(|h| **h != last.holder) {
        observer
            .cancel_wait(pb::CancelWaitRequest {
                resource: resource.clone(),
                holder: holder.clone(),
                request_id: String::new(),
                queued_revision: 0,
            })
            .await?;
    }
    observer.release(release_request(&last)).await?;
    let latencies = bench.latencies.lock().expect("latencies").clone();
    let count = latencies.len();
    let waiters = args.waiters;
    let value = json!({
        "count": count,
        "waiters": waiters,
        "handoff_ms": {"p50": ms(&latencies, 0.5), "p90": ms(&latencies, 0.9), "p99": ms(&latencies, 0.99), "max": ms(&latencies, 1.0)},
        "handoffs_per_second": count as f64 / elapsed,
    });
    output::print(out, &value, || {
        format!(
            "{count} handoffs with {waiters} waiting in {elapsed:.1}s ({:.0}/s): release sent → head waiter granted\nhandoff  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            count as f64 / elapsed,
            ms(&latencies, 0.5), ms(&latencies, 0.9), ms(&latencies, 0.99), ms(&latencies, 1.0),
        )
    });
    Ok(ExitCode::SUCCESS)
}

fn acquire_request(resource: &str, holder: &str, wait: bool) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: holder.into(),
        ttl: Some(prost_duration(HOLD_TTL)),
        on_conflict: if wait {
            pb::OnConflict::Wait as i32
        } else {
            pb::OnConflict::Fail as i32
        },
        wait_timeout: wait.then(|| prost_duration(WAIT_TIMEOUT)),
        ..Default::default()
    }
}

/// Holds, releases once everyone else waits, queues again; returns the lease it holds (with
/// everyone else waiting) when enough handoffs are recorded. Never returns `Ok(None)`.
async fn participant(
    bench: Arc<Handoff>,
    client: Client,
    holder: String,
    mut lease: Option<pb::Lease>,
) -> Result<Option<pb::Lease>, Error> {
    loop {
        if let Some(held) = lease.take() {
            // Everyone else queued after this grant: the release admits a blocked waiter.
            let mut queue = bench.queue.clone();
            queue
                .wait_for(|(waiting, revision)| {
                    *revision >= held.fencing_token && *waiting >= bench.waiters
                })
                .await
                .map_err(|_| Error::Local("the waiting-room watch stopped".into()))?;
            if bench.recorded.load(Ordering::Acquire) >= bench.count {
                return Ok(Some(held));
            }
            *bench.release_sent.lock().expect("release_sent") = Some(Instant::now());
            client.release(release_request(&held)).await?;
        }
        let response = client
            .acquire(acquire_request(&bench.resource, &holder, true))
            .await?;
        if !response.granted {
            return Err(Error::NotGranted {
                reason: response.reason,
            });
        }
        if let Some(sent) = bench.release_sent.lock().expect("release_sent").take() {
            let micros = sent.elapsed().as_micros() as u64;
            let _ = bench.latencies.lock().expect("latencies").record(micros);
            bench.recorded.fetch_add(1, Ordering::AcqRel);
        }
        lease = response.lease;
    }
}

/// Publishes the size of the waiting room with the revision it is current at: a read, then
/// the queue events after it. Runs until the bench ends or the watch fails.
async fn count_waiters(
    client: Client,
    resource: String,
    queue: watch::Sender<(u32, u64)>,
) -> Result<Option<pb::Lease>, Error> {
    let read = client
        .get_resource(pb::GetResourceRequest {
            name: resource.clone(),
            consistency: pb::Consistency::Linearizable as i32,
        })
        .await?;
    let mut waiting = read.resource.map_or(0, |r| r.waiting);
    queue.send_replace((waiting, read.read_revision));
    let kinds = [
        pb::EventType::Queued,
        pb::EventType::Admitted,
        pb::EventType::WaitTimedOut,
        pb::EventType::WaitCancelled,
    ];
    let mut messages = client.watch_resuming(pb::WatchRequest {
        resource,
        start_revision: read.read_revision,
        events: kinds.iter().map(|k| *k as i32).collect(),
        ..Default::default()
    });
    while let Some(message) = messages.next().await {
        let message = message?;
        for event in &message.events {
            if event.event == pb::EventType::Queued as i32 {
                waiting += 1;
            } else {
                waiting = waiting.saturating_sub(1);
            }
        }
        queue.send_replace((waiting, message.revision));
    }
    Err(Error::Local("the waiting-room watch ended".into()))
}
