//! What one connection, and all of them together, may hold of a node: HTTP/2 streams and
//! resets per connection, requests in flight, long-lived streams (Watch, Serve, a waiting
//! Acquire), keepalive and connection age. Each is a setting with a default sized for a
//! 2-core node, so that no client can starve the others by opening more than its share;
//! calls past a node-wide cap get `resource_exhausted` with a reason that names the cap.

mod caps;
mod read_pacer;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tenure_proto::contract::Reason;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::lease::query::MAX_PAGE_SIZE as MAX_PAGE;

/// The limit settings (flags, environment or the `--config` file).
#[derive(Clone, Debug, clap::Args)]
pub struct Limits {
    /// HTTP/2 streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS);
    /// a client that opens more gets REFUSED_STREAM. Default: 1024.
    #[arg(
        long,
        env = "TENURED_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 1024
    )]
    pub max_streams_per_connection: u32,

    /// Requests of one connection handled at once, waiting Acquires included; more wait
    /// their turn. Above --max-in-flight plus --max-open-streams by default, so that it never
    /// queues a client's Renew behind its own connection's waits. Default: 16384.
    #[arg(
        long,
        env = "TENURED_MAX_REQUESTS_PER_CONNECTION",
        default_value_t = 16_384
    )]
    pub max_requests_per_connection: usize,

    /// Client requests this node handles at once, all connections together; more are refused
    /// with `resource_exhausted` (`too_many_requests`). Peer traffic is not counted.
    /// Default: 4096.
    #[arg(long, env = "TENURED_MAX_IN_FLIGHT", default_value_t = 4096)]
    pub max_in_flight: usize,

    /// Client requests of one principal this node handles at once: a share of
    /// --max-in-flight, so that one principal (say, one that opens streams and never sends
    /// their bodies) cannot take every place. More are refused with `resource_exhausted`
    /// (`too_many_requests`). With auth off (every caller `anonymous`) it does not apply.
    /// Default: 1024.
    #[arg(
        long,
        env = "TENURED_MAX_IN_FLIGHT_PER_PRINCIPAL",
        default_value_t = 1024
    )]
    pub max_in_flight_per_principal: usize,

    /// Items (leases, resources, history events) one principal may read from this node per
    /// second: a listing costs its page size, any other read one. Past it, the principal's
    /// reads wait their turn, so that one client listing as fast as it can takes a bounded
    /// share of the node's time from everyone else. Admins (and every caller with auth off)
    /// are not paced. At least 1000, the largest page. Default: 50000.
    #[arg(
        long,
        env = "TENURED_READ_RATE_PER_PRINCIPAL",
        default_value_t = 50_000
    )]
    pub read_rate_per_principal: u32,

    /// Long-lived calls (Watch, Serve, an Acquire that waits) open on this node, all clients
    /// together; more are refused with `resource_exhausted` (`too_many_streams`).
    /// Default: 10000.
    #[arg(long, env = "TENURED_MAX_OPEN_STREAMS", default_value_t = 10_000)]
    pub max_open_streams: usize,

    /// Long-lived calls of one principal open on this node (Watch, Serve, KeepAlive, an
    /// Acquire that waits): a share of --max-open-streams, so that one principal cannot take
    /// every place. More are refused with `resource_exhausted` (`too_many_streams`). With auth
    /// off (every caller `anonymous`) it does not apply. Default: 2500.
    #[arg(
        long,
        env = "TENURED_MAX_OPEN_STREAMS_PER_PRINCIPAL",
        default_value_t = 2500
    )]
    pub max_open_streams_per_principal: usize,

    /// Health Watch and reflection streams open on this node, which answer callers without
    /// a token: a cap of their own, so that nobody without a token can take the places of
    /// Watch and Serve. More are refused with `resource_exhausted` (`too_many_streams`).
    /// Default: 256.
    #[arg(long, env = "TENURED_MAX_PUBLIC_STREAMS", default_value_t = 256)]
    pub max_public_streams: usize,

    /// Health Watch and reflection streams open on this node from one address (a member's
    /// address has no limit): a share of --max-public-streams, so that one address without a
    /// token cannot hold every place. Default: 16.
    #[arg(
        long,
        env = "TENURED_MAX_PUBLIC_STREAMS_PER_ADDRESS",
        default_value_t = 16
    )]
    pub max_public_streams_per_address: usize,

    /// Connections this node's gRPC port holds open at once, from everyone together. Past it
    /// a quiet connection that has carried no authenticated call is closed to make room, or,
    /// if there is none, the new one is closed. Lowered to what the process's open-file limit
    /// leaves room for. Default: 8192.
    #[arg(long, env = "TENURED_MAX_CONNECTIONS", default_value_t = 8192)]
    pub max_connections: usize,

    /// Connections one address may hold open at once on each of this node's ports (gRPC, the
    /// HTTP gateway, metrics): a member's address has no limit. Past it, a new connection from
    /// that address is closed. Raise it for many clients behind one address (NAT, a proxy).
    /// Default: 256.
    #[arg(
        long,
        env = "TENURED_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 256
    )]
    pub max_connections_per_address: usize,

    /// A connection that has carried no authenticated call (a known token, or a peer) is
    /// closed once it has had no call open for this long: one that never sent the HTTP/2
    /// preface or a request, one idle after its TLS handshake, one that only asks for health
    /// or the console's files. Default: 10s.
    #[arg(long, env = "TENURED_GREETING_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub greeting_timeout: Duration,

    /// A gRPC connection with no call open for this long is closed, authenticated or not:
    /// a client's channel connects again when it next calls, and nobody holds places for
    /// ever with connections that say nothing. Default: 5m.
    #[arg(long, env = "TENURED_CONNECTION_IDLE_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub connection_idle_timeout: Duration,

    /// Connections the HTTP gateway (--http-listen) holds open at once; past it the connection
    /// quiet the longest is closed to make room, or, if none is quiet, the new one. Lowered to
    /// what the process's open-file limit leaves room for. Default: 4096.
    #[arg(long, env = "TENURED_HTTP_MAX_CONNECTIONS", default_value_t = 4096)]
    pub http_max_connections: usize,

    /// An HTTP connection (gateway or metrics) with no request open for this long is closed:
    /// keep-alive connections do not hold places for ever. Default: 60s.
    #[arg(long, env = "TENURED_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub http_idle_timeout: Duration,

    /// A Watch whose client takes no message for this long is cut off with
    /// `resource_exhausted` (`slow_watcher`, with the revision to resume from), so that one
    /// that never reads holds nothing for long. Default: 10s.
    #[arg(long, env = "TENURED_SLOW_WATCHER", default_value = "10s", value_parser = humantime::parse_duration)]
    pub slow_watcher: Duration,

    /// Strikes a connection may spend (`crate::guard`): a call refused for its credentials,
    /// or cancelled within 10 ms of being sent (rapid reset), costs one; half this many come
    /// back each second. A connection out of strikes is closed. Default: 200.
    #[arg(long, env = "TENURED_CONNECTION_STRIKES", default_value_t = 200)]
    pub connection_strikes: u32,

    /// How long the address of a connection closed for abuse may open no new one (0s: none;
    /// set it so when many clients share one address, behind NAT or a proxy). A member's
    /// address is never kept out. Default: 10s.
    #[arg(long, env = "TENURED_ABUSE_COOLDOWN", default_value = "10s", value_parser = humantime::parse_duration)]
    pub abuse_cooldown: Duration,

    /// Streams a client may reset before the server accepts them (the burst a node resumed
    /// from a pause sees); past it the connection is closed (GOAWAY). Default: 1000.
    #[arg(long, env = "TENURED_MAX_PENDING_RESETS", default_value_t = 1000)]
    pub max_pending_resets: usize,

    /// Streams one connection may make this node reset for its errors (the rapid-reset and
    /// "MadeYouReset" defences); past it the connection is closed. Default: 1024.
    #[arg(long, env = "TENURED_MAX_LOCAL_ERROR_RESETS", default_value_t = 1024)]
    pub max_local_error_resets: usize,

    /// HTTP/2 PING to an idle connection this often; one that does not answer within
    /// --http2-keepalive-timeout is closed. Default: 30s.
    #[arg(long, env = "TENURED_HTTP2_KEEPALIVE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub http2_keepalive: Duration,

    /// How long a PING may go unanswered. Default: 10s.
    #[arg(long, env = "TENURED_HTTP2_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http2_keepalive_timeout: Duration,

    /// A connection older than this is asked to go (GOAWAY): clients reconnect, so load
    /// spreads again after a node comes back, and no connection holds its streams for ever.
    /// Default: 1h.
    #[arg(long, env = "TENURED_MAX_CONNECTION_AGE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub max_connection_age: Duration,

    /// How long calls on a connection past its age may finish before it is closed (a Watch
    /// or Serve then resumes on a new one). Default: 5m.
    #[arg(long, env = "TENURED_MAX_CONNECTION_AGE_GRACE", default_value = "5m", value_parser = humantime::parse_duration)]
    pub max_connection_age_grace: Duration,
}

impl Limits {
    pub fn validate(&self) -> anyhow::Result<()> {
        let counts = [
            (
                "--max-streams-per-connection",
                self.max_streams_per_connection as usize,
            ),
            (
                "--max-requests-per-connection",
                self.max_requests_per_connection,
            ),
            ("--max-in-flight", self.max_in_flight),
            (
                "--max-in-flight-per-principal",
                self.max_in_flight_per_principal,
            ),
            ("--max-open-streams", self.max_open_streams),
            (
                "--max-open-streams-per-principal",
                self.max_open_streams_per_principal,
            ),
            ("--max-public-streams", self.max_public_streams),
            (
                "--max-public-streams-per-address",
                self.max_public_streams_per_address,
            ),
            ("--max-connections", self.max_connections),
            (
                "--max-connections-per-address",
                self.max_connections_per_address,
            ),
            ("--http-max-connections", self.http_max_connections),
            ("--max-pending-resets", self.max_pending_resets),
            ("--max-local-error-resets", self.max_local_error_resets),
            ("--connection-strikes", self.connection_strikes as usize),
        ];
        for (flag, value) in counts {
            anyhow::ensure!(value > 0, "{flag} must be at least 1");
        }
        anyhow::ensure!(
            self.read_rate_per_principal >= MAX_PAGE,
            "--read-rate-per-principal must be at least {MAX_PAGE} (the largest page)"
        );
        for (flag, value) in [
            ("--http2-keepalive", self.http2_keepalive),
            ("--http2-keepalive-timeout", self.http2_keepalive_timeout),
            ("--max-connection-age", self.max_connection_age),
            ("--slow-watcher", self.slow_watcher),
            ("--greeting-timeout", self.greeting_timeout),
            ("--connection-idle-timeout", self.connection_idle_timeout),
            ("--http-idle-timeout", self.http_idle_timeout),
        ] {
            anyhow::ensure!(
                value >= Duration::from_secs(1),
                "{flag} must be at least 1s"
            );
        }
        Ok(())
    }
}

pub use caps::{Cap, Gauge, InFlight, PerPrincipal, Permit, PrincipalPermit};
pub use read_pacer::ReadPacer;

/// `KeepAlive` streams one principal may have open on a node (SPEC §4.22); an admin's are not
/// counted.
pub const KEEP_ALIVE_STREAMS_PER_PRINCIPAL: usize = 64;
/// Renewals of one `KeepAlive` stream running at once: past it the node reads no more of that
/// stream until one is answered (the client waits; nothing is refused).
pub const KEEP_ALIVE_STREAM_IN_FLIGHT: usize = 256;
