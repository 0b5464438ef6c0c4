//! `KeepAlive` (SPEC §2.3): many renewals on one stream. Each message is a `Renew`, checked
//! and committed as one (the leader's batcher puts the renewals that arrive together into one
//! entry, `coord::batch`); each gets one answer, the lease or its refusal, in the order the
//! renewals finish. A refusal answers its message and leaves the stream open.
//!
//! The stream holds a place among the node's open streams and one of its principal's
//! [`KEEP_ALIVE_STREAMS_PER_PRINCIPAL`]; each renewal on it holds one of the node's requests
//! in flight and one of its principal's while it runs, and is refused with
//! `too_many_requests` past them, as a unary call would be. At most
//! [`KEEP_ALIVE_STREAM_IN_FLIGHT`] renewals of one stream run at once; past that, and while as
//! many answers wait for the client, the node reads no more of the stream (the client's
//! sends wait). A client that takes no answer for `--slow-watcher` is cut off.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, Stream, StreamExt};
use tenure_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::convert::{lease_reply, session_reply};
use super::validate;
use crate::auth::Caller;
use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::Op;
use crate::limits::{Cap, InFlight, KEEP_ALIVE_STREAMS_PER_PRINCIPAL, KEEP_ALIVE_STREAM_IN_FLIGHT};

pub type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<pb::KeepAliveResponse, Status>> + Send>>;

/// Answers queued for the client beyond the one being written.
const QUEUED_ANSWERS: usize = 64;

pub async fn keep_alive(
    node: &Arc<Node>,
    request: Request<Streaming<pb::KeepAliveRequest>>,
) -> Result<Response<KeepAliveStream>, Status> {
    let (_, extensions, renewals) = request.into_parts();
    let caller = crate::auth::caller_in(&extensions)?;
    let credential = crate::auth::credential_in(&extensions);
    // The stream holds a place among the open streams (and one of its principal's) instead
    // of one in flight; each renewal on it takes one in flight of its own.
    let mut open_stream = node.enter_stream(&caller)?;
    if !caller.admin {
        let principal = &caller.principal;
        let place = node
            .keep_alive_streams
            .enter_up_to(principal, KEEP_ALIVE_STREAMS_PER_PRINCIPAL)
            .ok_or_else(|| ApiError::Limit {
                cap: Cap::Streams,
                detail: format!(
                    "principal {principal} has {KEEP_ALIVE_STREAMS_PER_PRINCIPAL} KeepAlive streams open on this node, its limit: renew on one of them"
                ),
            })?;
        open_stream = open_stream.with(place);
    }
    if let Some(in_flight) = extensions.get::<InFlight>() {
        in_flight.release();
    }
    let (answers, answered) = mpsc::channel(QUEUED_ANSWERS);
    let revoked = {
        let node = node.clone();
        async move { node.revoked(credential).await }
    };
    tokio::spawn(
        renew_all(
            node.clone(),
            caller,
            renewals,
            answers,
            (open_stream, revoked),
        )
        .in_current_span(),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(answered))))
}

/// Reads renewals and answers each until the client ends its side and every renewal is
/// answered, the client goes away or takes no answer for `--slow-watcher`, the token is
/// revoked or the node shuts down. Answers the client has not taken yet wait here, never
/// holding a renewal's place in flight; the stream is read only while fewer than
/// [`KEEP_ALIVE_STREAM_IN_FLIGHT`] renewals run and as few answers wait.
async fn renew_all(
    node: Arc<Node>,
    caller: Caller,
    mut renewals: Streaming<pb::KeepAliveRequest>,
    answers: mpsc::Sender<Result<pb::KeepAliveResponse, Status>>,
    (_open_stream, revoked): (crate::limits::Permit, impl Future<Output = ()>),
) {
    let patience = node.config.limits.slow_watcher;
    let stopping = node.inboxes.stopping();
    tokio::pin!(revoked, stopping);
    let mut running = FuturesUnordered::new();
    let mut ready: VecDeque<pb::KeepAliveResponse> = VecDeque::new();
    let mut reading = true;
    // Since when answers have waited with the client taking none.
    let mut stalled_since: Option<Instant> = None;
    let end: Option<Status> = loop {
        if !reading && running.is_empty() && ready.is_empty() {
            break None;
        }
        let slow = async {
            match stalled_since {
                Some(since) => tokio::time::sleep_until(since + patience).await,
                None => std::future::pending().await,
            }
        };
        let room = running.len() < KEEP_ALIVE_STREAM_IN_FLIGHT
            && ready.len() < KEEP_ALIVE_STREAM_IN_FLIGHT;
        tokio::select! {
            biased;
            () = &mut revoked => break Some(ApiError::revoked().into()),
            () = &mut stopping => break Some(ApiError::Unavailable(
                "the node is shutting down: open the stream on another node".into(),
            )
            .into()),
            () = slow => break Some(ApiError::Limit {
                cap: Cap::SlowWatcher,
                detail: format!(
                    "the client took no KeepAlive answer for {patience:?} (--slow-watcher): cut off"
                ),
            }
            .into()),
            permit = answers.reserve(), if !ready.is_empty() => {
                let Ok(permit) = permit else {
                    // The client went away.
                    return;
                };
                if let Some(answer) = ready.pop_front() {
                    permit.send(Ok(answer));
                }
                stalled_since = (!ready.is_empty()).then(Instant::now);
            }
            Some(answer) = running.next() => {
                stalled_since = stalled_since.or_else(|| Some(Instant::now()));
                ready.push_back(answer);
            }
            message = renewals.message(), if reading && room => match message {
                Ok(Some(message)) => match node.enter_in_flight(&caller, node.auth().is_on()) {
                    Ok(in_flight) => {
                        running.push(renew(node.clone(), caller.clone(), message, in_flight));
                    }
                    Err(refused) => {
                        stalled_since = stalled_since.or_else(|| Some(Instant::now()));
                        ready.push_back(refusal(message.seq, refused));
                    }
                },
                Ok(None) => reading = false,
                // The client went away, or sent what is not a KeepAliveRequest.
                Err(status) => break Some(status),
            },
        }
    };
    // Renewals still running give their places in flight back now.
    drop(running);
    if let Some(status) = end {
        let _ = tokio::time::timeout(patience, answers.send(Err(status))).await;
    }
}

/// The renewal a message asks for, committed and answered.
enum Renewed {
    Lease(pb::Lease),
    Session(pb::Session),
}

/// One renewal, checked and committed as `Renew` (or `RenewSession`) is.
async fn renew(
    node: Arc<Node>,
    caller: Caller,
    message: pb::KeepAliveRequest,
    in_flight: InFlight,
) -> pb::KeepAliveResponse {
    let seq = message.seq;
    let renewed = async {
        let (op, request_id) = match (message.renew, message.session_id.as_str()) {
            (Some(_), id) if !id.is_empty() => {
                return Err(ApiError::invalid(
                    "session_id",
                    "a KeepAlive message renews a lease or a session, not both",
                ))
            }
            (Some(req), _) if req.replace_metadata => {
                // Renewals on a stream are answered as they finish, not in order: two that
                // replace the metadata could land in either order.
                return Err(ApiError::invalid(
                    "renew.replace_metadata",
                    "replace a lease's metadata with Renew, not on a KeepAlive stream",
                ));
            }
            (Some(req), _) => (validate::renew(&req)?, req.request_id),
            (None, "") => {
                return Err(ApiError::invalid(
                    "renew",
                    "a KeepAlive message needs its renewal (renew or session_id)",
                ))
            }
            (None, id) => {
                let op = validate::renew_session(&pb::RenewSessionRequest {
                    session_id: id.to_string(),
                    request_id: String::new(),
                })?;
                (Op::RenewSession(op), String::new())
            }
        };
        let session = matches!(op, Op::RenewSession(_));
        let mut proposal = node.proposal(caller, String::new(), op);
        // Renewals are not remembered (SPEC §4.18): without a request_id none is made up.
        proposal.request_id = validate::request_id(&request_id)?;
        let reply = node.propose(proposal).await?;
        match session {
            true => session_reply(reply).map(Renewed::Session),
            false => lease_reply(reply).map(Renewed::Lease),
        }
    }
    .await;
    in_flight.release();
    match renewed {
        Ok(Renewed::Lease(lease)) => pb::KeepAliveResponse {
            seq,
            lease: Some(lease),
            ..Default::default()
        },
        Ok(Renewed::Session(session)) => pb::KeepAliveResponse {
            seq,
            session: Some(session),
            ..Default::default()
        },
        Err(error) => refusal(seq, error),
    }
}

fn refusal(seq: u64, error: ApiError) -> pb::KeepAliveResponse {
    let (reason, code) = error.reason_and_code();
    pb::KeepAliveResponse {
        seq,
        lease: None,
        refusal: Some(pb::Refusal {
            reason: reason.as_str().into(),
            code: code as i32,
            message: error.to_string(),
        }),
        session: None,
    }
}
