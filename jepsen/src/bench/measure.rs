//! One measured cell: `clients` sessions in a closed loop, counted between the warm-up and
//! the end.

use anyhow::Result;
use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::cluster::LocalCluster;
use super::session::open_sessions;
use super::{BenchOptions, Cell, Workload};

/// What one client task saw in the measured window.
struct Tally {
    histogram: Histogram<u64>,
    ops: u64,
    /// Ops completed in each minute of the window.
    per_minute: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 100 s at 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

pub(super) async fn measure(
    options: &BenchOptions,
    cluster: &LocalCluster,
    workload: Workload,
    clients: usize,
) -> Result<Cell> {
    let system = cluster.system;
    let sessions = open_sessions(
        system,
        (&cluster.endpoints, &cluster.http_endpoints),
        workload,
        clients,
    )
    .await?;
    let start = Instant::now() + options.warmup;
    let end = start + options.duration;
    let mut tasks = JoinSet::new();
    for mut session in sessions {
        tasks.spawn(async move {
            let mut tally = Tally {
                histogram: histogram(),
                ops: 0,
                per_minute: Vec::new(),
                errors: 0,
                first_error: None,
            };
            let mut n = 0u64;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                n += 1;
                let result = session.op(n).await;
                let finished = Instant::now();
                if began < start || finished > end {
                    continue;
                }
                match result {
                    Ok(timed) => {
                        tally.ops += 1;
                        let minute = ((finished - start).as_secs() / 60) as usize;
                        if tally.per_minute.len() <= minute {
                            tally.per_minute.resize(minute + 1, 0);
                        }
                        tally.per_minute[minute] += 1;
                        let micros = timed.unwrap_or(finished - began).as_micros() as u64;
                        tally.histogram.saturating_record(micros.max(1));
                    }
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
            session.close().await;
            tally
        });
    }
    tokio::time::sleep_until(start).await;
    let cpu_before = cluster.cpu_time();
    let switches_before = cluster.context_switches();
    tokio::time::sleep_until(end).await;
    let cpu = cluster.cpu_time().saturating_sub(cpu_before);
    let switches = cluster.context_switches().saturating_sub(switches_before);
    let mut all = histogram();
    let (mut ops, mut errors, mut first_error) = (0, 0, None);
    let mut per_minute = vec![0u64; options.duration.as_secs().div_ceil(60) as usize];
    while let Some(tally) = tasks.join_next().await {
        let tally = tally?;
        all.add(&tally.histogram)?;
        ops += tally.ops;
        for (total, ops) in per_minute.iter_mut().zip(&tally.per_minute) {
            *total += ops;
        }
        errors += tally.errors;
        if first_error.is_none() {
            first_error = tally.first_error;
        }
    }
    let seconds = options.duration.as_secs_f64();
    Ok(Cell {
        system,
        workload,
        clients,
        ops,
        errors,
        first_error,
        seconds,
        ops_per_s: ops as f64 / seconds,
        per_minute_ops_per_s: per_minute
            .iter()
            .enumerate()
            .map(|(minute, ops)| {
                // The last minute may be a part of one.
                let length = (seconds - 60.0 * minute as f64).min(60.0);
                *ops as f64 / length
            })
            .collect(),
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        p999_us: all.value_at_quantile(0.999),
        cpu_s_per_1k: if ops == 0 {
            f64::NAN
        } else {
            cpu.as_secs_f64() * 1000.0 / ops as f64
        },
        switches_per_op: if ops == 0 {
            f64::NAN
        } else {
            switches as f64 / ops as f64
        },
    })
}
