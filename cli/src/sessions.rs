//! `tenure session create|keepalive|close|get|list` (SPEC §4.24): one heartbeat for many
//! leases. `tenure acquire --session` takes a lease on one.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tenure_client::{from_prost_duration, pb, prost_duration, Client, Error};

use crate::consistency;
use crate::listing::{Page, Paging};
use crate::output::{self, Output};

#[derive(Subcommand)]
pub enum SessionCommand {
    /// Start a session for a holder; prints its id (ses_<n>) for `acquire --session`.
    Create(CreateArgs),
    /// Renew SESSION every ttl/3 until Ctrl-C, or once with --once; exit 1 when it is lost
    /// (every lease on it is then lost too).
    Keepalive {
        session_id: String,
        /// Renew once and exit.
        #[arg(long)]
        once: bool,
    },
    /// End SESSION: every lease on it released, every wait cancelled, at once.
    Close {
        session_id: String,
        /// Reuse to retry a call exactly once (default: a fresh one).
        #[arg(long, default_value = "")]
        request_id: String,
    },
    /// Show SESSION and its first leases.
    Get {
        session_id: String,
        /// Read a node's local state instead of a linearizable read.
        #[arg(long)]
        stale: bool,
    },
    /// The live sessions of a principal and/or holder (all with neither).
    List(ListArgs),
}

#[derive(Args)]
pub struct CreateArgs {
    #[arg(long)]
    holder: String,
    /// How long the session lives without a renewal, e.g. 30s (default: the cluster's ad-hoc
    /// default ttl).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    ttl: Option<Duration>,
    /// KEY=VALUE stored with the session; repeatable.
    #[arg(long, value_parser = crate::leases::key_value)]
    metadata: Vec<(String, String)>,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[arg(long)]
    principal: Option<String>,
    #[arg(long)]
    holder: Option<String>,
    #[command(flatten)]
    paging: Paging,
    /// Read a node's local state instead of a linearizable read.
    #[arg(long)]
    stale: bool,
}

impl SessionCommand {
    /// Whether it answers at once (a keepalive loop runs until Ctrl-C).
    pub fn answers_at_once(&self) -> bool {
        !matches!(self, SessionCommand::Keepalive { once: false, .. })
    }
}

pub async fn run(
    out: Output,
    client: &Client,
    command: &SessionCommand,
) -> Result<ExitCode, Error> {
    match command {
        SessionCommand::Create(args) => {
            let response = client
                .create_session(pb::CreateSessionRequest {
                    holder: args.holder.clone(),
                    ttl: args.ttl.map(prost_duration),
                    metadata: args.metadata.iter().cloned().collect::<HashMap<_, _>>(),
                    request_id: args.request_id.clone(),
                })
                .await?;
            print_session(out, "created", response.session.as_ref());
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Keepalive { session_id, once } => {
            keepalive(out, client, session_id, *once).await
        }
        SessionCommand::Close {
            session_id,
            request_id,
        } => {
            let request = pb::CloseSessionRequest {
                session_id: session_id.clone(),
                request_id: request_id.clone(),
            };
            let response = client.close_session_with(request).await?;
            print_session(out, "closed", response.session.as_ref());
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Get { session_id, stale } => {
            let response = client
                .get_session(pb::GetSessionRequest {
                    session_id: session_id.clone(),
                    consistency: consistency(*stale) as i32,
                })
                .await?;
            print_session(out, "session", response.session.as_ref());
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::List(args) => {
            let page = args
                .paging
                .collect(|page_size, page_token| async move {
                    let response = client
                        .list_sessions(pb::ListSessionsRequest {
                            principal: args.principal.clone().unwrap_or_default(),
                            holder: args.holder.clone().unwrap_or_default(),
                            page_size,
                            page_token,
                            consistency: consistency(args.stale) as i32,
                        })
                        .await?;
                    Ok(Page {
                        items: response.sessions,
                        next_page_token: response.next_page_token,
                        read_revision: response.read_revision,
                    })
                })
                .await?;
            output::print_page(out, "sessions", &page, session_json, session_line);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Renews every ttl/3 (the session's own ttl) until the session is lost or Ctrl-C.
async fn keepalive(
    out: Output,
    client: &Client,
    session_id: &str,
    once: bool,
) -> Result<ExitCode, Error> {
    loop {
        let session = match client.renew_session(session_id).await {
            Ok(response) => response.session,
            Err(error) if !error.is_retryable() => {
                output::fail(out, &error);
                return Ok(ExitCode::from(1));
            }
            Err(error) => return Err(error),
        };
        print_session(out, "renewed", session.as_ref());
        let ttl = session
            .as_ref()
            .and_then(|s| s.ttl.as_ref())
            .map(from_prost_duration)
            .unwrap_or(Duration::from_secs(3));
        if once {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(ttl / 3).await;
    }
}

fn print_session(out: Output, verb: &str, session: Option<&pb::Session>) {
    let value = json!({"ok": true, "session": session.map(session_json)});
    output::print(out, &value, || match session {
        Some(session) => {
            let leases = session.leases.iter().map(output::lease_text);
            std::iter::once(format!("{verb}\n{}", session_line(session)))
                .chain(leases)
                .collect::<Vec<_>>()
                .join("\n")
        }
        None => verb.to_string(),
    });
}

pub fn session_json(session: &pb::Session) -> Value {
    json!({
        "session_id": session.session_id,
        "holder": session.holder,
        "principal": session.principal,
        "ttl_ms": output::millis(&session.ttl),
        "created_at": output::instant(&session.created_at),
        "expires_at": output::instant(&session.expires_at),
        "remaining_ms": output::millis(&session.remaining),
        "status": pb::SessionStatus::try_from(session.status)
            .map_or("UNKNOWN", |s| s.as_str_name()),
        "metadata": session.metadata,
        "lease_count": session.lease_count,
        "wait_count": session.wait_count,
        "leases": session.leases.iter().map(output::lease_json).collect::<Vec<_>>(),
    })
}

/// `ses_12  holder H  principal P  status ACTIVE  ttl 30s  expires in 29s  leases N  waits M`.
pub fn session_line(session: &pb::Session) -> String {
    let status = pb::SessionStatus::try_from(session.status)
        .map_or("UNKNOWN", |s| s.as_str_name())
        .trim_start_matches("SESSION_STATUS_");
    format!(
        "  {}  holder {}  principal {}  status {status}  ttl {}  expires in {}  leases {}  waits {}",
        session.session_id,
        session.holder,
        session.principal,
        output::human(&session.ttl),
        output::human(&session.remaining),
        session.lease_count,
        session.wait_count,
    )
}
