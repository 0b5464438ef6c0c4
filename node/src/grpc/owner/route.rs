//! `Forward` (SPEC §4.9): read who owns the resource, hand the request to that owner's inbox
//! wherever it is, and send it again only when it provably was not processed.
//!
//! One attempt = a linearizable read of the owner + one delivery. The delivery goes to this
//! node's inbox if it has a fresh one (of the owner's tenure or newer), else to the one node
//! that answers a probe (`FindInbox`, sent to every other member at once: a probe delivers
//! nothing, so a lost one harms nothing). Only then is the request sent, to that one node, so
//! no two inboxes ever hold it at once.

use crate::store::WatchReceiver as _;
use std::time::Duration;

use tenure_proto::raft::v1::{DeliverRequest, FindInboxRequest};
use tenure_proto::v1 as pb;
use tokio::time::{timeout_at, Instant};

use super::check::{self, ForwardCall};
use super::{MAX_ATTEMPTS, MAX_PAYLOAD_BYTES};
use crate::coord::inbox::{Outcome, Parcel, Tenure};
use crate::coord::Node;
use crate::error::{ApiError, REASON_HEADER};
use crate::lease::{Answer, Query, ResourceView};
use crate::store::NodeId;

/// How long a probe of one node may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// A remote delivery's RPC outlives the wait it asks for by this much, so the inbox's node can
/// say whether the owner had taken the request before the caller gives up on it.
const DELIVER_GRACE: Duration = Duration::from_secs(1);
/// The pause before the next attempt after no inbox took the request (an owner reconnecting).
const NO_INBOX_PAUSE: Duration = Duration::from_millis(50);

/// Forwards `call` from `from_principal` to the resource's owner and returns its reply.
pub async fn forward(
    node: &Node,
    from_principal: String,
    call: ForwardCall,
) -> Result<pb::ForwardResponse, ApiError> {
    let deadline = Instant::now() + call.timeout;
    // Why the last attempt was not processed; every attempt so far provably was not.
    let mut unprocessed: Option<String> = None;
    // Out of time before a delivery was sent: nothing was processed.
    let out_of_time = |unprocessed: Option<String>| {
        unprocessed.map_or_else(
            || ApiError::Unavailable("no leader confirmed the owner in time".into()),
            ApiError::OwnerUnavailable,
        )
    };
    for attempt in 1..=MAX_ATTEMPTS {
        let owner = match timeout_at(deadline, read_owner(node, &call.resource)).await {
            Ok(owner) => owner?,
            Err(_) => return Err(out_of_time(unprocessed)),
        };
        if Instant::now() >= deadline {
            return Err(out_of_time(unprocessed));
        }
        let parcel = Parcel {
            resource: call.resource.clone(),
            fencing_token: owner.fencing_token,
            payload: call.payload.clone(),
            from_principal: from_principal.clone(),
            request_id: call.request_id.clone(),
        };
        match deliver(node, parcel, deadline).await {
            Outcome::Replied(payload) => {
                return Ok(pb::ForwardResponse {
                    payload,
                    fencing_token: owner.fencing_token,
                    owner_holder: owner.holder,
                    attempts: attempt,
                })
            }
            Outcome::TooLarge(bytes) => {
                return Err(ApiError::ReplyTooLarge {
                    bytes,
                    limit: MAX_PAYLOAD_BYTES,
                })
            }
            Outcome::Unanswered(why) => return Err(ApiError::OwnerTimeout(why)),
            Outcome::Rejected(reason) => {
                unprocessed = Some(format!("the owner rejected it: {reason}"));
            }
            Outcome::NotDelivered(why) => {
                unprocessed = Some(why);
                if attempt < MAX_ATTEMPTS {
                    let pause = NO_INBOX_PAUSE * attempt;
                    tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
                }
            }
        }
    }
    Err(ApiError::OwnerUnavailable(format!(
        "{MAX_ATTEMPTS} attempts, none processed; the last: {}",
        unprocessed.unwrap_or_default()
    )))
}

async fn read_owner(node: &Node, resource: &str) -> Result<Tenure, ApiError> {
    check::owner(&resource_view(node, resource).await?)
}

/// The resource as a linearizable read shows it.
pub async fn resource_view(node: &Node, resource: &str) -> Result<ResourceView, ApiError> {
    let query = Query::Resource {
        name: resource.to_string(),
    };
    match node.query(query, false).await? {
        (Answer::Resource(view), _) => Ok(view),
        (Answer::Rejected(rejection), _) => Err(rejection.into()),
        (other, _) => Err(ApiError::Internal(format!("unexpected answer {other:?}"))),
    }
}

/// Hands `parcel` to the one inbox that takes it, here or on another node.
async fn deliver(node: &Node, parcel: Parcel, deadline: Instant) -> Outcome {
    if node
        .inboxes
        .fresh_token(&parcel.resource, parcel.fencing_token)
        .is_some()
    {
        return match node.inboxes.deliver(parcel) {
            Ok(delivery) => delivery.outcome(deadline).await,
            Err(why) => Outcome::NotDelivered(why),
        };
    }
    match find_inbox(node, &parcel, deadline).await {
        Ok(addr) => deliver_to(node, &addr, parcel, deadline).await,
        Err(why) => Outcome::NotDelivered(why),
    }
}

/// The address of the node holding the freshest inbox for the parcel (the lowest id on a
/// tie), or why none was found.
async fn find_inbox(node: &Node, parcel: &Parcel, deadline: Instant) -> Result<String, String> {
    let probe_deadline = deadline.min(Instant::now() + PROBE_TIMEOUT);
    let probes = other_members(node)
        .into_iter()
        .map(|(id, addr)| async move {
            let probe = async {
                let mut client = node.peers.client(&addr).map_err(|e| e.to_string())?;
                let mut request = tonic::Request::new(FindInboxRequest {
                    resource: parcel.resource.clone(),
                    fencing_token: parcel.fencing_token,
                });
                request.set_timeout(probe_deadline.saturating_duration_since(Instant::now()));
                let response = client
                    .find_inbox(request)
                    .await
                    .map_err(|s| s.to_string())?;
                Ok::<_, String>(response.into_inner())
            };
            let answer = timeout_at(probe_deadline, probe)
                .await
                .unwrap_or_else(|_| Err("no answer in time".into()));
            (id, addr, answer)
        });
    let mut best: Option<(u64, String)> = None;
    let mut unreachable = Vec::new();
    for (id, addr, answer) in futures::future::join_all(probes).await {
        match answer {
            Ok(found) if found.found && found.fencing_token >= parcel.fencing_token => {
                if best
                    .as_ref()
                    .is_none_or(|(token, _)| found.fencing_token > *token)
                {
                    best = Some((found.fencing_token, addr));
                }
            }
            Ok(_) => {}
            Err(why) => {
                tracing::debug!(node = id, %why, "inbox probe failed");
                unreachable.push(id.to_string());
            }
        }
    }
    best.map(|(_, addr)| addr).ok_or_else(|| {
        let mut why = format!(
            "no node has an inbox of the owner's tenure (token {}) for {}",
            parcel.fencing_token, parcel.resource
        );
        if !unreachable.is_empty() {
            why.push_str(&format!("; unreachable: node {}", unreachable.join(", ")));
        }
        why
    })
}

/// Every member but this node, by id.
fn other_members(node: &Node) -> Vec<(NodeId, String)> {
    let metrics = node.raft.metrics();
    let metrics = metrics.borrow_watched();
    metrics
        .membership_config
        .membership()
        .nodes()
        .filter(|(id, _)| **id != node.id)
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect()
}

/// Sends the parcel to the inbox on the node at `addr` and waits for its outcome.
async fn deliver_to(node: &Node, addr: &str, parcel: Parcel, deadline: Instant) -> Outcome {
    let left = deadline.saturating_duration_since(Instant::now());
    let mut client = match node.peers.client(addr) {
        Ok(client) => client,
        Err(e) => return Outcome::NotDelivered(format!("the inbox's node at {addr}: {e}")),
    };
    let mut request = tonic::Request::new(DeliverRequest {
        resource: parcel.resource,
        fencing_token: parcel.fencing_token,
        payload: parcel.payload,
        from_principal: parcel.from_principal,
        request_id: parcel.request_id,
        timeout_ms: left.as_millis() as u64,
    });
    request.set_timeout(left + DELIVER_GRACE);
    match timeout_at(deadline + DELIVER_GRACE, client.deliver(request)).await {
        Ok(Ok(response)) => response.into_inner().into(),
        Ok(Err(status)) if never_sent(&status) => Outcome::NotDelivered(format!(
            "the inbox's node at {addr} refused it: {}",
            status.message()
        )),
        Ok(Err(status)) => Outcome::Unanswered(format!(
            "lost the inbox's node at {addr} after sending: {}",
            status.message()
        )),
        Err(_) => Outcome::Unanswered(format!("the inbox's node at {addr} did not answer")),
    }
}

/// Whether a failed call surely never reached an inbox: the peer refused it with a reason of
/// its own (it answers every delivery it accepted), or the connection was never made.
fn never_sent(status: &tonic::Status) -> bool {
    status.metadata().contains_key(REASON_HEADER)
        || std::iter::successors(std::error::Error::source(status), |e| e.source())
            .any(|e| e.is::<tonic::ConnectError>())
}
