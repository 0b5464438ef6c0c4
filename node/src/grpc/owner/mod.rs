//! Forward to owner (SPEC §4.9): the exclusive holder opens `Serve`, an inbox on the node it
//! calls; `Forward` from any client, on any node, reads the current owner linearizably and
//! hands the payload with the owner's fencing token to that inbox, wherever it is, and returns
//! the owner's reply.
//!
//! Inboxes are node-local and not replicated: an inbox is a live stream to one process, and
//! it dies with its node or its connection. What the log does guarantee is who the owner is,
//! and the token every delivery carries lets the owner refuse a request meant for an older
//! tenure. A request is sent again (at most [`MAX_ATTEMPTS`] in all, re-reading the owner each
//! time) only when it provably was not processed: no inbox took it, or the owner rejected it.
//! Once an owner has taken it, no answer in time is `owner_timeout`, and it is never re-sent.
//!
//! `crate::coord::inbox` is the registry and its rules (the node holds it); here `check` is the
//! arguments and lease checks, `route` the attempts and the way to another node's inbox (the
//! internal `FindInbox` / `Deliver` RPCs), `wire` the delivery outcome on the wire.

mod check;
mod route;
mod wire;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tenure_proto::raft::v1::{
    DeliverRequest, DeliverResponse, FindInboxRequest, FindInboxResponse,
};
use tenure_proto::v1 as pb;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::coord::inbox::{Inboxes, Outcome, Parcel};

use crate::coord::Node;
use crate::error::ApiError;

pub use tenure_proto::contract::{DEFAULT_FORWARD_TIMEOUT, MAX_PAYLOAD_BYTES};
/// The longest wait a forward may ask for.
pub const MAX_FORWARD_TIMEOUT: Duration = Duration::from_secs(60);
/// Deliveries of one forward at most (SPEC §4.9).
pub const MAX_ATTEMPTS: u32 = 3;

pub type ServeStream = Pin<Box<dyn Stream<Item = Result<pb::ServeResponse, Status>> + Send>>;

/// `Serve`: the first message opens the inbox of a live exclusive lease the caller may serve;
/// the stream then carries deliveries to the owner and its replies back. It ends when the
/// owner sends `close` or ends its side, with `stale_fencing_token` when a newer tenure opens
/// an inbox for the resource on this node, and with `unavailable` when the node shuts down.
pub async fn serve(
    node: &Arc<Node>,
    request: Request<Streaming<pb::ServeRequest>>,
) -> Result<Response<ServeStream>, Status> {
    let (_, extensions, mut requests) = request.into_parts();
    let caller = crate::auth::caller_in(&extensions)?;
    let credential = crate::auth::credential_in(&extensions);
    let open_stream = node.enter_stream(&caller)?;
    let open_stream =
        node.open_stream_of(&caller, crate::lease::quota::Quota::Inboxes, open_stream)?;
    let first = tokio::time::timeout(node.config.request_timeout, requests.message()).await;
    let open = match first {
        Ok(message) => match message? {
            Some(pb::ServeRequest {
                kind: Some(pb::serve_request::Kind::Open(open)),
            }) => open,
            _ => {
                return Err(
                    ApiError::invalid("open", "the first message of Serve must be `open`").into(),
                )
            }
        },
        Err(_) => return Err(ApiError::invalid("open", "not sent in time").into()),
    };
    let wanted = check::serve_open(&open)?;
    let view = route::resource_view(node, &wanted.resource).await?;
    let tenure = check::servable(&view, &wanted, &caller)?;
    tracing::debug!(?tenure, "inbox opened");
    let mut outbox = node.inboxes.open(tenure)?;
    tokio::spawn(
        take_replies(
            node.inboxes.clone(),
            (outbox.id(), outbox.resource().to_string()),
            requests,
            outbox.dropped(),
            (open_stream, {
                let node = node.clone();
                async move { node.revoked(credential).await }
            }),
        )
        .in_current_span(),
    );
    Ok(Response::new(Box::pin(outbox)))
}

/// Hands the owner's replies to their deliveries until the owner's side of the stream ends,
/// then closes the inbox. Once the node's side is over (the inbox was retired, or the call
/// went away), replies are awaited for [`MAX_FORWARD_TIMEOUT`] more at most: no forwarder
/// waits longer than that. A node shutting down stops at once.
async fn take_replies(
    inboxes: Inboxes,
    (inbox, resource): (u64, String),
    mut requests: Streaming<pb::ServeRequest>,
    mut outbox_dropped: oneshot::Receiver<()>,
    (_open_stream, revoked): (crate::limits::Permit, impl Future<Output = ()>),
) {
    tokio::pin!(revoked);
    let mut last_call: Option<Instant> = None;
    let why = loop {
        let message = tokio::select! {
            message = requests.message() => message,
            _ = &mut outbox_dropped, if last_call.is_none() => {
                last_call = Some(Instant::now() + MAX_FORWARD_TIMEOUT);
                continue;
            }
            _ = tokio::time::sleep_until(last_call.unwrap_or_else(Instant::now)), if last_call.is_some() => {
                break None;
            }
            // Dropping the owner's side lets a graceful shutdown finish.
            _ = inboxes.stopping() => break None,
            () = &mut revoked => break Some(ApiError::revoked().into()),
        };
        match message {
            Ok(Some(pb::ServeRequest { kind: Some(kind) })) => match kind {
                pb::serve_request::Kind::Reply(reply) => inboxes.answer(inbox, reply),
                pb::serve_request::Kind::Close(_) => inboxes.retire(inbox, &resource, None),
                pb::serve_request::Kind::Open(_) => {
                    break Some(ApiError::invalid("open", "sent twice on one Serve").into())
                }
            },
            Ok(Some(pb::ServeRequest { kind: None })) => {
                break Some(ApiError::invalid("kind", "a Serve message must set one").into())
            }
            Ok(None) => break None,
            Err(status) => {
                tracing::debug!(%status, "an owner's Serve stream failed");
                break None;
            }
        }
    };
    inboxes.close(inbox, &resource, why);
}

/// `Forward`: arguments, then the caller, then the owner's reply (see [`route`]).
pub async fn forward(
    node: &Arc<Node>,
    request: Request<pb::ForwardRequest>,
) -> Result<Response<pb::ForwardResponse>, Status> {
    let caller = crate::auth::caller_of(&request)?;
    let call = check::forward(request.into_inner())?;
    crate::metrics::record_request_id(Some(&call.request_id));
    let span = tracing::debug_span!("forward", resource = %call.resource);
    let reply = route::forward(node, caller.principal, call)
        .instrument(span)
        .await?;
    Ok(Response::new(reply))
}

/// Internal `FindInbox`: whether this node has an inbox that would take the delivery.
pub fn find_inbox(
    node: &Node,
    request: Request<FindInboxRequest>,
) -> Result<Response<FindInboxResponse>, Status> {
    crate::auth::peer_of(&request)?;
    let request = request.get_ref();
    let token = node
        .inboxes
        .fresh_token(&request.resource, request.fencing_token);
    Ok(Response::new(FindInboxResponse {
        found: token.is_some(),
        fencing_token: token.unwrap_or_default(),
    }))
}

/// Internal `Deliver`: queues a forwarder's request in this node's inbox and answers with
/// what became of it. Every delivery it accepts is answered with an outcome, never a status.
pub async fn deliver(
    node: &Node,
    request: Request<DeliverRequest>,
) -> Result<Response<DeliverResponse>, Status> {
    crate::auth::peer_of(&request)?;
    let request = request.into_inner();
    if request.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(ApiError::invalid("payload", "over the forward limit").into());
    }
    let wait = Duration::from_millis(request.timeout_ms).min(MAX_FORWARD_TIMEOUT);
    let parcel = Parcel {
        resource: request.resource,
        fencing_token: request.fencing_token,
        payload: request.payload,
        from_principal: request.from_principal,
        request_id: request.request_id,
    };
    let outcome = match node.inboxes.deliver(parcel) {
        Ok(delivery) => delivery.outcome(Instant::now() + wait).await,
        Err(why) => Outcome::NotDelivered(why),
    };
    Ok(Response::new(outcome.into()))
}
