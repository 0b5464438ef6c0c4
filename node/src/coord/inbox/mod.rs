//! The owner inboxes this node holds (SPEC §4.9): at most one per resource, opened by the
//! exclusive holder's `Serve` stream.
//!
//! A delivery waits in its inbox's queue until the stream takes it (it is then *sent*), and
//! then for the owner's answer. What becomes of it is decided here, under one lock, so that
//! "not processed" is only ever said of a delivery the owner cannot have seen. An inbox ends
//! in two steps: *retired* (the owner said `close`, a newer tenure replaced it, or its stream
//! ended), it takes no more deliveries and its queued ones are `NotDelivered`, while the owner
//! may still answer the ones it was sent; *closed* (the owner's side of the stream ended), its
//! unanswered ones are `Unanswered`.

mod handles;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use tenure_proto::v1 as pb;
use tokio::sync::{oneshot, watch};
use tonic::Status;

pub use handles::{Delivery, Outbox};

use crate::error::ApiError;
use crate::lease::Rejection;

pub use tenure_proto::contract::MAX_PAYLOAD_BYTES;
/// Deliveries an inbox holds unsent at most: past that the owner is not keeping up, and a
/// delivery is refused unprocessed rather than piling payloads up in memory.
pub const MAX_QUEUED: usize = 256;

/// An owner's `reject_reason` is cut to this many bytes before it reaches a forwarder.
const MAX_REASON_BYTES: usize = 256;

/// The tenure an inbox serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    pub resource: String,
    pub holder: String,
    pub lease_id: String,
    pub fencing_token: u64,
}

/// What became of one delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The owner's answer, at most [`MAX_PAYLOAD_BYTES`].
    Replied(Vec<u8>),
    /// The owner answered with this many bytes, over the limit.
    TooLarge(u64),
    /// The owner refused it unprocessed, for this reason.
    Rejected(String),
    /// It never reached the owner: sending it again is safe.
    NotDelivered(String),
    /// The owner took it and did not answer: its outcome is unknown.
    Unanswered(String),
}

/// One forwarded request, as the forwarder hands it over.
#[derive(Clone, Debug)]
pub struct Parcel {
    pub resource: String,
    /// The token read for the owner's lease: only an inbox of that tenure or a newer one takes it.
    pub fencing_token: u64,
    pub payload: Vec<u8>,
    pub from_principal: String,
    pub request_id: String,
}

/// This node's inboxes. Cheap to clone.
#[derive(Clone)]
pub struct Inboxes {
    registry: Arc<Mutex<Registry>>,
    /// True once the node shuts down: no inbox opens, and every stream ends.
    stopping: Arc<watch::Sender<bool>>,
}

impl Default for Inboxes {
    fn default() -> Self {
        Inboxes {
            registry: Arc::default(),
            stopping: Arc::new(watch::Sender::new(false)),
        }
    }
}

#[derive(Default)]
struct Registry {
    /// The last inbox or delivery id given out (one sequence for both).
    last_id: u64,
    /// The inbox that takes each resource's deliveries.
    open: HashMap<String, Inbox>,
    /// Deliveries without an outcome yet, by delivery id.
    pending: HashMap<u64, Pending>,
    /// Why an inbox was closed, until its stream reports it to the owner.
    closed: HashMap<u64, Status>,
}

struct Inbox {
    id: u64,
    tenure: Tenure,
    /// Deliveries waiting for the stream to take them, oldest first.
    queue: VecDeque<u64>,
    /// The stream, parked until the next delivery or the close.
    waker: Option<Waker>,
}

struct Pending {
    inbox: u64,
    /// Present while queued; taken when the stream sends it to the owner.
    message: Option<pb::ServeResponse>,
    answer: oneshot::Sender<Outcome>,
}

impl Registry {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    /// Retires inbox `id` if it is still the open one for `resource` (else nothing): it takes
    /// no more deliveries, its stream wakes and ends (with `why` if given), and its queued
    /// deliveries are settled as never delivered.
    fn retire(&mut self, id: u64, resource: &str, why: Option<Status>) {
        if self.open.get(resource).is_none_or(|inbox| inbox.id != id) {
            return;
        }
        if let Some(waker) = self.open.remove(resource).and_then(|inbox| inbox.waker) {
            waker.wake();
        }
        if let Some(why) = why {
            self.closed.insert(id, why);
        }
        self.settle(id, true);
    }

    /// Settles inbox `id`'s deliveries: the queued ones, or (`queued_only` false) all.
    fn settle(&mut self, id: u64, queued_only: bool) {
        let settled: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.inbox == id && (p.message.is_some() || !queued_only))
            .map(|(delivery, _)| *delivery)
            .collect();
        for delivery in settled {
            if let Some(p) = self.pending.remove(&delivery) {
                let outcome = if p.message.is_some() {
                    Outcome::NotDelivered("the owner's inbox closed before taking it".into())
                } else {
                    Outcome::Unanswered(
                        "the owner's inbox closed after taking it, without an answer".into(),
                    )
                };
                let _ = p.answer.send(outcome);
            }
        }
    }

    /// Forgets a delivery nobody waits for any more; says whether the owner had taken it.
    fn withdraw(&mut self, delivery: u64) -> Option<bool> {
        let p = self.pending.remove(&delivery)?;
        if p.message.is_some() {
            if let Some(inbox) = self.open.values_mut().find(|i| i.id == p.inbox) {
                inbox.queue.retain(|d| *d != delivery);
            }
        }
        Some(p.message.is_none())
    }
}

impl Inboxes {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the inbox of `tenure`. An open inbox of an older tenure, or an earlier stream of
    /// the same one, is retired (the older tenure's stream ends with `stale_fencing_token`); an
    /// open inbox of a newer tenure refuses this one.
    pub fn open(&self, tenure: Tenure) -> Result<Outbox, ApiError> {
        let mut registry = self.lock();
        if *self.stopping.borrow() {
            return Err(shutting_down());
        }
        if let Some(current) = registry.open.get(&tenure.resource) {
            let (id, current_token) = (current.id, current.tenure.fencing_token);
            if current_token > tenure.fencing_token {
                return Err(Rejection::StaleFencingToken {
                    expected: current_token,
                    got: tenure.fencing_token,
                }
                .into());
            }
            let why = (current_token < tenure.fencing_token).then(|| {
                Status::from(ApiError::from(Rejection::StaleFencingToken {
                    expected: tenure.fencing_token,
                    got: current_token,
                }))
            });
            registry.retire(id, &tenure.resource, why);
        }
        let id = registry.next_id();
        let resource = tenure.resource.clone();
        registry.open.insert(
            resource.clone(),
            Inbox {
                id,
                tenure,
                queue: VecDeque::new(),
                waker: None,
            },
        );
        Ok(Outbox {
            inboxes: self.clone(),
            id,
            resource,
            ended: false,
            on_drop: None,
        })
    }

    /// Retires inbox `id` of `resource` if it is still open; its stream ends with `why`.
    pub fn retire(&self, id: u64, resource: &str, why: Option<Status>) {
        self.lock().retire(id, resource, why);
    }

    /// Closes inbox `id` of `resource` for good: retired, and what it was sent and did not
    /// answer is `Unanswered`.
    pub fn close(&self, id: u64, resource: &str, why: Option<Status>) {
        let mut registry = self.lock();
        registry.retire(id, resource, why);
        registry.settle(id, false);
    }

    /// Closes every inbox for good, and opens no more: the node is shutting down, and its
    /// owners must open their inboxes on another node.
    pub fn shut_down(&self) {
        let mut registry = self.lock();
        self.stopping.send_replace(true);
        let open: Vec<(u64, String)> = registry
            .open
            .iter()
            .map(|(resource, inbox)| (inbox.id, resource.clone()))
            .collect();
        for (id, resource) in open {
            registry.retire(id, &resource, Some(shutting_down().into()));
        }
        let ids: Vec<u64> = registry.pending.values().map(|p| p.inbox).collect();
        for id in ids {
            registry.settle(id, false);
        }
    }

    /// Resolves once the node shuts down.
    pub async fn stopping(&self) {
        let mut stopping = self.stopping.subscribe();
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }

    /// The token of the inbox here that would take a delivery for `resource` at
    /// `fencing_token`: one of that tenure or a newer one.
    pub fn fresh_token(&self, resource: &str, fencing_token: u64) -> Option<u64> {
        self.lock()
            .open
            .get(resource)
            .map(|inbox| inbox.tenure.fencing_token)
            .filter(|token| *token >= fencing_token)
    }

    /// Queues `parcel` for the owner, or says why no inbox here takes it (nothing was queued).
    /// An inbox of an older tenure than the parcel's token is stale and never takes it.
    pub fn deliver(&self, parcel: Parcel) -> Result<Delivery, String> {
        let mut guard = self.lock();
        let registry = &mut *guard;
        let Some(inbox) = registry.open.get_mut(&parcel.resource) else {
            return Err(format!(
                "no owner inbox for {} on this node",
                parcel.resource
            ));
        };
        if inbox.tenure.fencing_token < parcel.fencing_token {
            return Err(format!(
                "the inbox for {} here is of an older tenure (token {} < {})",
                parcel.resource, inbox.tenure.fencing_token, parcel.fencing_token
            ));
        }
        if inbox.queue.len() >= MAX_QUEUED {
            return Err(format!(
                "the owner's inbox for {} has {MAX_QUEUED} requests waiting",
                parcel.resource
            ));
        }
        registry.last_id += 1;
        let id = registry.last_id;
        let (answer, outcome) = oneshot::channel();
        let message = pb::ServeResponse {
            delivery_id: id,
            payload: parcel.payload,
            fencing_token: parcel.fencing_token,
            from_principal: parcel.from_principal,
            request_id: parcel.request_id,
        };
        inbox.queue.push_back(id);
        if let Some(waker) = inbox.waker.take() {
            waker.wake();
        }
        let inbox = inbox.id;
        registry.pending.insert(
            id,
            Pending {
                inbox,
                message: Some(message),
                answer,
            },
        );
        Ok(Delivery {
            inboxes: self.clone(),
            id,
            outcome,
        })
    }

    /// The owner's answer on inbox `inbox`'s stream. Answers to deliveries this inbox was
    /// never sent (unknown ids, another inbox's, already settled) are ignored.
    pub fn answer(&self, inbox: u64, reply: pb::ServeReply) {
        let mut registry = self.lock();
        let ours = registry
            .pending
            .get(&reply.delivery_id)
            .is_some_and(|p| p.inbox == inbox && p.message.is_none());
        if !ours {
            tracing::debug!(
                delivery = reply.delivery_id,
                "an answer to no delivery of this inbox"
            );
            return;
        }
        let Some(p) = registry.pending.remove(&reply.delivery_id) else {
            return;
        };
        let outcome = if reply.rejected {
            Outcome::Rejected(bounded_reason(&reply.reject_reason))
        } else if reply.payload.len() > MAX_PAYLOAD_BYTES {
            Outcome::TooLarge(reply.payload.len() as u64)
        } else {
            Outcome::Replied(reply.payload)
        };
        let _ = p.answer.send(outcome);
    }
}

fn shutting_down() -> ApiError {
    ApiError::Unavailable("this node is shutting down: open the inbox on another node".into())
}

fn bounded_reason(reason: &str) -> String {
    if reason.is_empty() {
        return "no reason given".into();
    }
    let mut end = reason.len().min(MAX_REASON_BYTES);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_string()
}
