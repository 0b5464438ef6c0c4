//! The two ends of the registry a call holds: a forwarder's [`Delivery`] and the owner's
//! [`Outbox`] stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use tenure_proto::v1 as pb;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::Status;

use super::{Inboxes, Outcome};

/// One queued delivery, as its forwarder waits for it. Dropping it withdraws the delivery.
pub struct Delivery {
    pub(super) inboxes: Inboxes,
    pub(super) id: u64,
    pub(super) outcome: oneshot::Receiver<Outcome>,
}

impl Delivery {
    /// Waits for the delivery's outcome until `deadline`. Past it, a delivery the owner never
    /// took is `NotDelivered`, one it took is `Unanswered`.
    pub async fn outcome(mut self, deadline: Instant) -> Outcome {
        match tokio::time::timeout_at(deadline, &mut self.outcome).await {
            Ok(Ok(outcome)) => outcome,
            // Every path that forgets a pending delivery settles it first; be safe anyway.
            Ok(Err(_)) => Outcome::Unanswered("the delivery was dropped unsettled".into()),
            Err(_) => match self.inboxes.lock().withdraw(self.id) {
                Some(false) => {
                    Outcome::NotDelivered("the owner's inbox did not take it in time".into())
                }
                Some(true) => Outcome::Unanswered("the owner did not answer in time".into()),
                // Settled as the deadline passed: the outcome is in the channel.
                None => self.outcome.try_recv().unwrap_or_else(|_| {
                    Outcome::Unanswered("the owner did not answer in time".into())
                }),
            },
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.inboxes.lock().withdraw(self.id);
    }
}

/// The owner's side of an inbox: the stream of deliveries its `Serve` call sends. It ends when
/// the inbox is retired; dropping it (the call is over) retires the inbox.
pub struct Outbox {
    pub(super) inboxes: Inboxes,
    pub(super) id: u64,
    pub(super) resource: String,
    pub(super) ended: bool,
    pub(super) on_drop: Option<oneshot::Sender<()>>,
}

impl Outbox {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Resolves when this outbox is dropped (its `Serve` call is over).
    pub fn dropped(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.on_drop = Some(tx);
        rx
    }
}

impl Stream for Outbox {
    type Item = Result<pb::ServeResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let inboxes = self.inboxes.clone();
        let mut guard = inboxes.lock();
        let registry = &mut *guard;
        let id = self.id;
        let Some(inbox) = registry
            .open
            .get_mut(&self.resource)
            .filter(|inbox| inbox.id == id)
        else {
            self.ended = true;
            return Poll::Ready(registry.closed.remove(&id).map(Err));
        };
        // Taking the message out of `pending` is what makes the delivery sent.
        while let Some(delivery) = inbox.queue.pop_front() {
            if let Some(message) = registry
                .pending
                .get_mut(&delivery)
                .and_then(|p| p.message.take())
            {
                return Poll::Ready(Some(Ok(message)));
            }
        }
        inbox.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let mut registry = self.inboxes.lock();
        registry.retire(self.id, &self.resource, None);
        registry.closed.remove(&self.id);
    }
}
