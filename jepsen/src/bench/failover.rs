//! The failover workload: lock cycles while the leader is killed, and the time to the next
//! successful cycle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::cluster::{await_ready, LocalCluster, System, NODES};
use super::session::{leader, open_sessions, ready};
use super::{BenchOptions, Workload};

/// Failover times of one system, one per kill.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failover {
    pub system: System,
    pub clients: usize,
    pub millis: Vec<f64>,
    pub errors: u64,
}

impl Failover {
    pub fn median_ms(&self) -> f64 {
        let mut sorted = self.millis.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }
}

/// Lock cycles from `failover_clients` clients; `kills` times: kill -9 the leader after two
/// seconds of load, and take the time from the kill to the end of the first successful
/// cycle that *started* after the kill. The killed node is restarted and the cluster is
/// ready again before the next kill.
pub(super) async fn failover(
    options: &BenchOptions,
    system: System,
    cluster: &mut LocalCluster,
) -> Result<Failover> {
    let mut result = Failover {
        system,
        clients: options.failover_clients,
        millis: Vec::new(),
        errors: 0,
    };
    for _ in 0..options.kills {
        let sessions = open_sessions(
            system,
            (&cluster.endpoints, &cluster.http_endpoints),
            Workload::Failover,
            options.failover_clients,
        )
        .await?;
        let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (recovered_tx, mut recovered) = mpsc::unbounded_channel::<Instant>();
        let mut tasks = JoinSet::new();
        for mut session in sessions {
            let killed_at = killed_at.clone();
            let stop = stop.clone();
            let recovered_tx = recovered_tx.clone();
            tasks.spawn(async move {
                let mut errors = 0u64;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let began = Instant::now();
                    let result = session.op(n).await;
                    let kill = *killed_at.lock().unwrap_or_else(|p| p.into_inner());
                    match result {
                        Ok(_) if kill.is_some_and(|k| began >= k) => {
                            let _ = recovered_tx.send(Instant::now());
                        }
                        Ok(_) => {}
                        Err(_) => {
                            errors += 1;
                            // A client whose node is gone must not spin.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                session.close().await;
                errors
            });
        }
        drop(recovered_tx);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let victim = leader(system, &cluster.endpoints).await?;
        let kill = Instant::now();
        *killed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(kill);
        cluster.procs.kill9(victim)?;
        let first = tokio::time::timeout(Duration::from_secs(60), recovered.recv()).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(errors) = tasks.join_next().await {
            result.errors += errors?;
        }
        match first {
            Ok(Some(at)) => result.millis.push((at - kill).as_secs_f64() * 1000.0),
            _ => bail!(
                "{}: no lock cycle succeeded within 60 s of killing the leader",
                system.name()
            ),
        }
        cluster.procs.restart(victim)?;
        await_ready(system.name(), Duration::from_secs(60), || {
            ready(system, &cluster.endpoints, &[true; NODES as usize])
        })
        .await?;
    }
    Ok(result)
}
