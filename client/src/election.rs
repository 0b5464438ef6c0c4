//! Leader election on one key (SPEC §7): every candidate queues for the key's exclusive
//! lease, and whoever holds it leads. The waiting room makes a handover push-based: the
//! release or reclaim that ends one leadership admits the next candidate in the same log
//! entry, whose index is the new leader's fencing token — higher than every earlier one, so
//! a downstream [`Fence`](crate::Fence) refuses a deposed leader that has not noticed yet.
//!
//! ```no_run
//! # async fn run(client: tenure_client::Client) -> Result<(), tenure_client::Error> {
//! let leadership = client.campaign("service/scheduler", "scheduler-a", std::time::Duration::from_secs(10)).await?;
//! let token = leadership.fencing_token(); // stamp every write made as leader
//! tokio::select! {
//!     _ = leadership.lost() => { /* stop acting as leader at once */ }
//!     _ = async { /* lead */ } => { leadership.resign().await?; }
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use backon::Retryable;
use tenure_proto::contract::Reason;

use crate::client::Client;
use crate::error::Error;
use crate::lease::{Acquired, Lease, Lost};
use crate::lock::Lock;
use crate::retry;
use crate::session::Session;

/// How long a lost campaign spends cancelling its wait (best effort, no retries after it).
const CANCEL_WAIT_BUDGET: Duration = Duration::from_secs(10);

/// How long one queued acquire of a campaign waits before it is re-queued. A candidate whose
/// process and node both died stays queued at most this long (and, if admitted meanwhile,
/// holds the key for one ttl).
const CAMPAIGN_WAIT: Duration = Duration::from_secs(300);

/// This candidate leads while the handle's lease lives. Dropping it stops renewing: the key
/// passes on when the ttl runs out; `resign` passes it on at once.
pub struct Leadership {
    key: String,
    lease: Lease,
}

impl Client {
    /// Queues `candidate_id` for leadership of `key` and resolves when it leads. Waits as long
    /// as it takes, through node failures; errors only on a refusal that retrying cannot
    /// change (a bad name, `insufficient_permissions`, a `CancelWait` of this candidate).
    /// Dropping the future leaves the queue.
    pub async fn campaign(
        &self,
        key: &str,
        candidate_id: &str,
        ttl: Duration,
    ) -> Result<Leadership, Error> {
        campaign_with(key, || self.lock(key, candidate_id).ttl(ttl)).await
    }
}

impl Session {
    /// [`Client::campaign`] with the session's holder as the candidate and its lease on the
    /// session (SPEC §4.24): the session's one heartbeat keeps this leadership with everything
    /// else it carries, and the leadership is lost when the session is. A campaign still
    /// queued when the session is lost ends with it: `NotGranted` with the refusal that ended
    /// the session, or `wait_cancelled`.
    ///
    /// Nothing renews the key's lease alone, so [`Leadership::lost`] resolves only with the
    /// session: a lease ended by somebody else (an admin's release) is not noticed here; the
    /// fencing token is what the protected system checks. A campaign future dropped just as
    /// the cluster admitted it leaves the key held on the session; campaigning again on the
    /// same session gets that lease back (§4.2).
    ///
    /// A campaign that ends because the session was lost here (its renewals failing, say in a
    /// partition) may leave its wait in the cluster, where the session may still live (a node
    /// that died holding the call cannot remove it): the wait could be admitted onto the
    /// session and hold the key until the session's grace ends. So it also cancels that wait,
    /// best effort ([`Session::cancel_wait`]: by the revision that queued it, never a newer
    /// wait).
    pub async fn campaign(&self, key: &str) -> Result<Leadership, Error> {
        tokio::select! {
            biased;
            lost = self.lost() => {
                let cancel = crate::session::cancel_wait_of(
                    self.client().clone(),
                    key.to_string(),
                    (self.holder().to_string(), self.id().to_string()),
                );
                tokio::spawn(async move {
                    match tokio::time::timeout(CANCEL_WAIT_BUDGET, cancel).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => {
                            tracing::debug!(%error, "a lost campaign could not cancel its wait")
                        }
                        Err(_) => tracing::debug!("a lost campaign gave up cancelling its wait"),
                    }
                });
                Err(Error::NotGranted {
                    reason: match lost {
                        Lost::Refused(reason) => reason,
                        Lost::DeadlinePassed | Lost::Released => {
                            Reason::WaitCancelled.as_str().into()
                        }
                    },
                })
            }
            led = campaign_with(key, || self.lock(key)) => led,
        }
    }
}

/// Queues `lock` for `key` until granted; a wait that ran out, or a grant lost before it
/// arrived, queues again at once. The errors left are a failure to reach the cluster, retried
/// after a delay, or a refusal for good.
async fn campaign_with(key: &str, lock: impl Fn() -> Lock) -> Result<Leadership, Error> {
    let queue = || async {
        loop {
            match lock().wait(CAMPAIGN_WAIT).await {
                Ok(Acquired::Granted(lease)) => return Ok(*lease),
                Ok(Acquired::Refused { reason, .. }) if Reason::WaitTimeout == reason.as_str() => {}
                Ok(Acquired::Refused { reason, .. }) => return Err(Error::NotGranted { reason }),
                // Admitted, but the lease ended before the handle could renew it.
                Err(error) if lost_on_arrival(&error) => {}
                Err(error) => return Err(error),
            }
        }
    };
    let lease = queue
        .retry(retry::RECONNECT)
        .when(Error::is_retryable)
        .notify(|error, _| tracing::debug!(%error, key, "campaign: no answer; retrying"))
        .await?;
    Ok(Leadership {
        key: key.to_string(),
        lease,
    })
}

fn lost_on_arrival(error: &Error) -> bool {
    matches!(
        error.reason(),
        Some(Reason::LeaseExpired | Reason::LeaseNotFound | Reason::StaleFencingToken)
    )
}

impl Leadership {
    /// The fencing token of this leadership: the log index of the entry that began it.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token()
    }

    /// The election key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This candidate's id: the holder of the key's lease.
    pub fn candidate_id(&self) -> &str {
        &self.lease.info().holder
    }

    /// The lease behind the leadership (its id, deadline, ttl).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Resolves when leadership is lost: a renewal refused for good, or the local deadline
    /// passed without one. Stop acting as leader at once.
    pub async fn lost(&self) -> Lost {
        self.lease.lost().await
    }

    /// Steps down: releases the key, which admits the next candidate in the same entry.
    pub async fn resign(self) -> Result<(), Error> {
        self.lease.release().await.map(drop)
    }
}
