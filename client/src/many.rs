//! `client.lock_many(holder, resources)` (or `session.acquire_many(resources)`): several resources granted together in one entry,
//! all with that entry's index as their fencing token, or none (SPEC §4.25). With `wait` it
//! queues in every resource's waiting room and is admitted in all of them at once, so two
//! callers that name the same resources in opposite orders never deadlock.
//!
//! ```no_run
//! # async fn run(client: tenure_client::Client) -> Result<(), tenure_client::Error> {
//! use std::time::Duration;
//! use tenure_client::AcquiredMany;
//! let both = client
//!     .lock_many("transfer-81", ["accounts/alice", "accounts/bob"])
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(10))
//!     .await?;
//! if let AcquiredMany::Granted(leases) = both {
//!     let token = leases[0].fencing_token(); // the same token on both accounts
//!     # let _ = token;
//!     for lease in leases {
//!         lease.release().await?;
//!     }
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use tenure_proto::v1 as pb;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::Error;
use crate::lease::{from_prost_duration, prost_duration, release_request, Lease, SessionLink};
use crate::lock::held;
use crate::session::Session;

/// An `AcquireMany` being built; nothing is sent until `try_acquire` or `wait`.
#[must_use = "an acquire_many does nothing until try_acquire() or wait()"]
pub struct LockMany {
    client: Client,
    request: pb::AcquireManyRequest,
    session: Option<SessionLink>,
}

/// The answer of [`LockMany`]'s `try_acquire` and `wait`.
pub enum AcquiredMany {
    /// Every resource, in the order named, each lease renewing itself (or living on the
    /// session); all carry the same fencing token.
    Granted(Vec<Lease>),
    /// Nothing granted (SPEC §3.4).
    Refused {
        /// `wait_timeout` or `wait_cancelled` for a wait that ended; otherwise the first
        /// blocked resource's reason (`resource_unavailable`, …).
        reason: String,
        /// Every resource, in the order named, with what stands in its way (an empty
        /// `reason` = it alone would have fit), its holders and the place the wait had.
        claims: Vec<pb::ClaimOutcome>,
    },
}

fn claims<I, S>(resources: I) -> Vec<pb::ResourceClaim>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    resources
        .into_iter()
        .map(|resource| pb::ResourceClaim {
            resource: resource.into(),
            ..Default::default()
        })
        .collect()
}

impl Client {
    /// Starts building an exclusive acquire of every one of `resources` for `holder`
    /// (each policy's default ttl), granted together or not at all.
    /// [`Client::acquire_many`] sends a request built by hand.
    pub fn lock_many<I, S>(&self, holder: &str, resources: I) -> LockMany
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockMany {
            client: self.clone(),
            request: pb::AcquireManyRequest {
                holder: holder.into(),
                claims: claims(resources),
                ..Default::default()
            },
            session: None,
        }
    }
}

impl Session {
    /// Starts building an acquire of every one of `resources` whose leases live on this
    /// session, granted together or not at all. A `wait` dropped just as the cluster admitted
    /// it leaves the leases on the session until it ends; the same call again on this
    /// session gets them back.
    pub fn acquire_many<I, S>(&self, resources: I) -> LockMany
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockMany {
            client: self.client().clone(),
            request: pb::AcquireManyRequest {
                holder: self.holder().into(),
                claims: claims(resources),
                session_id: self.id().into(),
                ..Default::default()
            },
            session: Some(self.link().clone()),
        }
    }
}

impl LockMany {
    /// Every lease's ttl (not on a session's: the session's is theirs).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.request.ttl = Some(prost_duration(ttl));
        self
    }

    /// `resource`'s claim in a shared mode its policy lists, drawing `units` from its pool
    /// (a resource not named yet is added).
    pub fn shared(mut self, resource: &str, mode: pb::LeaseMode, units: u64) -> Self {
        let claims = &mut self.request.claims;
        let at = match claims.iter().position(|c| c.resource == resource) {
            Some(at) => at,
            None => {
                claims.push(pb::ResourceClaim {
                    resource: resource.into(),
                    ..Default::default()
                });
                claims.len() - 1
            }
        };
        claims[at].mode = mode as i32;
        claims[at].units = units;
        self
    }

    /// Stores `key = value` with every lease.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.metadata.insert(key.into(), value.into());
        self
    }

    /// Acquires all now, or answers `Refused` with each resource's reason and holders.
    pub async fn try_acquire(mut self) -> Result<AcquiredMany, Error> {
        self.request.on_conflict = pb::OnConflict::Fail as i32;
        self.send().await
    }

    /// Acquires all now, or queues in every resource's waiting room and resolves when the log
    /// admits this holder in all of them at once, or when `timeout` ends the wait in all of
    /// them (`Refused` with `wait_timeout`). Dropping the future leaves every room. A zero
    /// `timeout` does not queue.
    pub async fn wait(mut self, timeout: Duration) -> Result<AcquiredMany, Error> {
        if timeout.is_zero() {
            return self.try_acquire().await;
        }
        self.request.on_conflict = pb::OnConflict::Wait as i32;
        self.request.wait_timeout = Some(prost_duration(timeout));
        self.send().await
    }

    async fn send(self) -> Result<AcquiredMany, Error> {
        let LockMany {
            client,
            request,
            session,
        } = self;
        let requested_ttl = request.ttl.as_ref().map(from_prost_duration);
        let sent = Instant::now();
        let response = client.acquire_many(request).await?;
        if !response.granted {
            return Ok(AcquiredMany::Refused {
                reason: response.reason,
                claims: response.claims,
            });
        }
        // Every handle at once (a grant after a long wait renews each first); if any fails,
        // every lease is let go rather than left held with nobody renewing it.
        let handles = futures::future::join_all(response.leases.iter().map(|lease| {
            held(
                client.clone(),
                lease.clone(),
                session.as_ref(),
                requested_ttl,
                sent,
            )
        }))
        .await;
        let mut leases = Vec::with_capacity(handles.len());
        let mut failed = None;
        for handle in handles {
            match handle {
                Ok(lease) => leases.push(lease),
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        let Some(error) = failed else {
            return Ok(AcquiredMany::Granted(leases));
        };
        drop(leases);
        let releases = response
            .leases
            .iter()
            .map(|lease| client.release(release_request(lease)));
        for released in futures::future::join_all(releases).await {
            if let Err(error) = released {
                tracing::debug!(%error, "could not release a lease of a failed acquire_many");
            }
        }
        Err(error)
    }
}
