//! `tenure resources create|get|list`: registered resources and their policies.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;
use tenure_client::{pb, prost_duration, Client, Error};

use crate::listing::{Page, Paging};
use crate::output::{self, Output};
use crate::{consistency, Mode};

#[derive(Subcommand)]
pub enum ResourcesCommand {
    /// Register a resource with a policy (admin only). Unset policy fields take the
    /// registered defaults: default ttl 1h, max ttl 24h, renewal grace 60s.
    Create(CreateArgs),
    /// Show a resource: policy and active leases (linearizable unless --stale).
    Get {
        name: String,
        /// Read a node's local state instead of a linearizable read.
        #[arg(long)]
        stale: bool,
    },
    /// List registered resources and the ad-hoc ones the cluster still knows, by name.
    List {
        #[arg(long, default_value = "")]
        prefix: String,
        #[command(flatten)]
        paging: Paging,
        /// Read a node's local state instead of a linearizable read.
        #[arg(long)]
        stale: bool,
    },
}

#[derive(Args)]
pub struct CreateArgs {
    /// Empty: the server names it (`res_` + the registering entry's index).
    #[arg(default_value = "")]
    name: String,
    #[arg(long, default_value = "")]
    kind: String,
    #[arg(long, default_value = "")]
    display_name: String,
    /// Ttl of an acquire that names none, e.g. 1h.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    default_ttl: Option<Duration>,
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    max_ttl: Option<Duration>,
    /// Cap from acquisition, renewals included (0s: none).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    max_lifetime: Option<Duration>,
    /// How long past expiry the holder may still renew.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    renewal_grace: Option<Duration>,
    /// After a reclaim (not a release) the resource stays closed this long.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    lock_delay: Option<Duration>,
    /// Leases may be handed to another holder (`tenure transfer`).
    #[arg(long)]
    transferable: bool,
    /// Modes whose leases coexist, e.g. read,write.
    #[arg(long, value_enum, value_delimiter = ',')]
    shared_modes: Vec<Mode>,
    /// A pool of units shared leases draw from (0: none).
    #[arg(long, default_value_t = 0)]
    total_units: u64,
    /// Holders may book windows of the resource (`tenure book`).
    #[arg(long)]
    bookable: bool,
    /// Live leases at most, for shared modes without a unit pool (0: no cap).
    #[arg(long, default_value_t = 0)]
    max_holders: u32,
    /// At most this many waiters (0: the default, 10000).
    #[arg(long, default_value_t = 0)]
    max_waiters: u32,
    /// Metadata limit per lease (0: the default, 16 KiB).
    #[arg(long, default_value_t = 0)]
    max_metadata_bytes: u32,
    /// A (machine, transition) a lease may guard, as MACHINE:TRANSITION; repeatable.
    #[arg(long = "fsm", value_parser = fsm_requirement)]
    fsm_requirements: Vec<pb::FsmRequirement>,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
}

fn fsm_requirement(pair: &str) -> Result<pb::FsmRequirement, String> {
    match pair.split_once(':') {
        Some((machine, transition)) if !machine.is_empty() && !transition.is_empty() => {
            Ok(pb::FsmRequirement {
                machine: machine.into(),
                transition: transition.into(),
            })
        }
        _ => Err(format!("{pair:?} is not MACHINE:TRANSITION")),
    }
}

pub async fn run(
    out: Output,
    client: &Client,
    command: &ResourcesCommand,
) -> Result<ExitCode, Error> {
    match command {
        ResourcesCommand::Create(args) => create(out, client, args).await,
        ResourcesCommand::Get { name, stale } => get(out, client, name, *stale).await,
        ResourcesCommand::List {
            prefix,
            paging,
            stale,
        } => {
            let page = paging
                .collect(|page_size, page_token| async move {
                    let response = client
                        .list_resources(pb::ListResourcesRequest {
                            prefix: prefix.clone(),
                            page_size,
                            page_token,
                            consistency: consistency(*stale) as i32,
                        })
                        .await?;
                    Ok(Page {
                        items: response.resources,
                        next_page_token: response.next_page_token,
                        read_revision: response.read_revision,
                    })
                })
                .await?;
            output::print_page(
                out,
                "resources",
                &page,
                output::resource_json,
                output::resource_line,
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn create(out: Output, client: &Client, args: &CreateArgs) -> Result<ExitCode, Error> {
    let policy = pb::Policy {
        default_ttl: args.default_ttl.map(prost_duration),
        max_ttl: args.max_ttl.map(prost_duration),
        max_lifetime: args.max_lifetime.map(prost_duration),
        renewal_grace: args.renewal_grace.map(prost_duration),
        transferable: args.transferable,
        shared_modes: args.shared_modes.iter().map(|m| m.pb() as i32).collect(),
        total_units: args.total_units,
        lock_delay: args.lock_delay.map(prost_duration),
        max_waiters: args.max_waiters,
        max_metadata_bytes: args.max_metadata_bytes,
        fsm_requirements: args.fsm_requirements.clone(),
        bookable: args.bookable,
        max_holders: args.max_holders,
        ..Default::default()
    };
    let response = client
        .create_resource(pb::CreateResourceRequest {
            name: args.name.clone(),
            kind: args.kind.clone(),
            display_name: args.display_name.clone(),
            policy: Some(policy),
            request_id: args.request_id.clone(),
        })
        .await?;
    let resource = response.resource.unwrap_or_default();
    let value = json!({"ok": true, "resource": output::resource_json(&resource)});
    output::print(out, &value, || {
        format!("created {}", output::resource_text(&resource))
    });
    Ok(ExitCode::SUCCESS)
}

/// `resources get` and `status`: the resource's fields with `read_revision` and `stale`.
pub async fn get(out: Output, client: &Client, name: &str, stale: bool) -> Result<ExitCode, Error> {
    let response = client
        .get_resource(pb::GetResourceRequest {
            name: name.to_string(),
            consistency: consistency(stale) as i32,
        })
        .await?;
    let resource = response.resource.unwrap_or_default();
    let mut value = output::resource_json(&resource);
    value["read_revision"] = json!(response.read_revision);
    value["stale"] = json!(response.stale);
    output::print(out, &value, || {
        let stale = if response.stale { " (stale)" } else { "" };
        format!(
            "{}\n  read at revision {}{stale}",
            output::resource_text(&resource),
            response.read_revision
        )
    });
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fsm_requirement_is_machine_colon_transition() {
        let r = fsm_requirement("deploy:promote").expect("valid");
        assert_eq!(
            (r.machine.as_str(), r.transition.as_str()),
            ("deploy", "promote")
        );
        assert!(fsm_requirement("deploy").is_err());
        assert!(fsm_requirement(":promote").is_err());
    }
}
