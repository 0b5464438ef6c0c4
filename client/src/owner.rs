//! Forward to owner (SPEC §4.9), client side. The holder of an exclusive lease opens its inbox
//! with [`Client::serve`] and answers what it yields; any client reaches the current owner of
//! a resource with [`Client::forward`].
//!
//! The inbox rejects, unseen by its caller, every delivery whose fencing token is lower than
//! the lease's own: it was meant for an older tenure. The rejection tells the forwarder that it
//! was not processed, so the forwarder re-reads the owner and sends it again.

use std::time::Duration;

use tenure_proto::contract::{Reason, REASON_HEADER};
use tenure_proto::v1 as pb;
use tenure_proto::v1::leases_client::LeasesClient;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::Error;
use crate::lease::{from_prost_duration, prost_duration};

pub use tenure_proto::contract::{DEFAULT_FORWARD_TIMEOUT, MAX_PAYLOAD_BYTES};
/// Replies buffered towards the node before answering waits.
const REPLY_BUFFER: usize = 64;
/// How long a dropped inbox may take to close cleanly in the background.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

/// An open inbox: the requests forwarded to one tenure of an exclusive lease. Close it with
/// [`Inbox::close`]; dropping it closes it the same way in the background (inside a tokio
/// runtime), so a reply sent just before is not lost.
pub struct Inbox {
    /// None once closed.
    stream: Option<ServeCall>,
    fencing_token: u64,
}

/// The two sides of one `Serve` call.
struct ServeCall {
    deliveries: tonic::Streaming<pb::ServeResponse>,
    replies: mpsc::Sender<pb::ServeRequest>,
}

/// One forwarded request. Answer it with [`Forwarded::reply`], or [`Forwarded::reject`] if it
/// was not processed (the forwarder may then send it again). Dropped unanswered, the forwarder
/// gets `owner_timeout` when its timeout passes.
pub struct Forwarded {
    message: pb::ServeResponse,
    replies: mpsc::Sender<pb::ServeRequest>,
}

impl Client {
    /// `Serve`: opens the inbox of `lease`, a live exclusive lease held by this client's
    /// principal, on the first endpoint that answers. Deliveries for an older tenure than
    /// `lease.fencing_token` are rejected automatically.
    pub async fn serve(&self, lease: &pb::Lease) -> Result<Inbox, Error> {
        let open = pb::ServeRequest {
            kind: Some(pb::serve_request::Kind::Open(pb::ServeOpen {
                resource: lease.resource.clone(),
                holder: lease.holder.clone(),
                lease_id: lease.lease_id.clone(),
                fencing_token: lease.fencing_token,
            })),
        };
        let mut replies = None;
        let deliveries = self
            .open_stream(|channel| {
                let (tx, rx) = mpsc::channel(REPLY_BUFFER);
                // A fresh channel has room for the first message.
                let _ = tx.try_send(open.clone());
                replies = Some(tx);
                let call = self.authorized(futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|message| (message, rx))
                }));
                async move { LeasesClient::new(channel).serve(call).await }
            })
            .await?;
        Ok(Inbox {
            stream: Some(ServeCall {
                deliveries,
                replies: replies.ok_or_else(|| Error::Local("no endpoints".into()))?,
            }),
            fencing_token: lease.fencing_token,
        })
    }

    /// `Forward`: hands `payload` (at most 1 MiB) to the current exclusive holder of
    /// `resource` and returns its reply. `timeout` bounds the wait for the owner (at most
    /// 60 s; zero: the node's default of 10 s).
    pub async fn forward(
        &self,
        resource: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<pb::ForwardResponse, Error> {
        self.forward_request(pb::ForwardRequest {
            resource: resource.into(),
            payload,
            timeout: (!timeout.is_zero()).then(|| prost_duration(timeout)),
            request_id: String::new(),
        })
        .await
    }

    /// `Forward` with the request as given (a `request_id` is set when it has none; the owner
    /// sees it). A forward moves to the next endpoint only when the node surely delivered
    /// nothing: it could not be reached, or it answered `unavailable`. It is never sent again
    /// when its outcome is unknown. `owner_unavailable` means nothing was processed (calling
    /// again is safe); `owner_timeout` that the outcome is unknown.
    pub async fn forward_request(
        &self,
        mut request: pb::ForwardRequest,
    ) -> Result<pb::ForwardResponse, Error> {
        if request.request_id.is_empty() {
            request.request_id = uuid::Uuid::new_v4().to_string();
        }
        let wait = request
            .timeout
            .as_ref()
            .map(from_prost_duration)
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_FORWARD_TIMEOUT);
        // The node answers by the wait plus its own reads of the owner.
        let deadline = Instant::now() + wait + self.timeout();
        let mut last = None;
        for channel in self.channels() {
            let left = deadline.saturating_duration_since(Instant::now());
            let call = self.request(request.clone(), left);
            match LeasesClient::new(channel).forward(call).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if delivered_nothing(&status) => last = Some(Error::from(status)),
                Err(status) => return Err(status.into()),
            }
        }
        Err(last.unwrap_or_else(|| Error::Local("no endpoints".into())))
    }
}

/// Whether a failed forward surely reached no owner: the node said `unavailable` itself (it
/// found no leader, before delivering anything), or no connection was ever made.
fn delivered_nothing(status: &tonic::Status) -> bool {
    status
        .metadata()
        .get(REASON_HEADER)
        .is_some_and(|reason| reason == Reason::Unavailable.as_str())
        || std::iter::successors(std::error::Error::source(status), |e| e.source())
            .any(|e| e.is::<tonic::ConnectError>())
}

impl Inbox {
    /// The token of the tenure this inbox serves.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The next request for this tenure; `None` when the node closed the inbox. An error ends
    /// the inbox: `stale_fencing_token` when a newer tenure opened one on that node.
    pub async fn next(&mut self) -> Result<Option<Forwarded>, Error> {
        let Some(call) = self.stream.as_mut() else {
            return Ok(None);
        };
        loop {
            let Some(message) = call.deliveries.message().await? else {
                return Ok(None);
            };
            match admit(self.fencing_token, message) {
                Ok(message) => {
                    return Ok(Some(Forwarded {
                        message,
                        replies: call.replies.clone(),
                    }))
                }
                Err(rejection) => send(&call.replies, rejection).await?,
            }
        }
    }

    /// Closes the inbox without losing a request: the node routes no more here, what it sent
    /// before it knew is rejected unprocessed (its forwarders send it again), and replies of
    /// [`Forwarded`] handles still out go through until they are answered or dropped.
    pub async fn close(mut self) -> Result<(), Error> {
        match self.stream.take() {
            Some(call) => call.close().await,
            None => Ok(()),
        }
    }
}

impl ServeCall {
    async fn close(mut self) -> Result<(), Error> {
        let close = pb::ServeRequest {
            kind: Some(pb::serve_request::Kind::Close(pb::ServeClose {})),
        };
        send(&self.replies, close).await?;
        while let Some(message) = self.deliveries.message().await? {
            let rejection = rejection(message.delivery_id, "the owner closed its inbox");
            send(&self.replies, rejection).await?;
        }
        Ok(())
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        if let (Some(call), Ok(runtime)) =
            (self.stream.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, call.close()).await;
            });
        }
    }
}

/// Lets through a delivery for this tenure (or a newer one); one for an older tenure becomes
/// its rejection.
fn admit(
    fencing_token: u64,
    message: pb::ServeResponse,
) -> Result<pb::ServeResponse, pb::ServeRequest> {
    if message.fencing_token >= fencing_token {
        return Ok(message);
    }
    let reason = format!(
        "stale fencing token (expected {fencing_token}, got {})",
        message.fencing_token
    );
    Err(rejection(message.delivery_id, &reason))
}

fn rejection(delivery_id: u64, reason: &str) -> pb::ServeRequest {
    answer(pb::ServeReply {
        delivery_id,
        payload: Vec::new(),
        rejected: true,
        reject_reason: reason.to_string(),
    })
}

fn answer(reply: pb::ServeReply) -> pb::ServeRequest {
    pb::ServeRequest {
        kind: Some(pb::serve_request::Kind::Reply(reply)),
    }
}

async fn send(
    replies: &mpsc::Sender<pb::ServeRequest>,
    message: pb::ServeRequest,
) -> Result<(), Error> {
    replies
        .send(message)
        .await
        .map_err(|_| Error::Local("the inbox is closed".into()))
}

impl Forwarded {
    /// The forwarder's request, as it sent it.
    pub fn payload(&self) -> &[u8] {
        &self.message.payload
    }

    /// The token the forwarder read for the owner's lease.
    pub fn fencing_token(&self) -> u64 {
        self.message.fencing_token
    }

    /// The principal that called `Forward`.
    pub fn from_principal(&self) -> &str {
        &self.message.from_principal
    }

    /// The forwarder's `request_id`: the same on every delivery of one forward.
    pub fn request_id(&self) -> &str {
        &self.message.request_id
    }

    /// Answers the request. A reply over [`MAX_PAYLOAD_BYTES`] is an error here, and the
    /// forwarder gets `reply_too_large`: only its first limit + 1 bytes are sent, enough for
    /// the node to tell, so the inbox stays open (a message over the 4 MiB transport limit
    /// would end it).
    pub async fn reply(self, mut payload: Vec<u8>) -> Result<(), Error> {
        let bytes = payload.len();
        payload.truncate(MAX_PAYLOAD_BYTES + 1);
        let reply = pb::ServeReply {
            delivery_id: self.message.delivery_id,
            payload,
            rejected: false,
            reject_reason: String::new(),
        };
        send(&self.replies, answer(reply)).await?;
        if bytes > MAX_PAYLOAD_BYTES {
            return Err(Error::Local(format!(
                "a reply of {bytes} bytes is over the limit of {MAX_PAYLOAD_BYTES}; the forwarder gets reply_too_large"
            )));
        }
        Ok(())
    }

    /// Refuses the request unprocessed: the forwarder re-reads the owner and may send it again.
    pub async fn reject(self, reason: &str) -> Result<(), Error> {
        send(&self.replies, rejection(self.message.delivery_id, reason)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(fencing_token: u64) -> pb::ServeResponse {
        pb::ServeResponse {
            delivery_id: 4,
            payload: b"ping".to_vec(),
            fencing_token,
            ..Default::default()
        }
    }

    #[test]
    fn a_delivery_for_an_older_tenure_is_rejected_and_the_rest_let_through() {
        assert!(admit(9, delivery(9)).is_ok());
        assert!(admit(9, delivery(12)).is_ok());
        match admit(9, delivery(7)) {
            Err(pb::ServeRequest {
                kind: Some(pb::serve_request::Kind::Reply(reply)),
            }) => {
                assert!(reply.rejected);
                assert_eq!(reply.delivery_id, 4);
                assert_eq!(
                    reply.reject_reason,
                    "stale fencing token (expected 9, got 7)"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_nodes_own_unavailable_says_nothing_was_delivered() {
        let mut unavailable = tonic::Status::unavailable("no leader");
        unavailable
            .metadata_mut()
            .insert(REASON_HEADER, "unavailable".parse().expect("ascii"));
        assert!(delivered_nothing(&unavailable));
        let mut owner = tonic::Status::unavailable("no inbox");
        owner
            .metadata_mut()
            .insert(REASON_HEADER, "owner_unavailable".parse().expect("ascii"));
        assert!(!delivered_nothing(&owner));
        // A transport failure mid-call: the node may have delivered it.
        assert!(!delivered_nothing(&tonic::Status::unavailable(
            "connection reset"
        )));
    }
}
