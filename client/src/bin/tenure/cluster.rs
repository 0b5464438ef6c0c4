//! `tenure cluster status` (every node's own view) and `tenure bench` (latency from here).

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};
use tenure_client::{pb, prost_duration, Client, Error};

use crate::output::{self, Output};

pub async fn status(out: Output, client: &Client) -> Result<ExitCode, Error> {
    let mut nodes = Vec::new();
    let mut any = false;
    for (i, endpoint) in client.endpoints().iter().enumerate() {
        match client.node_status(i).await {
            Ok(s) => {
                any = true;
                let storage = s.storage.unwrap_or_default();
                let avg_sync_us = storage
                    .log_sync_micros
                    .checked_div(storage.log_fsyncs)
                    .unwrap_or(0);
                nodes.push((
                    json!({
                        "endpoint": endpoint, "id": s.id, "state": s.state, "term": s.term,
                        "leader_id": s.leader_id, "leader_addr": s.leader_addr,
                        "last_log_index": s.last_log_index, "commit_index": s.commit_index,
                        "applied_index": s.applied_index, "active_leases": s.active_leases,
                        "lease_now_ms": s.lease_now_ms,
                        "members": s.members.iter().map(|m| json!({"id": m.id, "addr": m.addr, "voter": m.voter, "matched_index": m.matched_index, "healthy": m.healthy})).collect::<Vec<_>>(),
                        "storage": {"log_appends": storage.log_appends, "log_entries": storage.log_entries,
                            "log_fsyncs": storage.log_fsyncs, "log_sync_micros": storage.log_sync_micros,
                            "snapshots_built": storage.snapshots_built, "last_snapshot_index": storage.last_snapshot_index,
                            "last_snapshot_bytes": storage.last_snapshot_bytes},
                    }),
                    format!(
                        "{endpoint}  id {} {:<9} term {} leader {} log {} commit {} applied {} leases {}  fsyncs {} (avg {avg_sync_us} µs) for {} appends / {} entries",
                        s.id, s.state, s.term, s.leader_id, s.last_log_index, s.commit_index, s.applied_index,
                        s.active_leases, storage.log_fsyncs, storage.log_appends, storage.log_entries
                    ),
                ));
            }
            Err(e) => nodes.push((
                json!({"endpoint": endpoint, "error": e.to_string()}),
                format!("{endpoint}  unreachable: {e}"),
            )),
        }
    }
    let value = Value::Array(nodes.iter().map(|(v, _)| v.clone()).collect());
    output::print(out, &value, || {
        nodes
            .iter()
            .map(|(_, t)| t.clone())
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

pub async fn bench(
    out: Output,
    client: &Client,
    count: u32,
    prefix: &str,
) -> Result<ExitCode, Error> {
    let mut acquire =
        hdrhistogram::Histogram::<u64>::new(3).map_err(|e| Error::Local(e.to_string()))?;
    let mut release = acquire.clone();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let started = std::time::Instant::now();
    for i in 0..count {
        let resource = format!("{prefix}/{run}/{i}");
        let t = std::time::Instant::now();
        let granted = client
            .acquire(pb::AcquireRequest {
                resource: resource.clone(),
                holder: "bench".into(),
                ttl: Some(prost_duration(Duration::from_secs(30))),
                ..Default::default()
            })
            .await?;
        let _ = acquire.record(t.elapsed().as_micros() as u64);
        let lease = granted
            .lease
            .ok_or_else(|| Error::Local(format!("{resource} not granted")))?;
        let t = std::time::Instant::now();
        client
            .release(pb::ReleaseRequest {
                resource,
                lease_id: lease.lease_id,
                holder: "bench".into(),
                fencing_token: lease.fencing_token,
                request_id: String::new(),
            })
            .await?;
        let _ = release.record(t.elapsed().as_micros() as u64);
    }
    let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let elapsed = started.elapsed().as_secs_f64();
    let value = json!({
        "count": count,
        "acquire_ms": {"p50": ms(&acquire, 0.5), "p99": ms(&acquire, 0.99), "max": acquire.max() as f64 / 1000.0},
        "release_ms": {"p50": ms(&release, 0.5), "p99": ms(&release, 0.99), "max": release.max() as f64 / 1000.0},
        "cycles_per_second": count as f64 / elapsed,
    });
    output::print(out, &value, || {
        format!(
            "{count} acquire+release cycles in {elapsed:.1}s ({:.0}/s)\nacquire  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms\nrelease  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            count as f64 / elapsed,
            ms(&acquire, 0.5), ms(&acquire, 0.99), acquire.max() as f64 / 1000.0,
            ms(&release, 0.5), ms(&release, 0.99), release.max() as f64 / 1000.0,
        )
    });
    Ok(ExitCode::SUCCESS)
}
