//! The watchers and the read of what the cluster recorded.
//!
//! A watcher keeps a `Watch` stream open on a random node for the whole run. Whenever the
//! stream ends — the node was killed, paused or cut off (nothing arrives for [`IDLE`]), the
//! node answered `compacted`, or the watcher moves on its own after a while — it opens another
//! on a different node, from the last revision it was told every event up to had been sent
//! (after `compacted`, from just before the oldest revision still retained). Every message is
//! recorded with its session, for the watch checker.
//!
//! After the run, [`read_events`] reads every resource's whole history (ascending, every page,
//! linearizable): what the watchers were sent must be exactly that, and the waiting-room rules
//! are checked on it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;
use tenure_client::{pb, Client, Error};
use tokio::sync::watch;
use tokio::time::Instant;
use tonic_types::StatusExt;

use super::{client_rng, Env};
use crate::history::{
    now_ns, Event, EventKind, SessionEnd, WatchMessage, WatchScope, WatchSession,
};

/// A stream that sends nothing this long is given up (an idle watch reports progress every
/// second).
const IDLE: Duration = Duration::from_secs(3);
/// A watcher moves to another node after this long on one, at the most.
const STAY_MS: std::ops::RangeInclusive<u64> = 3_000..=15_000;
/// Pages of `History` and `ListResources` reads.
const PAGE_SIZE: u32 = 1000;

/// Watcher `watcher` (1-based) of `scope` until `stop`: its sessions, in order.
pub async fn watch_loop(
    env: Arc<Env>,
    watcher: u64,
    scope: WatchScope,
    seed: u64,
    mut stop: watch::Receiver<bool>,
) -> Vec<WatchSession> {
    let mut rng = client_rng(seed, watcher, 2);
    let nodes = env.per_node.len() as u64;
    let mut sessions = Vec::new();
    let mut node = rng.random_range(1..=nodes);
    let mut resume = 0;
    while !*stop.borrow() {
        let session = session(&env, watcher, &scope, (node, resume), &mut rng, &mut stop).await;
        resume = match session.end {
            // Never back: a node that answered `compacted` below the cursor would loop.
            SessionEnd::Compacted { oldest_revision } => {
                oldest_revision.saturating_sub(1).max(session.covered())
            }
            _ => session.covered(),
        };
        let failed = matches!(session.end, SessionEnd::Error { .. });
        sessions.push(session);
        if nodes > 1 {
            node = (node + rng.random_range(1..nodes) - 1) % nodes + 1;
        }
        if failed {
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..300))).await;
        }
    }
    sessions
}

/// One stream on `node` from `start_revision`, until it ends, the watcher moves on, or `stop`.
async fn session(
    env: &Env,
    watcher: u64,
    scope: &WatchScope,
    (node, start_revision): (u64, u64),
    rng: &mut SmallRng,
    stop: &mut watch::Receiver<bool>,
) -> WatchSession {
    let mut session = WatchSession {
        watcher,
        scope: scope.clone(),
        node,
        start_revision,
        opened_ns: now_ns(),
        closed_ns: 0,
        messages: Vec::new(),
        end: SessionEnd::Stopped,
    };
    let (resource, prefix) = match scope {
        WatchScope::Resource(name) => (name.clone(), String::new()),
        WatchScope::Prefix(prefix) => (String::new(), prefix.clone()),
    };
    let request = pb::WatchRequest {
        resource,
        prefix,
        start_revision,
        ..Default::default()
    };
    let client = &env.watch_per_node[(node - 1) as usize];
    let stay = Duration::from_millis(rng.random_range(STAY_MS));
    let end = tokio::select! {
        end = stream(client, request, &mut session) => end,
        _ = tokio::time::sleep(stay) => SessionEnd::Moved,
        _ = stop.wait_for(|stopped| *stopped) => SessionEnd::Stopped,
    };
    session.end = end;
    session.closed_ns = now_ns();
    session
}

/// Records the stream's messages into `session` until it ends.
async fn stream(
    client: &Client,
    request: pb::WatchRequest,
    session: &mut WatchSession,
) -> SessionEnd {
    let mut stream = match tokio::time::timeout(IDLE, client.watch(request)).await {
        Err(_) => return SessionEnd::Idle,
        Ok(Err(error)) => {
            return SessionEnd::Error {
                error: error.to_string(),
            }
        }
        Ok(Ok(stream)) => stream,
    };
    loop {
        match tokio::time::timeout(IDLE, stream.message()).await {
            Err(_) => return SessionEnd::Idle,
            Ok(Ok(Some(message))) => session.push(WatchMessage {
                at_ns: now_ns(),
                revision: message.revision,
                events: message.events.iter().map(event).collect(),
            }),
            Ok(Ok(None)) => return SessionEnd::Closed,
            Ok(Err(status)) => return ended(&status),
        }
    }
}

/// A stream's error: `compacted` with the oldest revision still retained, or another error.
fn ended(status: &tonic::Status) -> SessionEnd {
    let error = Error::from(status.clone());
    if error.reason() != Some(tenure_client::Reason::Compacted) {
        return SessionEnd::Error {
            error: error.to_string(),
        };
    }
    let oldest = status
        .get_details_error_info()
        .and_then(|info| info.metadata.get("oldest_revision")?.parse().ok());
    match oldest {
        Some(oldest_revision) => SessionEnd::Compacted { oldest_revision },
        None => SessionEnd::Error {
            error: format!("compacted without an oldest_revision: {error}"),
        },
    }
}

fn event(entry: &pb::HistoryEntry) -> Event {
    Event {
        revision: entry.revision,
        seq: entry.seq,
        resource: entry.resource.clone(),
        kind: EventKind::try_from(entry.event).unwrap_or(EventKind::Unspecified),
        holder: entry.holder.clone(),
        token: entry.fencing_token,
        to_holder: entry.to_holder.clone(),
        to_token: entry.to_fencing_token,
        session: entry.session_id.clone(),
    }
}

/// `call` until it is answered or `deadline` passes.
async fn answered<T, F, Fut>(deadline: Instant, mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    loop {
        match call().await {
            Err(error) if Instant::now() < deadline => {
                tracing::debug!(%error, "reading again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            result => return result,
        }
    }
}

/// Every resource the cluster lists, and `names`.
async fn resource_names(
    client: &Client,
    mut names: BTreeSet<String>,
    deadline: Instant,
) -> Result<BTreeSet<String>, Error> {
    let mut page_token = String::new();
    loop {
        let request = pb::ListResourcesRequest {
            prefix: String::new(),
            page_size: PAGE_SIZE,
            page_token: page_token.clone(),
            consistency: pb::Consistency::Linearizable as i32,
        };
        let page = answered(deadline, || client.list_resources(request.clone())).await?;
        names.extend(page.resources.into_iter().map(|r| r.name));
        if page.next_page_token.is_empty() {
            return Ok(names);
        }
        page_token = page.next_page_token;
    }
}

/// One resource's whole history, oldest first.
async fn history_of(
    client: &Client,
    resource: &str,
    deadline: Instant,
) -> Result<Vec<Event>, Error> {
    let mut events = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::HistoryRequest {
            resource: resource.to_owned(),
            page_size: PAGE_SIZE,
            page_token: page_token.clone(),
            order: pb::Order::Asc as i32,
            consistency: pb::Consistency::Linearizable as i32,
            ..Default::default()
        };
        let page = answered(deadline, || client.history(request.clone())).await?;
        events.extend(page.entries.iter().map(event));
        if page.next_page_token.is_empty() {
            return Ok(events);
        }
        page_token = page.next_page_token;
    }
}

/// The history of every resource the cluster lists and of each of `names`, read (until
/// `deadline`) after the run; and the resources that could not be read, with the error.
pub async fn read_events(
    client: &Client,
    names: BTreeSet<String>,
    deadline: Instant,
) -> (BTreeMap<String, Vec<Event>>, BTreeMap<String, String>) {
    let (mut events, mut unread) = (BTreeMap::new(), BTreeMap::new());
    let names = match resource_names(client, names.clone(), deadline).await {
        Ok(all) => all,
        Err(error) => {
            tracing::warn!(%error, "could not list the resources");
            names
        }
    };
    for name in names {
        match history_of(client, &name, deadline).await {
            Ok(history) => {
                events.insert(name, history);
            }
            Err(error) => {
                unread.insert(name, error.to_string());
            }
        }
    }
    (events, unread)
}
