//! What one connection, and all of them together, may hold of a node: HTTP/2 streams and
//! resets per connection, requests in flight, long-lived streams (Watch, Serve, a waiting
//! Acquire), keepalive and connection age. Each is a setting with a default sized for a
//! 2-core node, so that no client can starve the others by opening more than its share;
//! calls past a node-wide cap get `resource_exhausted` with a reason that names the cap.

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

    /// Health Watch and reflection streams open on this node, which answer callers without
    /// a token: a cap of their own, so that nobody without a token can take the places of
    /// Watch and Serve. More are refused with `resource_exhausted` (`too_many_streams`).
    /// Default: 256.
    #[arg(long, env = "TENURED_MAX_PUBLIC_STREAMS", default_value_t = 256)]
    pub max_public_streams: usize,

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
            ("--max-public-streams", self.max_public_streams),
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
        ] {
            anyhow::ensure!(
                value >= Duration::from_secs(1),
                "{flag} must be at least 1s"
            );
        }
        Ok(())
    }
}

/// Which node-wide cap refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// Client requests in flight (`--max-in-flight`).
    InFlight,
    /// One principal's requests in flight (`--max-in-flight-per-principal`).
    PrincipalInFlight,
    /// Long-lived calls open (`--max-open-streams`).
    Streams,
    /// Health Watch and reflection streams open (`--max-public-streams`).
    PublicStreams,
    /// A Watch whose client takes no message: cut off rather than held.
    SlowWatcher,
}

impl Cap {
    pub fn reason(self) -> Reason {
        match self {
            Cap::InFlight | Cap::PrincipalInFlight => Reason::TooManyRequests,
            Cap::Streams | Cap::PublicStreams => Reason::TooManyStreams,
            Cap::SlowWatcher => Reason::SlowWatcher,
        }
    }
}

/// One node-wide cap: a count of what is open, refused past its limit.
#[derive(Debug)]
pub struct Gauge {
    cap: Cap,
    limit: usize,
    open: Arc<Semaphore>,
}

/// Held while a counted call is open; dropping it frees its place (and its principal's, for
/// a stream a quota counts).
#[derive(Debug)]
pub struct Permit(
    #[allow(dead_code)] OwnedSemaphorePermit,
    #[allow(dead_code)] Vec<PrincipalPermit>,
);

impl Permit {
    /// The same place, holding a place of the principal's too.
    pub fn with(mut self, principal: PrincipalPermit) -> Permit {
        self.1.push(principal);
        self
    }
}

/// A call's place among the requests in flight, in its extensions: a call that turns into a
/// long wait (an Acquire that queues) gives it up for a place among the open streams, so that
/// waits never crowd out the short calls (a Renew) the in-flight cap is for.
#[derive(Clone, Debug)]
pub struct InFlight(Arc<std::sync::Mutex<Option<Places>>>);

/// One call's places in flight: its principal's (None with auth off) and the node's.
type Places = (Option<PrincipalPermit>, Permit);

impl InFlight {
    /// The places of one call: its principal's (None with auth off) and the node's.
    pub fn new(principal: Option<PrincipalPermit>, node: Permit) -> Self {
        InFlight(Arc::new(std::sync::Mutex::new(Some((principal, node)))))
    }

    /// Frees the place now rather than when the call ends.
    pub fn release(&self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// Client requests in flight per principal (`--max-in-flight-per-principal`). Holds an
/// entry only for a principal with requests in flight: at most --max-in-flight of them.
#[derive(Debug)]
pub struct PerPrincipal {
    limit: usize,
    open: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

/// A principal's place among its requests in flight; dropping it frees the place.
#[derive(Debug)]
pub struct PrincipalPermit {
    open: Arc<std::sync::Mutex<HashMap<String, usize>>>,
    principal: String,
}

impl Drop for PrincipalPermit {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.principal);
            }
        }
    }
}

impl PerPrincipal {
    pub fn new(limit: usize) -> Self {
        PerPrincipal {
            limit,
            open: Arc::default(),
        }
    }

    /// A place for one more request of `principal`, or `resource_exhausted`.
    pub fn enter(&self, principal: &str) -> Result<PrincipalPermit, ApiError> {
        self.enter_up_to(principal, self.limit)
            .ok_or_else(|| ApiError::Limit {
                cap: Cap::PrincipalInFlight,
                detail: format!(
                    "principal {principal} has its limit of {} requests in flight on this node (--max-in-flight-per-principal); retry with backoff",
                    self.limit
                ),
            })
    }

    /// A place for one more of `principal`'s, if it holds fewer than `limit`.
    pub fn enter_up_to(&self, principal: &str, limit: usize) -> Option<PrincipalPermit> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(principal.to_string()).or_default();
        if *count >= limit {
            if *count == 0 {
                open.remove(principal);
            }
            return None;
        }
        *count += 1;
        Some(PrincipalPermit {
            open: self.open.clone(),
            principal: principal.to_string(),
        })
    }

    /// How many places `principal` holds.
    pub fn held_by(&self, principal: &str) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(principal).copied().unwrap_or(0)
    }
}

impl Gauge {
    pub fn new(cap: Cap, limit: usize) -> Self {
        Gauge {
            cap,
            limit,
            open: Arc::new(Semaphore::new(limit)),
        }
    }

    /// A place for one more call, or `resource_exhausted` naming the cap.
    pub fn enter(&self) -> Result<Permit, ApiError> {
        self.open
            .clone()
            .try_acquire_owned()
            .map(|permit| Permit(permit, Vec::new()))
            .map_err(|_| ApiError::Limit {
                cap: self.cap,
                detail: match self.cap {
                    Cap::InFlight => format!(
                        "this node is handling its limit of {} client requests (--max-in-flight); retry with backoff or on another node",
                        self.limit
                    ),
                    Cap::PrincipalInFlight => format!(
                        "this principal has its limit of {} requests in flight on this node (--max-in-flight-per-principal); retry with backoff",
                        self.limit
                    ),
                    Cap::Streams => format!(
                        "this node has its limit of {} Watch, Serve and waiting Acquire calls open (--max-open-streams); close some, or use another node",
                        self.limit
                    ),
                    Cap::SlowWatcher => "a watcher that reads nothing is cut off".to_string(),
                    Cap::PublicStreams => format!(
                        "this node has its limit of {} health Watch and reflection streams open (--max-public-streams)",
                        self.limit
                    ),
                },
            })
    }

    /// How many calls hold a place now.
    pub fn open(&self) -> usize {
        self.limit - self.open.available_permits()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Each principal's reads on this node, paced to `--read-rate-per-principal` items per
/// second, with a burst of one second's worth (GCRA, `governor`).
pub struct ReadPacer {
    limiter: governor::DefaultKeyedRateLimiter<String>,
    clock: governor::clock::DefaultClock,
    /// Reads that had to wait (`tenure_reads_paced_total`).
    pub paced: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for ReadPacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPacer").finish_non_exhaustive()
    }
}

impl ReadPacer {
    pub fn new(per_second: u32) -> ReadPacer {
        let rate = NonZeroU32::new(per_second.max(MAX_PAGE)).unwrap_or(NonZeroU32::MIN);
        ReadPacer {
            limiter: governor::RateLimiter::keyed(governor::Quota::per_second(rate)),
            clock: governor::clock::DefaultClock::default(),
            paced: Default::default(),
        }
    }

    /// `None` when `principal` may read `items` more now (and they are counted); else how
    /// long to wait before asking again.
    fn wait(&self, principal: &str, items: u32) -> Option<Duration> {
        use governor::clock::Clock;
        let items = NonZeroU32::new(items.clamp(1, MAX_PAGE)).unwrap_or(NonZeroU32::MIN);
        match self.limiter.check_key_n(&principal.to_string(), items) {
            Ok(Ok(())) | Err(_) => None,
            Ok(Err(not_until)) => Some(not_until.wait_time_from(self.clock.now())),
        }
    }

    /// Waits until `principal` may read `items` more (at most the burst).
    pub async fn admit(&self, principal: &str, items: u32) {
        let mut waited = false;
        while let Some(wait) = self.wait(principal, items) {
            if !waited {
                self.paced.inc();
                waited = true;
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A principal that read its second's worth waits for the next; another does not.
    #[test]
    fn a_principal_past_its_read_rate_waits_and_others_do_not() {
        let pacer = ReadPacer::new(1000);
        assert_eq!(pacer.wait("lister", 1000), None);
        let wait = pacer.wait("lister", 1000).expect("paced");
        assert!(wait > Duration::from_millis(500), "{wait:?}");
        assert_eq!(pacer.wait("other", 1000), None);
        // A page larger than the burst is charged as the largest page, never refused.
        assert_eq!(pacer.wait("big", u32::MAX), None);
    }

    #[test]
    fn a_gauge_refuses_past_its_limit_and_frees_a_place_when_a_permit_drops() {
        let gauge = Gauge::new(Cap::Streams, 2);
        let first = gauge.enter().expect("first");
        let _second = gauge.enter().expect("second");
        let refused = gauge.enter().expect_err("third");
        assert_eq!(refused.reason_and_code().0, "too_many_streams");
        assert_eq!(refused.reason_and_code().1, tonic::Code::ResourceExhausted);
        assert_eq!(gauge.open(), 2);
        drop(first);
        gauge.enter().expect("a place again");
    }

    #[test]
    fn one_principal_cannot_take_more_than_its_share_of_the_places_in_flight() {
        let per_principal = PerPrincipal::new(2);
        let first = per_principal.enter("mallory").expect("first");
        let _second = per_principal.enter("mallory").expect("second");
        let refused = per_principal.enter("mallory").expect_err("third");
        assert_eq!(refused.reason_and_code().0, "too_many_requests");
        assert!(refused.to_string().contains("mallory"), "{refused}");
        per_principal.enter("alice").expect("another principal");
        drop(first);
        per_principal.enter("mallory").expect("a place again");
        // Entries go when their principal has nothing in flight.
        drop(_second);
        assert!(per_principal
            .open
            .lock()
            .expect("lock")
            .get("alice")
            .is_none());
    }
}
