//! The paged reads: `tenure leases` (what a holder or principal holds) and `tenure history`
//! (a resource's events), with the paging flags `resources list` shares.

use std::future::Future;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use tenure_client::{pb, Client, Error};

use crate::consistency;
use crate::output::{self, Output};

/// `--page-size`, `--page-token`, `--all`.
#[derive(Args)]
pub struct Paging {
    /// Items per page, 1..1000 (default: the server's, 100).
    #[arg(long)]
    page_size: Option<u32>,
    /// Start at this page: a previous answer's next_page_token.
    #[arg(long)]
    page_token: Option<String>,
    /// Follow next_page_token to the last page.
    #[arg(long)]
    all: bool,
}

/// One page, or every page from `--page-token` on with `--all`.
pub struct Page<T> {
    pub items: Vec<T>,
    /// Empty on the last page.
    pub next_page_token: String,
    /// The applied index the (last) page was read at.
    pub read_revision: u64,
}

impl Paging {
    /// Calls `fetch(page_size, page_token)` once, or until the last page with `--all`.
    pub async fn collect<T, F, Fut>(&self, mut fetch: F) -> Result<Page<T>, Error>
    where
        F: FnMut(u32, String) -> Fut,
        Fut: Future<Output = Result<Page<T>, Error>>,
    {
        let mut items = Vec::new();
        let mut page_token = self.page_token.clone().unwrap_or_default();
        loop {
            let mut page = fetch(self.page_size.unwrap_or(0), page_token.clone()).await?;
            items.append(&mut page.items);
            if !self.all || page.next_page_token.is_empty() {
                return Ok(Page { items, ..page });
            }
            if page.next_page_token == page_token {
                return Err(Error::Local(format!(
                    "the server answered page token {page_token} with itself"
                )));
            }
            page_token = page.next_page_token;
        }
    }
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("who").required(true).multiple(true))]
pub struct LeasesArgs {
    /// Live leases of this holder.
    #[arg(long, group = "who")]
    holder: Option<String>,
    /// Live leases of this principal (both: leases matching both).
    #[arg(long, group = "who")]
    principal: Option<String>,
    #[command(flatten)]
    paging: Paging,
    /// Read a node's local state instead of a linearizable read.
    #[arg(long)]
    stale: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Order {
    Asc,
    Desc,
}

#[derive(Args)]
pub struct HistoryArgs {
    resource: String,
    #[command(flatten)]
    paging: Paging,
    /// Oldest first (asc) or newest first (desc, the default).
    #[arg(long, value_enum)]
    order: Option<Order>,
    /// Only these events, e.g. acquired,released,transferred (SPEC §4.11 names).
    #[arg(long, value_delimiter = ',', value_parser = event_type)]
    events: Vec<pb::EventType>,
    /// Read a node's local state instead of a linearizable read.
    #[arg(long)]
    stale: bool,
}

/// `acquired` → `EventType::Acquired`: the proto names, lower case, without the prefix.
pub fn event_type(name: &str) -> Result<pb::EventType, String> {
    pb::EventType::from_str_name(&format!("EVENT_TYPE_{}", name.to_uppercase()))
        .filter(|e| *e != pb::EventType::Unspecified)
        .ok_or_else(|| {
            let known: Vec<String> = (1..)
                .map_while(|i| pb::EventType::try_from(i).ok())
                .map(|e| output::event_text(e as i32))
                .collect();
            format!("unknown event {name:?} (one of {})", known.join(", "))
        })
}

pub async fn leases(out: Output, client: &Client, args: &LeasesArgs) -> Result<ExitCode, Error> {
    let page = args
        .paging
        .collect(|page_size, page_token| async move {
            let response = client
                .list_leases(pb::ListLeasesRequest {
                    holder: args.holder.clone().unwrap_or_default(),
                    principal: args.principal.clone().unwrap_or_default(),
                    page_size,
                    page_token,
                    consistency: consistency(args.stale) as i32,
                })
                .await?;
            Ok(Page {
                items: response.leases,
                next_page_token: response.next_page_token,
                read_revision: response.read_revision,
            })
        })
        .await?;
    output::print_page(out, "leases", &page, output::lease_json, output::lease_text);
    Ok(ExitCode::SUCCESS)
}

pub async fn history(out: Output, client: &Client, args: &HistoryArgs) -> Result<ExitCode, Error> {
    let order = match args.order {
        None => pb::Order::Unspecified,
        Some(Order::Asc) => pb::Order::Asc,
        Some(Order::Desc) => pb::Order::Desc,
    };
    let page = args
        .paging
        .collect(|page_size, page_token| async move {
            let response = client
                .history(pb::HistoryRequest {
                    resource: args.resource.clone(),
                    page_size,
                    page_token,
                    order: order as i32,
                    events: args.events.iter().map(|e| *e as i32).collect(),
                    consistency: consistency(args.stale) as i32,
                })
                .await?;
            Ok(Page {
                items: response.entries,
                next_page_token: response.next_page_token,
                read_revision: response.read_revision,
            })
        })
        .await?;
    output::print_page(
        out,
        "entries",
        &page,
        output::history_entry_json,
        output::history_entry_text,
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_by_their_spec_names() {
        assert_eq!(event_type("acquired"), Ok(pb::EventType::Acquired));
        assert_eq!(
            event_type("wait_timed_out"),
            Ok(pb::EventType::WaitTimedOut)
        );
        let unknown = event_type("unspecified").expect_err("not an event");
        assert!(unknown.contains("registered, acquired"), "{unknown}");
    }
}
