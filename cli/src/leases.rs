//! The verbs on one lease: acquire, renew, release, transfer, validate.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use tenure_client::{pb, prost_duration, Client, Error};

use crate::output::{self, Output};
use crate::Mode;

#[derive(Args)]
pub struct AcquireArgs {
    resource: String,
    #[arg(long)]
    holder: String,
    #[arg(long, default_value = "")]
    idempotency_key: String,
    #[command(flatten)]
    pub terms: AcquireTerms,
}

#[derive(Args)]
pub struct AcquireManyArgs {
    /// The resources, all granted together or none (at most 64, each once).
    #[arg(required = true)]
    resources: Vec<String>,
    #[arg(long)]
    holder: String,
    #[command(flatten)]
    pub terms: AcquireTerms,
}

/// What `acquire` and `acquire-many` ask of every lease.
#[derive(Args)]
pub struct AcquireTerms {
    /// Lease ttl, e.g. 30s or 2h (default: the resource policy's).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    ttl: Option<Duration>,
    /// Exclusive (default), or a shared mode the policy lists.
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Units a shared lease draws from the pool (default 1).
    #[arg(long)]
    units: Option<u64>,
    /// KEY=VALUE stored with the lease; repeatable.
    #[arg(long, value_parser = key_value)]
    metadata: Vec<(String, String)>,
    /// Queue when a resource is taken (in every resource's waiting room) and block until
    /// granted or this long has passed (e.g. 10s); exit 1 with the place in the queue if the
    /// wait ends first.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    pub wait: Option<Duration>,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
    /// Hold the lease on this session (`ses_<n>`, from `tenure session create`) instead of a
    /// ttl of its own: it lives while the session lives.
    #[arg(long, default_value = "", conflicts_with = "ttl")]
    session: String,
}

impl AcquireTerms {
    fn mode(&self) -> i32 {
        self.mode.map_or(pb::LeaseMode::Unspecified, Mode::pb) as i32
    }

    fn metadata(&self) -> HashMap<String, String> {
        self.metadata.iter().cloned().collect()
    }

    /// Without a wait: answered at once.
    pub fn answers_at_once(&self) -> bool {
        self.wait.is_none_or(|wait| wait.is_zero())
    }

    /// WAIT unless `--wait` is absent or zero.
    fn on_conflict(&self) -> i32 {
        match self.wait {
            Some(wait) if !wait.is_zero() => pb::OnConflict::Wait as i32,
            _ => pb::OnConflict::Unspecified as i32,
        }
    }
}

#[derive(Args)]
pub struct CancelWaitArgs {
    resource: String,
    /// The waiting holder.
    #[arg(long)]
    holder: String,
    /// Only the wait queued at this revision (a waiter's `queued_revision`), not a newer one
    /// of the same holder.
    #[arg(long, value_name = "REVISION", value_parser = clap::value_parser!(u64).range(1..))]
    queued_revision: Option<u64>,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
}

/// The lease a renew, release or transfer names: its holder and current fencing token.
#[derive(Args)]
pub struct LeaseRef {
    resource: String,
    #[arg(long)]
    holder: String,
    /// The lease's current fencing token.
    #[arg(long)]
    token: u64,
    #[arg(long, default_value = "")]
    lease_id: String,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
}

#[derive(Args)]
pub struct RenewArgs {
    #[command(flatten)]
    lease: LeaseRef,
    /// New ttl from now (default: the lease's last ttl).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    ttl: Option<Duration>,
}

#[derive(Args)]
pub struct TransferArgs {
    #[command(flatten)]
    lease: LeaseRef,
    /// The holder that takes the lease over, with a new fencing token.
    #[arg(long)]
    to_holder: String,
    /// The principal the lease moves to, an admin's call (default: it keeps its principal).
    #[arg(long, default_value = "")]
    to_principal: String,
}

#[derive(Args)]
pub struct ValidateArgs {
    resource: String,
    #[arg(long, default_value_t = 0)]
    token: u64,
    #[arg(long, default_value = "")]
    lease_id: String,
    /// With --fsm-transition: the policy must list this (machine, transition).
    #[arg(long, default_value = "", requires = "fsm_transition")]
    fsm_machine: String,
    #[arg(long, default_value = "", requires = "fsm_machine")]
    fsm_transition: String,
}

pub fn key_value(pair: &str) -> Result<(String, String), String> {
    pair.split_once('=')
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))
}

pub async fn acquire(out: Output, client: &Client, args: &AcquireArgs) -> Result<ExitCode, Error> {
    let terms = &args.terms;
    let response = client
        .acquire(pb::AcquireRequest {
            resource: args.resource.clone(),
            holder: args.holder.clone(),
            ttl: terms.ttl.map(prost_duration),
            mode: terms.mode(),
            units: terms.units.unwrap_or(0),
            metadata: terms.metadata(),
            idempotency_key: args.idempotency_key.clone(),
            on_conflict: terms.on_conflict(),
            wait_timeout: terms.wait.map(prost_duration),
            request_id: terms.request_id.clone(),
            session_id: terms.session.clone(),
        })
        .await?;
    let value = json!({
        "granted": response.granted,
        "reason": response.reason,
        "lease": response.lease.as_ref().map(output::lease_json),
        "holders": response.holders.iter().map(output::lease_json).collect::<Vec<_>>(),
        "queue_position": response.queue_position,
        "booked_from": output::instant(&response.booked_from),
        "closed_until": output::instant(&response.closed_until),
    });
    output::print(out, &value, || match &response.lease {
        Some(lease) if response.granted => format!("granted\n{}", output::lease_text(lease)),
        _ => {
            let mut why = response.reason.clone();
            if response.queue_position > 0 {
                why.push_str(&format!(" (queue position {})", response.queue_position));
            }
            if let Some(start) = output::instant(&response.booked_from) {
                why.push_str(&format!(" (booked from {start})"));
            }
            if let Some(until) = output::instant(&response.closed_until) {
                why.push_str(&format!(" (closed until {until})"));
            }
            let lines = std::iter::once(format!("not granted: {why}"))
                .chain(response.holders.iter().map(output::lease_text));
            lines.collect::<Vec<_>>().join("\n")
        }
    });
    Ok(output::answered(response.granted))
}

/// `tenure acquire-many`: every resource in one entry, or none (SPEC §4.25).
pub async fn acquire_many(
    out: Output,
    client: &Client,
    args: &AcquireManyArgs,
) -> Result<ExitCode, Error> {
    let terms = &args.terms;
    let response = client
        .acquire_many(pb::AcquireManyRequest {
            holder: args.holder.clone(),
            claims: args
                .resources
                .iter()
                .map(|resource| pb::ResourceClaim {
                    resource: resource.clone(),
                    mode: terms.mode(),
                    units: terms.units.unwrap_or(0),
                })
                .collect(),
            ttl: terms.ttl.map(prost_duration),
            metadata: terms.metadata(),
            on_conflict: terms.on_conflict(),
            wait_timeout: terms.wait.map(prost_duration),
            request_id: terms.request_id.clone(),
            session_id: terms.session.clone(),
        })
        .await?;
    let claims: Vec<_> = response
        .claims
        .iter()
        .map(|claim| {
            json!({
                "resource": claim.resource,
                "reason": claim.reason,
                "holders": claim.holders.iter().map(output::lease_json).collect::<Vec<_>>(),
                "queue_position": claim.queue_position,
                "booked_from": output::instant(&claim.booked_from),
            })
        })
        .collect();
    let value = json!({
        "granted": response.granted,
        "reason": response.reason,
        "leases": response.leases.iter().map(output::lease_json).collect::<Vec<_>>(),
        "claims": claims,
    });
    output::print(out, &value, || {
        if response.granted {
            let token = response.leases.first().map_or(0, |l| l.fencing_token);
            let head = format!(
                "granted {} leases, fencing token {token}",
                response.leases.len()
            );
            let lines = std::iter::once(head).chain(response.leases.iter().map(output::lease_text));
            return lines.collect::<Vec<_>>().join("\n");
        }
        let mut lines = vec![format!("not granted: {}", response.reason)];
        for claim in &response.claims {
            let mut why = match claim.reason.as_str() {
                "" => "would fit".to_string(),
                reason => reason.to_string(),
            };
            if claim.queue_position > 0 {
                why.push_str(&format!(" (queue position {})", claim.queue_position));
            }
            lines.push(format!("{}: {why}", claim.resource));
            lines.extend(
                claim
                    .holders
                    .iter()
                    .map(|l| format!("  {}", output::lease_text(l))),
            );
        }
        lines.join("\n")
    });
    Ok(output::answered(response.granted))
}

pub async fn cancel_wait(
    out: Output,
    client: &Client,
    args: &CancelWaitArgs,
) -> Result<ExitCode, Error> {
    let response = client
        .cancel_wait(pb::CancelWaitRequest {
            resource: args.resource.clone(),
            holder: args.holder.clone(),
            request_id: args.request_id.clone(),
            queued_revision: args.queued_revision.unwrap_or(0),
        })
        .await?;
    let value = json!({"cancelled": response.cancelled, "revision": response.revision});
    output::print(out, &value, || {
        if response.cancelled {
            format!(
                "cancelled the wait of {} at revision {}",
                args.holder, response.revision
            )
        } else {
            format!("{} was not waiting for {}", args.holder, args.resource)
        }
    });
    Ok(output::answered(response.cancelled))
}

pub async fn renew(out: Output, client: &Client, args: &RenewArgs) -> Result<ExitCode, Error> {
    let lease = &args.lease;
    let response = client
        .renew(pb::RenewRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder: lease.holder.clone(),
            fencing_token: lease.token,
            ttl: args.ttl.map(prost_duration),
            request_id: lease.request_id.clone(),
            ..Default::default()
        })
        .await?;
    output::print_lease(out, "renewed", response.lease.as_ref());
    Ok(ExitCode::SUCCESS)
}

pub async fn release(out: Output, client: &Client, lease: &LeaseRef) -> Result<ExitCode, Error> {
    let response = client
        .release(pb::ReleaseRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder: lease.holder.clone(),
            fencing_token: lease.token,
            request_id: lease.request_id.clone(),
        })
        .await?;
    output::print_lease(out, "released", response.lease.as_ref());
    Ok(ExitCode::SUCCESS)
}

pub async fn transfer(
    out: Output,
    client: &Client,
    args: &TransferArgs,
) -> Result<ExitCode, Error> {
    let lease = &args.lease;
    let response = client
        .transfer(pb::TransferRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder: lease.holder.clone(),
            fencing_token: lease.token,
            to_holder: args.to_holder.clone(),
            to_principal: args.to_principal.clone(),
            request_id: lease.request_id.clone(),
        })
        .await?;
    output::print_lease(out, "transferred", response.lease.as_ref());
    Ok(ExitCode::SUCCESS)
}

pub async fn validate(
    out: Output,
    client: &Client,
    args: &ValidateArgs,
) -> Result<ExitCode, Error> {
    let response = client
        .validate(pb::ValidateRequest {
            resource: args.resource.clone(),
            lease_id: args.lease_id.clone(),
            fencing_token: args.token,
            fsm_machine: args.fsm_machine.clone(),
            fsm_transition: args.fsm_transition.clone(),
            ..Default::default()
        })
        .await?;
    let value = json!({
        "valid": response.valid,
        "reason": response.reason,
        "lease": response.lease.as_ref().map(output::lease_json),
    });
    output::print(out, &value, || {
        format!(
            "{}: {}",
            if response.valid { "valid" } else { "not valid" },
            response.reason
        )
    });
    Ok(output::answered(response.valid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_key_equals_value() {
        assert_eq!(key_value("zone=eu=1"), Ok(("zone".into(), "eu=1".into())));
        assert_eq!(key_value("empty="), Ok(("empty".into(), String::new())));
        assert!(key_value("=v").is_err());
        assert!(key_value("zone").is_err());
    }
}
