//! `tenure watch`: the events of a resource or of every resource under a prefix, retained
//! history first, then live, one line (or JSON object) each. When a node fails, the watch
//! resumes on another from the last revision it printed: no gap, no duplicate.

use std::process::ExitCode;

use clap::Args;
use futures::StreamExt;
use tenure_client::{pb, Client, Error};

use crate::listing::event_type;
use crate::output::{self, Output};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("scope").required(true))]
pub struct WatchArgs {
    /// The resource to watch.
    #[arg(group = "scope")]
    resource: Option<String>,
    /// Watch every resource whose name starts with this ("" for all).
    #[arg(long, group = "scope")]
    prefix: Option<String>,
    /// Start after this revision (default: the oldest retained event).
    #[arg(long, conflicts_with = "live")]
    from_revision: Option<u64>,
    /// Only events from now on: skip the retained history.
    #[arg(long)]
    live: bool,
    /// Only these events, e.g. acquired,released,admitted (SPEC §4.11 names).
    #[arg(long, value_delimiter = ',', value_parser = event_type)]
    events: Vec<pb::EventType>,
    /// Exit 0 after this many events (default: run until interrupted).
    #[arg(long)]
    count: Option<u64>,
}

pub async fn watch(out: Output, client: &Client, args: &WatchArgs) -> Result<ExitCode, Error> {
    let request = pb::WatchRequest {
        resource: args.resource.clone().unwrap_or_default(),
        prefix: args.prefix.clone().unwrap_or_default(),
        start_revision: args.from_revision.unwrap_or(0),
        events: args.events.iter().map(|e| *e as i32).collect(),
        live_only: args.live,
    };
    let mut printed = 0;
    if args.count == Some(0) {
        return Ok(ExitCode::SUCCESS);
    }
    let mut messages = client.watch_resuming(request);
    while let Some(message) = messages.next().await {
        for entry in message?.events {
            output::print(out, &output::history_entry_json(&entry), || {
                format!(
                    "{}  {}",
                    entry.resource,
                    output::history_entry_text(&entry).trim_start()
                )
            });
            printed += 1;
            if args.count.is_some_and(|count| printed >= count) {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    Err(Error::Local("the watch ended".into()))
}
