//! A held lease that renews itself: every ttl/3 in the background, until released or lost,
//! on the client's one `KeepAlive` stream shared by all its leases.
//!
//! The client keeps its own deadline (SPEC §5): the *send* time of the request that set the
//! expiry + ttl − a safety margin of max(100 ms, 1 % of ttl). Past it, the holder must assume
//! the lease is gone, whatever the cluster says later.

use std::time::Duration;

use tenure_proto::contract::Reason;
use tenure_proto::v1 as pb;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::Error;

/// Why a lease was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The cluster refused a renewal for good: the reason as sent (`stale_fencing_token`,
    /// `lease_expired`, …; `.parse::<Reason>()` types it).
    Refused(String),
    /// No renewal succeeded before the local deadline.
    DeadlinePassed,
    /// Released by this handle.
    Released,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Refused(reason) => write!(f, "renewal refused: {reason}"),
            Lost::DeadlinePassed => f.write_str("no renewal before the local deadline"),
            Lost::Released => f.write_str("released"),
        }
    }
}

/// The answer of [`Client::lease`] and of [`Client::lock`]'s `try_acquire` and `wait`.
pub enum Acquired {
    /// Granted: the lease, renewing itself from now on.
    Granted(Box<Lease>),
    /// Answered, not granted (SPEC §3.4): retrying at once will not change it.
    Refused {
        /// The reason as sent (`resource_unavailable`, `insufficient_units`, `lock_delay`,
        /// `wait_timeout`, `wait_cancelled`; `.parse::<Reason>()` types it).
        reason: String,
        /// The current holders, as many as the node lists.
        holders: Vec<pb::Lease>,
        /// After a wait: the place it had in the waiting room (1 = the head); else 0.
        queue_position: u32,
    },
}

/// A lease held by this process. Dropping it stops renewing (the lease then expires).
pub struct Lease {
    client: Client,
    lease: pb::Lease,
    ttl: Duration,
    lost: watch::Receiver<Option<Lost>>,
    deadline: watch::Receiver<Instant>,
    /// None for a lease on a session (the session renews).
    renewer: Option<JoinHandle<()>>,
}

/// What a lease on a session shares with it: its ttl, its local deadline and its loss.
#[derive(Clone)]
pub(crate) struct SessionLink {
    /// The session's id: a grant on it names it.
    pub(crate) id: String,
    pub(crate) ttl: Duration,
    pub(crate) lost: watch::Receiver<Option<Lost>>,
    pub(crate) deadline: watch::Receiver<Instant>,
}

/// How long before the cluster's expiry the holder gives a lease up: max(100 ms, 1 % of ttl),
/// for clock drift and the time a renewal's answer takes to arrive (SPEC §5.3).
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 100).max(Duration::from_millis(100))
}

pub(crate) fn local_deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(safety_margin(ttl))
}

/// Whether a refused renewal means the lease is gone. A node at its limit of requests in
/// flight (`too_many_requests`) did nothing: the lease lives, and the renewal is tried again.
fn definitive(error: &Error) -> bool {
    !error.is_retryable() && error.reason() != Some(Reason::TooManyRequests)
}

impl Client {
    /// Acquires `resource` for `holder` and keeps it renewed every ttl/3 in the background;
    /// refused at once when the resource is taken (`client.lock(…).wait(…)` queues instead).
    pub async fn lease(
        &self,
        resource: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Acquired, Error> {
        self.lock(resource, holder).ttl(ttl).try_acquire().await
    }
}

/// The `Renew` of `lease` for `ttl`, with a fresh `request_id`.
pub fn renew_request(lease: &pb::Lease, ttl: Duration) -> pb::RenewRequest {
    pb::RenewRequest {
        resource: lease.resource.clone(),
        lease_id: lease.lease_id.clone(),
        holder: lease.holder.clone(),
        fencing_token: lease.fencing_token,
        ttl: Some(prost_duration(ttl)),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    }
}

/// The `Release` of `lease` ([`Client::release`] sets the `request_id`).
pub fn release_request(lease: &pb::Lease) -> pb::ReleaseRequest {
    pb::ReleaseRequest {
        resource: lease.resource.clone(),
        lease_id: lease.lease_id.clone(),
        holder: lease.holder.clone(),
        fencing_token: lease.fencing_token,
        request_id: String::new(),
    }
}

/// Renews with `renew` (given the local deadline to finish by) every ttl/3 from `next`, until a
/// renewal is refused for good, the local deadline passes, or nobody listens any more.
pub(crate) async fn renew_loop<F, R>(
    renew: F,
    ttl: Duration,
    mut next: Instant,
    lost: watch::Sender<Option<Lost>>,
    deadline: watch::Sender<Instant>,
) where
    F: Fn(Instant) -> R,
    R: std::future::Future<Output = Result<(), Error>>,
{
    loop {
        let local_deadline = *deadline.borrow();
        tokio::select! {
            _ = tokio::time::sleep_until(next.min(local_deadline)) => {}
            _ = lost.closed() => return,
        }
        if Instant::now() >= local_deadline {
            lost.send_replace(Some(Lost::DeadlinePassed));
            return;
        }
        let sent = Instant::now();
        match renew(local_deadline).await {
            Ok(()) => {
                deadline.send_replace(local_deadline.max(self::local_deadline(sent, ttl)));
                next = sent + ttl / 3;
            }
            Err(error) if definitive(&error) => {
                lost.send_replace(Some(Lost::Refused(error.reason_str().to_string())));
                return;
            }
            Err(error) => {
                tracing::debug!(%error, "renewal failed; retrying");
                next = Instant::now() + Duration::from_millis(100);
            }
        }
    }
}

impl Lease {
    /// The handle of `lease`, granted to a request sent at `sent`, renewed every ttl/3 from
    /// then on. A grant that arrives after its first renewal was due (a long wait in the
    /// waiting room) is renewed at once: the local deadline must rest on the send time of a
    /// request that set the expiry, and the wait's own send time is too early to be useful.
    pub(crate) async fn hold(
        client: Client,
        lease: pb::Lease,
        ttl: Duration,
        sent: Instant,
    ) -> Result<Lease, Error> {
        // An idempotent re-acquire returns the lease unchanged: its expiry is the cluster's.
        let remaining = lease
            .remaining
            .as_ref()
            .map_or(ttl, from_prost_duration)
            .min(ttl);
        let (sent, remaining) = if Instant::now() >= sent + remaining / 3 {
            let renewed = Instant::now();
            client.renew(renew_request(&lease, ttl)).await?;
            (renewed, ttl)
        } else {
            (sent, remaining)
        };
        let (lost_tx, lost) = watch::channel(None);
        let (deadline_tx, deadline) = watch::channel(local_deadline(sent, remaining));
        let renew = {
            let (client, lease) = (client.clone(), lease.clone());
            move |deadline| {
                let (client, request) = (client.clone(), renew_request(&lease, ttl));
                async move { client.renew_on_stream(request, deadline).await.map(drop) }
            }
        };
        let renewer = tokio::spawn(renew_loop(
            renew,
            ttl,
            sent + remaining / 3,
            lost_tx,
            deadline_tx,
        ));
        Ok(Lease {
            client,
            lease,
            ttl,
            lost,
            deadline,
            renewer: Some(renewer),
        })
    }

    /// The handle of `lease`, granted on a session: it lives while the session lives, so it
    /// is lost when the session is and its deadline is the session's. It renews nothing.
    pub(crate) fn on_session(client: Client, lease: pb::Lease, link: &SessionLink) -> Lease {
        Lease {
            client,
            lease,
            ttl: link.ttl,
            lost: link.lost.clone(),
            deadline: link.deadline.clone(),
            renewer: None,
        }
    }

    /// The fencing token: pass it to every system this lease protects.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// The lease's id, unique in the cluster.
    pub fn lease_id(&self) -> &str {
        &self.lease.lease_id
    }

    /// The lease as granted.
    pub fn info(&self) -> &pb::Lease {
        &self.lease
    }

    /// The ttl every renewal asks for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The local deadline: past it, act as if the lease were gone.
    pub fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// Resolves when the lease is lost: renewal refused for good, or the local deadline passed
    /// (for a lease on a session: when the session is lost).
    pub async fn lost(&self) -> Lost {
        lost_of(&self.lost).await
    }

    /// Stops renewing and releases the lease.
    pub async fn release(self) -> Result<pb::Lease, Error> {
        if let Some(renewer) = &self.renewer {
            renewer.abort();
        }
        let response = self.client.release(release_request(&self.lease)).await?;
        response
            .lease
            .ok_or_else(|| Error::Local("released without a lease".into()))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(renewer) = &self.renewer {
            renewer.abort();
        }
    }
}

/// Resolves when `lost` says why; a renewer gone without a word counts as a passed deadline.
pub(crate) async fn lost_of(lost: &watch::Receiver<Option<Lost>>) -> Lost {
    let mut lost = lost.clone();
    loop {
        if let Some(why) = lost.borrow_and_update().clone() {
            return why;
        }
        if lost.changed().await.is_err() {
            return lost.borrow().clone().unwrap_or(Lost::DeadlinePassed);
        }
    }
}

/// `d` as a protobuf `Duration`, by prost-types' conversion. A duration past `i64::MAX`
/// seconds, which that conversion refuses, goes out negative: the node refuses it as
/// `invalid_argument`, as it always has, rather than as a ttl out of range the caller never
/// asked for.
pub fn prost_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    })
}

/// `d` as a `std` duration, by prost-types' conversion; a negative one is zero.
pub fn from_prost_duration(d: &prost_types::Duration) -> Duration {
    Duration::try_from(*d).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_convert_both_ways_a_negative_one_is_zero_and_an_unsendable_one_negative() {
        let ttl = Duration::new(30, 250_000_000);
        assert_eq!(
            prost_duration(ttl),
            prost_types::Duration {
                seconds: 30,
                nanos: 250_000_000
            }
        );
        assert_eq!(from_prost_duration(&prost_duration(ttl)), ttl);
        let negative = prost_types::Duration {
            seconds: -5,
            nanos: 0,
        };
        assert_eq!(from_prost_duration(&negative), Duration::ZERO);
        assert!(prost_duration(Duration::MAX).seconds < 0);
    }

    #[test]
    fn safety_margin_is_at_least_100ms_and_1_percent() {
        assert_eq!(
            safety_margin(Duration::from_secs(1)),
            Duration::from_millis(100)
        );
        assert_eq!(
            safety_margin(Duration::from_secs(60)),
            Duration::from_millis(600)
        );
    }
}
