//! Sessions (SPEC §4.24): one heartbeat for many leases. `client.session(ttl)` starts a session
//! and renews it every ttl/3 in the background; leases taken with `session.lock(resource)` live
//! while it lives and are all lost together when it is (closed, refused, or past the local
//! deadline).
//!
//! ```no_run
//! # async fn run(client: tenure_client::Client) -> Result<(), tenure_client::Error> {
//! use std::time::Duration;
//! use tenure_client::Acquired;
//! let session = client.session(Duration::from_secs(10)).await?;
//! let mut shards = Vec::new();
//! for shard in 0..1_000 {
//!     if let Acquired::Granted(lease) = session.lock(&format!("shards/{shard}")).try_acquire().await? {
//!         shards.push(lease); // lease.fencing_token() guards this shard's writes
//!     }
//! }
//! let why = session.lost().await; // every shard is lost with it
//! # let _ = why;
//! # Ok(()) }
//! ```

use std::time::Duration;

use tenure_proto::v1 as pb;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::Error;
use crate::lease::{
    from_prost_duration, local_deadline, lost_of, prost_duration, renew_loop, Lost, SessionLink,
};
use crate::lock::Lock;

/// A session this process holds. Dropping it stops renewing (the session then expires, and
/// with it every lease on it); [`Session::close`] ends it at once.
pub struct Session {
    client: Client,
    session: pb::Session,
    link: SessionLink,
    lost_tx: watch::Sender<Option<Lost>>,
    renewer: JoinHandle<()>,
}

impl Client {
    /// Starts a session with `ttl` for a holder made up for it (`session-<uuid>`), renewed every
    /// ttl/3 in the background on the client's `KeepAlive` stream.
    pub async fn session(&self, ttl: Duration) -> Result<Session, Error> {
        let holder = format!("session-{}", uuid::Uuid::new_v4());
        self.session_for(&holder, ttl).await
    }

    /// Starts a session of `holder` with `ttl`, renewed every ttl/3 in the background on the
    /// client's `KeepAlive` stream (a unary `RenewSession` where no stream opens).
    pub async fn session_for(&self, holder: &str, ttl: Duration) -> Result<Session, Error> {
        let sent = Instant::now();
        let session = self
            .create_session(pb::CreateSessionRequest {
                holder: holder.into(),
                ttl: Some(prost_duration(ttl)),
                ..Default::default()
            })
            .await?
            .session
            .ok_or_else(|| Error::Local("created without a session".into()))?;
        let ttl = session
            .ttl
            .as_ref()
            .map(from_prost_duration)
            .filter(|ttl| !ttl.is_zero())
            .unwrap_or(ttl);
        let (lost_tx, lost) = watch::channel(None);
        let (deadline_tx, deadline) = watch::channel(local_deadline(sent, ttl));
        let renew = {
            let (client, id) = (self.clone(), session.session_id.clone());
            move |deadline| {
                let (client, id) = (client.clone(), id.clone());
                async move {
                    client
                        .renew_session_on_stream(&id, deadline)
                        .await
                        .map(drop)
                }
            }
        };
        let renewer = tokio::spawn(renew_loop(
            renew,
            ttl,
            sent + ttl / 3,
            lost_tx.clone(),
            deadline_tx,
        ));
        Ok(Session {
            client: self.clone(),
            link: SessionLink {
                id: session.session_id.clone(),
                ttl,
                lost,
                deadline,
            },
            session,
            lost_tx,
            renewer,
        })
    }
}

impl Session {
    /// `ses_<n>`: the session's id in the cluster.
    pub fn id(&self) -> &str {
        &self.session.session_id
    }

    /// The holder every lease on the session is held by.
    pub fn holder(&self) -> &str {
        &self.session.holder
    }

    /// The session as created.
    pub fn info(&self) -> &pb::Session {
        &self.session
    }

    /// Cancels this session's wait for `resource`, if it has one: the wait of its holder
    /// that its history shows queued on this session, named by the revision that queued it,
    /// so that a newer wait of the same holder (on another session) is never the one
    /// cancelled. True if a wait was cancelled. A campaign lost here calls it (best effort)
    /// for the wait it leaves behind.
    pub async fn cancel_wait(&self, resource: &str) -> Result<bool, Error> {
        cancel_wait_of(
            self.client.clone(),
            resource.to_string(),
            (self.holder().to_string(), self.id().to_string()),
        )
        .await
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn link(&self) -> &SessionLink {
        &self.link
    }

    /// The ttl every renewal extends it by.
    pub fn ttl(&self) -> Duration {
        self.link.ttl
    }

    /// The local deadline: past it, act as if the session and every lease on it were gone.
    pub fn deadline(&self) -> Instant {
        *self.link.deadline.borrow()
    }

    /// Resolves when the session is lost (a renewal refused for good, `session_not_found`
    /// once it expired; or the local deadline passed): every lease on it is lost with it.
    pub async fn lost(&self) -> Lost {
        lost_of(&self.link.lost).await
    }

    /// Starts building an acquire of `resource` whose lease lives on this session (no ttl of
    /// its own); `try_acquire()` or `wait(timeout)` sends it. The lease's `lost()` is the
    /// session's. A `wait` dropped just as the cluster admitted it leaves the lease on the
    /// session until it ends; the same acquire again on this session gets that lease back.
    pub fn lock(&self, resource: &str) -> Lock {
        Lock::on_session(
            self.client.clone(),
            pb::AcquireRequest {
                resource: resource.into(),
                holder: self.session.holder.clone(),
                session_id: self.session.session_id.clone(),
                ..Default::default()
            },
            self.link.clone(),
        )
    }

    /// Ends the session: every lease on it released and every wait cancelled, in one entry.
    /// Its leases' `lost()` resolve with [`Lost::Released`] before the close is sent: from then
    /// on the session is no longer renewed, and the cluster may hand its resources to others
    /// at any moment, whatever the close's answer.
    pub async fn close(mut self) -> Result<pb::Session, Error> {
        self.renewer.abort();
        // A renewal running on another thread may still end: let it, so it cannot overwrite
        // `Released` with what it saw.
        let _ = (&mut self.renewer).await;
        self.lost_tx.send_replace(Some(Lost::Released));
        let closed = self.client.close_session(&self.session.session_id).await?;
        closed
            .session
            .ok_or_else(|| Error::Local("closed without a session".into()))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// [`Session::cancel_wait`] of the session `session_id` of `holder`.
pub(crate) async fn cancel_wait_of(
    client: Client,
    resource: String,
    (holder, session_id): (String, String),
) -> Result<bool, Error> {
    // The wait was queued after the session was created (at the index its id names): the
    // history is read newest first, page by page, no further back than that.
    let created = session_id
        .strip_prefix("ses_")
        .and_then(|index| index.parse::<u64>().ok())
        .unwrap_or(0);
    let mut page_token = String::new();
    let queued = loop {
        let page = client
            .history(pb::HistoryRequest {
                resource: resource.clone(),
                page_size: 1000,
                page_token,
                order: pb::Order::Desc as i32,
                events: vec![pb::EventType::Queued as i32],
                ..Default::default()
            })
            .await?;
        if let Some(queued) = page
            .entries
            .iter()
            .find(|e| e.holder == holder && e.session_id == session_id)
        {
            break queued.revision;
        }
        let past_creation = page.entries.last().is_some_and(|e| e.revision < created);
        if page.next_page_token.is_empty() || past_creation {
            return Ok(false);
        }
        page_token = page.next_page_token;
    };
    let cancelled = client
        .cancel_wait(pb::CancelWaitRequest {
            resource,
            holder,
            queued_revision: queued,
            request_id: String::new(),
        })
        .await?;
    Ok(cancelled.cancelled)
}
