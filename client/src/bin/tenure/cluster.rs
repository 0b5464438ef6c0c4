//! `tenure cluster status`: every node's own view.

use std::process::ExitCode;

use serde_json::{json, Value};
use tenure_client::{Client, Error};

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
                            "last_snapshot_bytes": storage.last_snapshot_bytes,
                            "last_snapshot_build_micros": storage.last_snapshot_build_micros,
                            "snapshot_building": storage.snapshot_building},
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
