//! Cluster harnesses for Tenure's integration tests: an in-process cluster (every node a
//! task in the test's runtime, on port 0, data in a temp dir) and a process-level cluster
//! of real `tenured` binaries that can be killed with SIGKILL. Both clean up on drop. On top
//! of them, the fixtures most tests start from ([`started`], [`secure`]) and [`cli::Cli`], the
//! one runner of the `tenure` binary.

pub mod cli;
pub mod http;
pub mod in_process;
pub mod process;
pub mod scenario;
mod started;

pub use started::{secure, started, started_with, ADMIN, ALICE, BOB, ELECTION, PEER};

use std::time::Duration;

pub use tenure_client::release_request;
use tenure_client::{pb, Client};

/// The ids of a cluster of `n` nodes: 1..=n.
pub fn ids(n: u64) -> Vec<u64> {
    (1..=n).collect()
}

/// The same extra flags for every node of a cluster of `n`.
pub fn same_flags<S: AsRef<str>>(
    n: u64,
    flags: &[S],
) -> std::collections::BTreeMap<u64, Vec<String>> {
    let flags: Vec<String> = flags.iter().map(|f| f.as_ref().to_string()).collect();
    ids(n).into_iter().map(|id| (id, flags.clone())).collect()
}

/// Writes a secret (a token file) readable by its owner only, as a node requires.
pub fn write_secret(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write the secret");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

/// `1=addr,2=addr,…`
pub fn peers_arg(addrs: &std::collections::BTreeMap<u64, String>) -> String {
    addrs
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads `resource` linearizably through `client`.
pub async fn get_resource(
    client: &Client,
    resource: &str,
) -> Result<pb::Resource, tenure_client::Error> {
    let response = client
        .get_resource(pb::GetResourceRequest {
            name: resource.into(),
            consistency: 0,
        })
        .await?;
    Ok(response.resource.unwrap_or_default())
}

/// Registers `name` with `policy` through `client`; panics unless it is registered.
pub async fn register(client: &Client, name: &str, policy: pb::Policy) {
    client
        .create_resource(pb::CreateResourceRequest {
            name: name.into(),
            policy: Some(policy),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("register {name}: {e}"));
}

/// A linearizable read of session `session_id`, which must be live.
pub async fn get_session(client: &Client, session_id: &str) -> pb::Session {
    client
        .get_session(pb::GetSessionRequest {
            session_id: session_id.into(),
            consistency: 0,
        })
        .await
        .expect("get session")
        .session
        .expect("the session")
}

/// Closes session `session_id`, which must be live; its last view.
pub async fn close_session(client: &Client, session_id: &str) -> pb::Session {
    client
        .close_session(session_id)
        .await
        .expect("close")
        .session
        .expect("the session")
}

/// An acquire request with a ttl.
pub fn acquire_request(resource: &str, holder: &str, ttl: Duration) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: holder.into(),
        ttl: Some(tenure_client::prost_duration(ttl)),
        ..Default::default()
    }
}

/// Acquires `resource` for `holder`; panics (naming the resource) unless granted.
pub async fn granted(client: &Client, resource: &str, holder: &str, ttl: Duration) -> pb::Lease {
    let reply = client
        .acquire(acquire_request(resource, holder, ttl))
        .await
        .unwrap_or_else(|e| panic!("acquire {resource}: {e}"));
    assert!(reply.granted, "acquire {resource}: {reply:?}");
    reply.lease.expect("a granted lease")
}

/// A watch of `prefix`, from after `start_revision` (0: the retained history first).
pub async fn watch(
    client: &Client,
    prefix: &str,
    start_revision: u64,
) -> tonic::Streaming<pb::WatchResponse> {
    client
        .watch(pb::WatchRequest {
            prefix: prefix.into(),
            start_revision,
            ..Default::default()
        })
        .await
        .expect("watch")
}

/// The next message of a watch that must stay open.
pub async fn next_message(stream: &mut tonic::Streaming<pb::WatchResponse>) -> pb::WatchResponse {
    stream
        .message()
        .await
        .expect("a watch message")
        .expect("the watch stays open")
}

/// Reads `stream` until an event of `kind`, and returns that event.
pub async fn next_event(
    stream: &mut tonic::Streaming<pb::WatchResponse>,
    kind: pb::EventType,
) -> pb::HistoryEntry {
    loop {
        let message = next_message(stream).await;
        if let Some(e) = message.events.into_iter().find(|e| e.event == kind as i32) {
            return e;
        }
    }
}

/// The next `n` events of `kind`, across as many messages as they come in (one entry's
/// events on several resources come in one message).
pub async fn next_events(
    stream: &mut tonic::Streaming<pb::WatchResponse>,
    kind: pb::EventType,
    n: usize,
) -> Vec<pb::HistoryEntry> {
    let mut found = Vec::with_capacity(n);
    while found.len() < n {
        let message = next_message(stream).await;
        found.extend(
            message
                .events
                .into_iter()
                .filter(|e| e.event == kind as i32),
        );
    }
    found
}

/// Asserts that a call failed with `code` and the SPEC §3 `reason`.
#[track_caller]
pub fn refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, tenure_client::Error>,
    code: tonic::Code,
    reason: &str,
) {
    match result {
        Ok(reply) => panic!("{what}: accepted ({reply:?}); expected {reason}"),
        Err(tenure_client::Error::Status {
            code: got_code,
            reason: got_reason,
            message,
        }) => assert_eq!(
            (got_code, got_reason.as_str()),
            (code, reason),
            "{what}: {message}"
        ),
        Err(other) => panic!("{what}: {other}"),
    }
}

/// Logs for a failing test: `RUST_LOG=debug cargo test …`.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,openraft=error".into()),
        )
        .with_test_writer()
        .try_init();
}
