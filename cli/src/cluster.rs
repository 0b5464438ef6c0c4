//! `tenure cluster …`: every node's own view, membership changes, leadership and snapshots.

use std::process::ExitCode;

use serde_json::{json, Value};
use tenure_client::{pb, Client, Error, Reason};

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
                        "config_digest": s.config_digest, "config_mismatches": s.config_mismatches,
                        "rules_version": s.rules_version, "rules_range": s.rules_range,
                        "rules_held_back": s.rules_held_back, "halted": s.halted,
                        "top_principals": s.top_principals.iter().map(quota_json).collect::<Vec<_>>(),
                        "members": status_members_json(&s),
                        "storage": {"log_appends": storage.log_appends, "log_entries": storage.log_entries,
                            "log_fsyncs": storage.log_fsyncs, "log_sync_micros": storage.log_sync_micros,
                            "snapshots_built": storage.snapshots_built, "last_snapshot_index": storage.last_snapshot_index,
                            "last_snapshot_bytes": storage.last_snapshot_bytes,
                            "last_snapshot_build_micros": storage.last_snapshot_build_micros,
                            "snapshot_building": storage.snapshot_building},
                    }),
                    format!(
                        "{endpoint}  id {} {:<9} term {} leader {} log {} commit {} applied {} leases {}  fsyncs {} (avg {avg_sync_us} µs) for {} appends / {} entries  config {}  rules {} (this node {}){}",
                        s.id, s.state, s.term, s.leader_id, s.last_log_index, s.commit_index, s.applied_index,
                        s.active_leases, storage.log_fsyncs, storage.log_appends, storage.log_entries,
                        s.config_digest, s.rules_version, s.rules_range,
                        (!s.halted.is_empty())
                            .then(|| format!("\n    HALTED: {}", s.halted))
                            .into_iter()
                            .chain(status_members_text(&s))
                            .chain(s.rules_held_back
                                .iter()
                                .map(|why| format!("\n    rules held back: {why}")))
                            .chain(s.config_mismatches
                                .iter()
                                .map(|m| format!("\n    refused (configuration differs) {m}")))
                            .chain(s.top_principals.iter().map(top_text))
                            .collect::<String>()
                    ),
                ));
            }
            Err(e) => nodes.push(refused_row(endpoint, &e)),
        }
    }
    print_rows(out, &nodes);
    Ok(if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The row of an endpoint that did not give its status: it did not answer (`unreachable`), or
/// it answered with an error (no token, a token it does not know, …), which is said as such.
fn refused_row(endpoint: &str, error: &Error) -> (Value, String) {
    let answered = !matches!(error, Error::Status { .. } if error.is_retryable());
    let text = if answered {
        let hint = match error.reason() {
            Some(Reason::Unauthenticated) => " (give a token: TENURE_TOKEN or --auth-token)",
            Some(Reason::InsufficientPermissions) => " (this call needs an admin's token)",
            _ => "",
        };
        format!("{endpoint}  answered: {error}{hint}")
    } else {
        format!("{endpoint}  unreachable: {error}")
    };
    let value = json!({"endpoint": endpoint, "reachable": answered, "error": error.to_string()});
    (value, text)
}

/// The members a node knows. Only a leader tracks how far each has replicated: a follower's
/// answer has no `matched_index` and no `healthy`, rather than zeros that look like a fault.
fn status_members_json(s: &pb::StatusResponse) -> Value {
    let leader = s.state == "Leader";
    s.members
        .iter()
        .map(|m| {
            let mut member = json!({"id": m.id, "addr": m.addr, "voter": m.voter});
            if !m.rules.is_empty() {
                member["rules"] = json!(m.rules);
            }
            if leader {
                member["matched_index"] = json!(m.matched_index);
                member["healthy"] = json!(m.healthy);
            }
            member
        })
        .collect()
}

/// One line per member, under the node's line.
fn status_members_text(s: &pb::StatusResponse) -> Vec<String> {
    let leader = s.state == "Leader";
    s.members
        .iter()
        .map(|m| {
            let role = if m.voter { "voter" } else { "learner" };
            let progress = match (leader, m.id == s.id) {
                (false, _) => String::new(),
                (true, true) => ", the leader".to_string(),
                (true, false) => format!(
                    ", log to {}, {}",
                    m.matched_index,
                    if m.healthy { "healthy" } else { "NOT healthy" }
                ),
            };
            let rules = match m.rules.as_str() {
                "" => String::new(),
                range => format!(", rules {range}"),
            };
            format!("\n    member {} {} {role}{progress}{rules}", m.id, m.addr)
        })
        .collect()
}

fn members_json(members: &[pb::Member]) -> Value {
    members
        .iter()
        .map(|m| json!({"id": m.id, "addr": m.addr, "voter": m.voter, "matched_index": m.matched_index}))
        .collect()
}

fn members_text(members: &[pb::Member]) -> String {
    members
        .iter()
        .map(|m| {
            let role = if m.voter { "voter" } else { "learner" };
            format!("  {} {} {role} (log to {})", m.id, m.addr, m.matched_index)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn print_membership(out: Output, response: &pb::MembershipResponse, what: &str) {
    let value = json!({
        "log_index": response.log_index, "leader_id": response.leader_id,
        "caught_up": response.caught_up, "members": members_json(&response.members),
    });
    output::print(out, &value, || {
        format!(
            "{what} (membership entry {}, leader {})\n{}",
            response.log_index,
            response.leader_id,
            members_text(&response.members)
        )
    });
}

/// `tenure cluster add ID ADDR`: exit 1 when waiting and the learner has not caught up yet.
pub async fn add(
    out: Output,
    client: &Client,
    id: u64,
    addr: &str,
    wait: bool,
) -> Result<ExitCode, Error> {
    let response = client.add_learner(id, addr, wait).await?;
    let what = match (wait, response.caught_up) {
        (false, _) => format!("added {id} as a learner"),
        (true, true) => format!("added {id} as a learner; it has caught up"),
        (true, false) => format!("added {id} as a learner; it is still catching up"),
    };
    print_membership(out, &response, &what);
    Ok(if wait && !response.caught_up {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `tenure cluster promote|remove IDS`.
pub async fn change(
    out: Output,
    client: &Client,
    promote: Vec<u64>,
    remove: Vec<u64>,
) -> Result<ExitCode, Error> {
    let what = if promote.is_empty() {
        format!("removed {remove:?}")
    } else {
        format!("promoted {promote:?}")
    };
    let response = client.change_membership(promote, remove).await?;
    print_membership(out, &response, &what);
    Ok(ExitCode::SUCCESS)
}

/// `tenure cluster transfer-leader [ID]`: exit 1 when leadership did not move there.
pub async fn transfer_leader(out: Output, client: &Client, to: u64) -> Result<ExitCode, Error> {
    let r = client.transfer_leader(to).await?;
    let value = json!({
        "previous_leader_id": r.previous_leader_id, "leader_id": r.leader_id,
        "transferred": r.transferred, "detail": r.detail,
    });
    output::print(out, &value, || {
        if r.transferred {
            format!("leader {} → {}", r.previous_leader_id, r.leader_id)
        } else {
            format!(
                "leadership did not move as asked: {} (leader was {}, is now {}; 0: none yet)",
                r.detail, r.previous_leader_id, r.leader_id
            )
        }
    });
    Ok(if r.transferred {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `tenure cluster snapshot [--backup]`: every endpoint builds one (and, with `backup`, writes
/// it whole to a backup file on the node); exit 2 if any failed.
pub async fn snapshot(out: Output, client: &Client, backup: bool) -> Result<ExitCode, Error> {
    let mut rows = Vec::new();
    let mut failed = false;
    for (i, endpoint) in client.endpoints().iter().enumerate() {
        match client.node_snapshot(i, backup).await {
            Ok(s) if backup && s.backup_path.is_empty() => {
                failed = true;
                let error = "the node wrote no backup (a release before 0.2.0)";
                rows.push((
                    json!({"endpoint": endpoint, "error": error}),
                    format!("{endpoint}  failed: {error}"),
                ));
            }
            Ok(s) => rows.push((
                json!({"endpoint": endpoint, "last_index": s.last_index, "bytes": s.bytes, "build_micros": s.build_micros, "build_cpu_micros": s.build_cpu_micros,
                       "backup_path": (!s.backup_path.is_empty()).then_some(&s.backup_path), "backup_bytes": s.backup_bytes}),
                format!(
                    "{endpoint}  snapshot to index {}: {} bytes in {} ms ({} ms of CPU){}",
                    s.last_index,
                    s.bytes,
                    s.build_micros / 1000,
                    s.build_cpu_micros / 1000,
                    match s.backup_path.is_empty() {
                        true => String::new(),
                        false => format!("; backup {} ({} bytes)", s.backup_path, s.backup_bytes),
                    }
                ),
            )),
            Err(e) => {
                failed = true;
                rows.push((
                    json!({"endpoint": endpoint, "error": e.to_string()}),
                    format!("{endpoint}  failed: {e}"),
                ));
            }
        }
    }
    print_rows(out, &rows);
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// `tenure health`: exit 0 if every endpoint serves, 1 if one does not, 2 if one is unreachable.
pub async fn health(out: Output, client: &Client) -> Result<ExitCode, Error> {
    let mut rows = Vec::new();
    let mut worst = 0u8;
    for (i, endpoint) in client.endpoints().iter().enumerate() {
        let (value, text, code) = match client.node_serving(i).await {
            Ok(true) => (
                json!({"endpoint": endpoint, "serving": true}),
                format!("{endpoint}  SERVING"),
                0,
            ),
            Ok(false) => (
                json!({"endpoint": endpoint, "serving": false}),
                format!("{endpoint}  NOT_SERVING (no leader known)"),
                1,
            ),
            Err(e) => {
                let (value, text) = refused_row(endpoint, &e);
                (value, text, 2)
            }
        };
        worst = worst.max(code);
        rows.push((value, text));
    }
    print_rows(out, &rows);
    Ok(ExitCode::from(worst))
}

/// One row per endpoint: JSON values as an array, or the text lines.
fn print_rows(out: Output, rows: &[(Value, String)]) {
    let value = Value::Array(rows.iter().map(|(v, _)| v.clone()).collect());
    output::print(out, &value, || {
        rows.iter()
            .map(|(_, t)| t.clone())
            .collect::<Vec<_>>()
            .join("\n")
    });
}

/// `tenure quota set`: QUOTA=LIMIT (or QUOTA=default) pairs for a principal or the defaults.
pub async fn set_quota(
    out: Output,
    client: &Client,
    principal: Option<&str>,
    limits: &[String],
) -> Result<ExitCode, Error> {
    let mut changes = Vec::new();
    for pair in limits {
        let Some((quota, limit)) = pair.split_once('=') else {
            return Err(Error::Local(format!(
                "{pair:?}: expected QUOTA=LIMIT or QUOTA=default"
            )));
        };
        let (limit, reset) = match limit {
            "default" => (0, true),
            n => match n.parse::<u64>() {
                Ok(n) => (n, false),
                Err(_) => {
                    return Err(Error::Local(format!(
                        "{pair:?}: the limit must be a whole number or `default`"
                    )))
                }
            },
        };
        changes.push(pb::QuotaChange {
            quota: quota.to_string(),
            limit,
            reset,
        });
    }
    let reply = client
        .set_quota(pb::SetQuotaRequest {
            principal: principal.unwrap_or_default().to_string(),
            changes,
            request_id: String::new(),
        })
        .await?;
    print_quota(out, &reply);
    Ok(ExitCode::SUCCESS)
}

/// `tenure quota get`.
pub async fn get_quota(
    out: Output,
    client: &Client,
    principal: Option<&str>,
) -> Result<ExitCode, Error> {
    let reply = client.get_quota(principal.unwrap_or_default()).await?;
    print_quota(out, &reply);
    Ok(ExitCode::SUCCESS)
}

/// One of the principals nearest a quota, on a line: what it holds of each quota it uses.
fn top_text(q: &pb::QuotaResponse) -> String {
    let used: Vec<String> = q
        .quotas
        .iter()
        .filter(|l| l.used > 0)
        .map(|l| format!("{} {}/{}", l.quota, l.used, l.limit))
        .collect();
    format!("\n    principal {}: {}", q.principal, used.join(", "))
}

fn quota_json(q: &pb::QuotaResponse) -> Value {
    json!({
        "principal": q.principal,
        "quotas": q.quotas.iter().map(|l| json!({"quota": l.quota, "limit": l.limit, "used": l.used, "overridden": l.overridden})).collect::<Vec<_>>(),
    })
}

fn print_quota(out: Output, q: &pb::QuotaResponse) {
    output::print(out, &quota_json(q), || {
        let who = if q.principal.is_empty() {
            "defaults (every principal without its own limit)".to_string()
        } else {
            format!("principal {}", q.principal)
        };
        let mut text = who;
        for l in &q.quotas {
            let set = if l.overridden { "  (set)" } else { "" };
            text.push_str(&format!(
                "\n  {:<20} {:>14} of {:>14}{set}",
                l.quota, l.used, l.limit
            ));
        }
        text
    });
}
