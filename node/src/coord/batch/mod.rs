//! Leader-side proposal batching. Each entry costs the leader an append and a journal
//! fsync, and every follower one too, so a leader taking one entry per command stops at the
//! disk's fsync rate. Commands that arrive while earlier entries are being committed are gathered
//! and committed as one [`Command::Batch`] entry instead: one append, one fsync, one
//! replication round for all of them.
//!
//! Rules:
//! - At most [`IN_FLIGHT`] entries are being committed at once; commands queue meanwhile and
//!   the next entry takes all of them (up to [`MAX_BATCH`]). An idle leader commits a lone
//!   command at once, as before.
//! - No two commands in one entry name the same resource ([`Op::resource_key`]): a later one
//!   waits for the next entry, so every grant on a resource has its own fencing token. A
//!   command naming no single resource commits alone.
//! - One stamp per entry, taken when the entry is formed, so the lease clock sees time once.
//! - Arrival order is kept per resource and across commands naming no resource; between
//!   those, resources take turns, so a busy resource never keeps the others waiting.
//!   Commands wait in one queue per resource ([`Queue`]), so forming an entry costs what it
//!   takes, however many commands wait on one resource.
//! - At most [`MAX_QUEUED`] commands wait; past it a command is refused at once with
//!   `unavailable` and a retry hint ([`NotServed::Busy`]), rather than queue without bound.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::time::Instant;

mod fairness;
mod queue;
#[cfg(test)]
mod tests;

use queue::Queue;

use super::forward::{NotServed, ProposeResult};
use crate::lease::{Command, Proposal, Reply, Stamp};

/// Entries being committed at once: one appending while another replicates.
pub const IN_FLIGHT: usize = 2;
/// Commands in one entry at most.
pub const MAX_BATCH: usize = 256;
/// Commands waiting for an entry at most (the node-wide in-flight caps of three nodes
/// forwarding to one leader stay below it).
pub const MAX_QUEUED: usize = 16_384;

struct Pending {
    /// Its stamp is taken when its entry is formed.
    proposal: Proposal,
    reply: oneshot::Sender<ProposeResult>,
    /// When it joined the queue.
    queued_at: Instant,
    /// What it weighs in its principal's share of the log ([`weight`]).
    weight: usize,
}

impl Pending {
    fn new(proposal: Proposal, reply: oneshot::Sender<ProposeResult>) -> Self {
        Pending {
            weight: weight(&proposal),
            proposal,
            reply,
            queued_at: Instant::now(),
        }
    }
}

/// Bytes of a command that weigh one more in its principal's share of the log.
pub const WEIGHT_BYTES: u64 = 1024;

/// What a command weighs in its principal's share (SPEC §4.22): one, and one more for each
/// [`WEIGHT_BYTES`] of metadata it carries, so that a principal that sends 16 KiB commands
/// gets the bytes, not the count, of one that sends small ones.
fn weight(proposal: &Proposal) -> usize {
    let bytes = proposal
        .op
        .metadata()
        .map_or(0, crate::lease::quota::metadata_cost);
    1 + usize::try_from(bytes / WEIGHT_BYTES).unwrap_or(usize::MAX)
}

/// The queue in front of `client_write`. Cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
    /// Commands sent and not yet taken into an entry.
    waiting: Arc<AtomicUsize>,
}

impl Batcher {
    /// Starts the batching task. `stamp` reads the leader's clocks; `commit` proposes one
    /// command and answers with its applied reply (`Reply::Batch` for a batch).
    pub fn start<S, C, F>(stamp: S, commit: C) -> Batcher
    where
        S: Fn() -> Stamp + Send + 'static,
        C: Fn(Command) -> F + Send + Sync + 'static,
        F: Future<Output = ProposeResult> + Send + 'static,
    {
        let (queue, receiver) = mpsc::unbounded_channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        tokio::spawn(run(receiver, waiting.clone(), stamp, Arc::new(commit)));
        Batcher { queue, waiting }
    }

    /// Commits `proposal`, stamped with the entry's stamp, in the next entry and returns its
    /// own reply.
    pub async fn propose(&self, proposal: Proposal) -> ProposeResult {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(NotServed::Busy(format!(
                "the leader has {MAX_QUEUED} writes waiting for the log; nothing was done: retry with backoff"
            )));
        }
        let (reply, answer) = oneshot::channel();
        if let Err(unsent) = self.queue.send(Pending::new(proposal, reply)) {
            drop(unsent);
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(NotServed::Unavailable("this node is shutting down".into()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(NotServed::Unavailable("this node is shutting down".into())))
    }
}

async fn run<S, C, F>(
    mut receiver: mpsc::UnboundedReceiver<Pending>,
    waiting: Arc<AtomicUsize>,
    stamp: S,
    commit: Arc<C>,
) where
    S: Fn() -> Stamp,
    C: Fn(Command) -> F + Send + Sync + 'static,
    F: Future<Output = ProposeResult> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let committed = Arc::new(Notify::new());
    let mut queue = Queue::default();
    loop {
        if queue.is_empty() {
            match receiver.recv().await {
                Some(first) => queue.push(first),
                None => return,
            }
        }
        // Wait for a free slot; whatever arrives meanwhile joins this entry.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        while let Ok(more) = receiver.try_recv() {
            queue.push(more);
        }
        // Principals over their share wait only while another entry is being committed:
        // an idle log takes anyone's command.
        let hold_back = slots.available_permits() + 1 < IN_FLIGHT;
        let batch = queue.take_batch(hold_back);
        waiting.fetch_sub(queue.take_dropped(), Ordering::SeqCst);
        if batch.is_empty() {
            // All that waits is held back: wait for the entry in flight, or for more.
            drop(slot);
            tokio::select! {
                () = committed.notified() => {}
                more = receiver.recv() => match more {
                    Some(more) => queue.push(more),
                    None => return,
                },
            }
            continue;
        }
        waiting.fetch_sub(batch.len(), Ordering::SeqCst);
        let command = command_of(&batch, stamp());
        let (commit, committed) = (commit.clone(), committed.clone());
        tokio::spawn(async move {
            let result = commit(command).await;
            drop(slot);
            committed.notify_one();
            answer(batch, result);
        });
    }
}

fn stamped(proposal: &Proposal, stamp: Stamp) -> Proposal {
    Proposal {
        stamp,
        ..proposal.clone()
    }
}

fn command_of(batch: &[Pending], stamp: Stamp) -> Command {
    match batch {
        [one] => Command::V1(stamped(&one.proposal, stamp)),
        many => Command::Batch(many.iter().map(|p| stamped(&p.proposal, stamp)).collect()),
    }
}

/// Hands each command of the entry its own reply (or the entry's failure).
fn answer(batch: Vec<Pending>, result: ProposeResult) {
    match result {
        Ok(Reply::Batch(replies)) if replies.len() == batch.len() && batch.len() > 1 => {
            for (pending, reply) in batch.into_iter().zip(replies) {
                let _ = pending.reply.send(Ok(reply));
            }
        }
        Ok(reply) if batch.len() == 1 => {
            if let Some(pending) = batch.into_iter().next() {
                let _ = pending.reply.send(Ok(reply));
            }
        }
        Ok(other) => {
            let why = format!(
                "a batch of {} commands was answered with {other:?}",
                batch.len()
            );
            tracing::error!("{why}");
            for pending in batch {
                let _ = pending.reply.send(Err(NotServed::Unavailable(why.clone())));
            }
        }
        Err(why) => {
            for pending in batch {
                let _ = pending.reply.send(Err(why.clone()));
            }
        }
    }
}
