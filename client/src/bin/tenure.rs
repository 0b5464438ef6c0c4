//! `tenure`: the command line for a Tenure cluster.
//!
//! Exit codes: 0 when the operation succeeded (granted, valid); 1 when it was answered but
//! not granted or not valid; 2 when it failed (the reason is printed).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use tenure_client::{pb, prost_duration, Client, Error, DEFAULT_ENDPOINTS};

#[derive(Parser)]
#[command(
    name = "tenure",
    version,
    about = "Leases with fencing tokens on a Tenure cluster"
)]
struct Cli {
    /// Comma-separated HOST:PORT list of cluster nodes.
    #[arg(long, global = true, env = "TENURE_ENDPOINTS", default_value = DEFAULT_ENDPOINTS)]
    endpoints: String,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Deadline of each call, retries included.
    #[arg(long, global = true, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire RESOURCE for a holder; prints the lease and its fencing token.
    Acquire {
        resource: String,
        #[arg(long)]
        holder: String,
        /// Lease ttl, e.g. 30s or 2h (default: the resource policy's).
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        #[arg(long, default_value = "")]
        idempotency_key: String,
        /// Reuse to retry a call exactly once (default: a fresh one).
        #[arg(long, default_value = "")]
        request_id: String,
    },
    /// Renew a lease: replaces its expiry with now + ttl.
    Renew {
        resource: String,
        #[arg(long)]
        holder: String,
        #[arg(long)]
        token: u64,
        #[arg(long, default_value = "")]
        lease_id: String,
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        #[arg(long, default_value = "")]
        request_id: String,
    },
    /// Release a lease at once.
    Release {
        resource: String,
        #[arg(long)]
        holder: String,
        #[arg(long)]
        token: u64,
        #[arg(long, default_value = "")]
        lease_id: String,
        #[arg(long, default_value = "")]
        request_id: String,
    },
    /// Is this fencing token (or lease id) the live tenure of RESOURCE?
    Validate {
        resource: String,
        #[arg(long, default_value_t = 0)]
        token: u64,
        #[arg(long, default_value = "")]
        lease_id: String,
    },
    /// Show RESOURCE: policy and active leases (linearizable unless --stale).
    Status {
        resource: String,
        #[arg(long)]
        stale: bool,
    },
    /// Cluster administration.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Measure acquire and release latency from this client (sequential, distinct resources).
    Bench {
        #[arg(long, default_value_t = 1000)]
        count: u32,
        #[arg(long, default_value = "bench")]
        prefix: String,
    },
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Every endpoint's view: role, term, leader, indexes, members, storage counters.
    Status,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let client = match Client::from_list(&cli.endpoints) {
        Ok(client) => client.with_timeout(cli.timeout),
        Err(e) => return fail(cli.output, &e),
    };
    match run(&cli, &client).await {
        Ok(code) => code,
        Err(e) => fail(cli.output, &e),
    }
}

fn fail(output: Output, error: &Error) -> ExitCode {
    match output {
        Output::Json => println!(
            "{}",
            json!({"ok": false, "reason": error.reason(), "error": error.to_string()})
        ),
        Output::Text => eprintln!("error: {error}"),
    }
    ExitCode::from(2)
}

fn print(output: Output, value: &Value, text: impl FnOnce() -> String) {
    match output {
        Output::Json => println!("{value}"),
        Output::Text => println!("{}", text()),
    }
}

async fn run(cli: &Cli, client: &Client) -> Result<ExitCode, Error> {
    let out = cli.output;
    match &cli.command {
        Command::Acquire {
            resource,
            holder,
            ttl,
            idempotency_key,
            request_id,
        } => {
            let response = client
                .acquire(pb::AcquireRequest {
                    resource: resource.clone(),
                    holder: holder.clone(),
                    ttl: ttl.map(prost_duration),
                    idempotency_key: idempotency_key.clone(),
                    request_id: request_id.clone(),
                    ..Default::default()
                })
                .await?;
            let value = json!({
                "granted": response.granted,
                "reason": response.reason,
                "lease": response.lease.as_ref().map(lease_json),
                "holders": response.holders.iter().map(lease_json).collect::<Vec<_>>(),
            });
            print(out, &value, || match &response.lease {
                Some(lease) if response.granted => format!("granted\n{}", lease_text(lease)),
                _ => {
                    let holders: Vec<String> = response.holders.iter().map(lease_text).collect();
                    format!("not granted: {}\n{}", response.reason, holders.join("\n"))
                }
            });
            Ok(if response.granted {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Renew {
            resource,
            holder,
            token,
            lease_id,
            ttl,
            request_id,
        } => {
            let response = client
                .renew(pb::RenewRequest {
                    resource: resource.clone(),
                    lease_id: lease_id.clone(),
                    holder: holder.clone(),
                    fencing_token: *token,
                    ttl: ttl.map(prost_duration),
                    request_id: request_id.clone(),
                })
                .await?;
            print_lease(out, "renewed", response.lease.as_ref());
            Ok(ExitCode::SUCCESS)
        }
        Command::Release {
            resource,
            holder,
            token,
            lease_id,
            request_id,
        } => {
            let response = client
                .release(pb::ReleaseRequest {
                    resource: resource.clone(),
                    lease_id: lease_id.clone(),
                    holder: holder.clone(),
                    fencing_token: *token,
                    request_id: request_id.clone(),
                })
                .await?;
            print_lease(out, "released", response.lease.as_ref());
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate {
            resource,
            token,
            lease_id,
        } => {
            let response = client
                .validate(pb::ValidateRequest {
                    resource: resource.clone(),
                    lease_id: lease_id.clone(),
                    fencing_token: *token,
                    ..Default::default()
                })
                .await?;
            let value = json!({"valid": response.valid, "reason": response.reason, "lease": response.lease.as_ref().map(lease_json)});
            print(out, &value, || {
                format!(
                    "{}: {}",
                    if response.valid { "valid" } else { "not valid" },
                    response.reason
                )
            });
            Ok(if response.valid {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Status { resource, stale } => {
            let consistency = if *stale {
                pb::Consistency::Stale
            } else {
                pb::Consistency::Linearizable
            };
            let response = client
                .get_resource(pb::GetResourceRequest {
                    name: resource.clone(),
                    consistency: consistency as i32,
                })
                .await?;
            let resource = response.resource.unwrap_or_default();
            let value = json!({
                "name": resource.name,
                "revision": resource.revision,
                "read_revision": response.read_revision,
                "stale": response.stale,
                "ad_hoc": resource.ad_hoc,
                "leases": resource.leases.iter().map(lease_json).collect::<Vec<_>>(),
            });
            print(out, &value, || {
                let mut text = format!(
                    "{} (revision {}, read at {})",
                    resource.name, resource.revision, response.read_revision
                );
                if resource.leases.is_empty() {
                    text.push_str("\nfree");
                }
                for lease in &resource.leases {
                    text.push('\n');
                    text.push_str(&lease_text(lease));
                }
                text
            });
            Ok(ExitCode::SUCCESS)
        }
        Command::Cluster {
            command: ClusterCommand::Status,
        } => cluster_status(out, client).await,
        Command::Bench { count, prefix } => bench(out, client, *count, prefix).await,
    }
}

async fn cluster_status(out: Output, client: &Client) -> Result<ExitCode, Error> {
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
    print(out, &value, || {
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

async fn bench(out: Output, client: &Client, count: u32, prefix: &str) -> Result<ExitCode, Error> {
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
    print(out, &value, || {
        format!(
            "{count} acquire+release cycles in {elapsed:.1}s ({:.0}/s)\nacquire  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms\nrelease  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            count as f64 / elapsed,
            ms(&acquire, 0.5), ms(&acquire, 0.99), acquire.max() as f64 / 1000.0,
            ms(&release, 0.5), ms(&release, 0.99), release.max() as f64 / 1000.0,
        )
    });
    Ok(ExitCode::SUCCESS)
}

fn lease_json(lease: &pb::Lease) -> Value {
    json!({
        "lease_id": lease.lease_id,
        "resource": lease.resource,
        "holder": lease.holder,
        "principal": lease.principal,
        "fencing_token": lease.fencing_token,
        "status": pb::LeaseStatus::try_from(lease.status).map(|s| s.as_str_name()).unwrap_or("UNKNOWN"),
        "acquired_at": lease.acquired_at.as_ref().map(|t| t.to_string()),
        "expires_at": lease.expires_at.as_ref().map(|t| t.to_string()),
        "ttl_ms": lease.ttl.as_ref().map(|d| tenure_client::from_prost_duration(d).as_millis() as u64),
        "remaining_ms": lease.remaining.as_ref().map(|d| tenure_client::from_prost_duration(d).as_millis() as u64),
        "metadata": lease.metadata,
    })
}

fn lease_text(lease: &pb::Lease) -> String {
    let status = pb::LeaseStatus::try_from(lease.status)
        .map(|s| s.as_str_name())
        .unwrap_or("UNKNOWN");
    let remaining = lease
        .remaining
        .as_ref()
        .map(tenure_client::from_prost_duration)
        .unwrap_or_default();
    format!(
        "  holder {}  fencing_token {}  lease_id {}  status {}  expires in {}",
        lease.holder,
        lease.fencing_token,
        lease.lease_id,
        status.trim_start_matches("LEASE_STATUS_"),
        humantime::format_duration(Duration::from_millis(remaining.as_millis() as u64))
    )
}

fn print_lease(out: Output, verb: &str, lease: Option<&pb::Lease>) {
    let value = json!({"ok": true, "lease": lease.map(lease_json)});
    print(out, &value, || {
        format!("{verb}\n{}", lease.map(lease_text).unwrap_or_default())
    });
}
