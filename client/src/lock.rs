//! `client.lock(resource, holder)`: an acquire built step by step, then tried once
//! (`try_acquire`) or queued in the resource's waiting room until granted or a timeout
//! (`wait`, SPEC §4.7). Either way a grant comes back as the self-renewing [`Lease`].
//!
//! ```no_run
//! # async fn run(client: tenure_client::Client) -> Result<(), tenure_client::Error> {
//! use std::time::Duration;
//! use tenure_client::Acquired;
//! match client.lock("jobs/nightly", "worker-3").ttl(Duration::from_secs(30)).wait(Duration::from_secs(10)).await? {
//!     Acquired::Granted(lease) => { /* work with lease.fencing_token() */ lease.release().await?; }
//!     Acquired::Refused { reason, queue_position, .. } => println!("{reason} at place {queue_position}"),
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use tenure_proto::v1 as pb;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::Error;
use crate::lease::{from_prost_duration, prost_duration, Acquired, Lease, SessionLink};

/// An acquire being built; nothing is sent until `try_acquire` or `wait`.
#[must_use = "a lock does nothing until try_acquire() or wait()"]
pub struct Lock {
    client: Client,
    request: pb::AcquireRequest,
    /// A lock on a session: the lease lives while the session lives.
    session: Option<SessionLink>,
}

impl Client {
    /// Starts building an exclusive acquire of `resource` for `holder` (policy default ttl).
    pub fn lock(&self, resource: &str, holder: &str) -> Lock {
        Lock {
            client: self.clone(),
            request: pb::AcquireRequest {
                resource: resource.into(),
                holder: holder.into(),
                ..Default::default()
            },
            session: None,
        }
    }
}

impl Lock {
    /// A lock whose lease lives on a session (SPEC §4.24): no ttl of its own.
    pub(crate) fn on_session(
        client: Client,
        request: pb::AcquireRequest,
        session: SessionLink,
    ) -> Lock {
        Lock {
            client,
            request,
            session: Some(session),
        }
    }

    /// The lease's ttl; the handle renews with it every ttl/3. Default: the policy's. (Not on
    /// a session's lock: the node refuses a ttl there, the session's is the lease's.)
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.request.ttl = Some(prost_duration(ttl));
        self
    }

    /// A shared mode the policy lists (default exclusive).
    pub fn mode(mut self, mode: pb::LeaseMode) -> Self {
        self.request.mode = mode as i32;
        self
    }

    /// Units a shared lease draws from the pool (default 1).
    pub fn units(mut self, units: u64) -> Self {
        self.request.units = units;
        self
    }

    /// Stores `key = value` with the lease.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.metadata.insert(key.into(), value.into());
        self
    }

    /// Acquires now or answers `Refused` with the reason and the current holders.
    pub async fn try_acquire(mut self) -> Result<Acquired, Error> {
        self.request.on_conflict = pb::OnConflict::Fail as i32;
        self.send().await
    }

    /// Acquires now, or queues behind the current holders and earlier waiters and resolves
    /// when the log admits this holder (the freeing entry's index is the token) or when
    /// `timeout` ends the wait (`Refused` with `wait_timeout`, or `wait_cancelled` after a
    /// `CancelWait`, and the place the wait had). A zero `timeout` does not queue.
    ///
    /// Dropping the future leaves the waiting room: the node holding the call removes the
    /// wait when the call goes away (and `timeout` bounds it if that node dies too).
    pub async fn wait(mut self, timeout: Duration) -> Result<Acquired, Error> {
        if timeout.is_zero() {
            return self.try_acquire().await;
        }
        self.request.on_conflict = pb::OnConflict::Wait as i32;
        self.request.wait_timeout = Some(prost_duration(timeout));
        self.send().await
    }

    async fn send(self) -> Result<Acquired, Error> {
        let Lock {
            client,
            request,
            session,
        } = self;
        let requested_ttl = request.ttl.as_ref().map(from_prost_duration);
        let sent = Instant::now();
        let response = client.acquire(request).await?;
        if !response.granted {
            return Ok(Acquired::Refused {
                reason: response.reason,
                holders: response.holders,
                queue_position: response.queue_position,
            });
        }
        let lease = response
            .lease
            .ok_or_else(|| Error::Local("granted without a lease".into()))?;
        let lease = held(client, lease, session.as_ref(), requested_ttl, sent).await?;
        Ok(Acquired::Granted(Box::new(lease)))
    }
}

/// The handle of a granted `lease`, asked for at `sent` with `requested_ttl`: on `session`
/// if the grant names it, renewing itself otherwise.
pub(crate) async fn held(
    client: Client,
    lease: pb::Lease,
    session: Option<&SessionLink>,
    requested_ttl: Option<Duration>,
    sent: Instant,
) -> Result<Lease, Error> {
    if let Some(session) = session.filter(|s| s.id == lease.session_id) {
        return Ok(Lease::on_session(client, lease, session));
    }
    let ttl = requested_ttl
        .or_else(|| lease.ttl.as_ref().map(from_prost_duration))
        .filter(|ttl| !ttl.is_zero())
        .ok_or_else(|| Error::Local("granted without a ttl".into()))?;
    Lease::hold(client, lease, ttl, sent).await
}
