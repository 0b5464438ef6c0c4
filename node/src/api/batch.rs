//! Leader-side proposal batching. openraft 0.9 appends (and fsyncs) each `client_write` on
//! its own, one at a time, so a leader taking one entry per command stops at the disk's
//! fsync rate. Commands that arrive while earlier entries are being committed are gathered
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

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::forward::{NotServed, ProposeRequest, ProposeResult};
use crate::lease::{Command, Proposal, Reply, Stamp};

/// Entries being committed at once: one appending while another replicates.
pub const IN_FLIGHT: usize = 2;
/// Commands in one entry at most.
pub const MAX_BATCH: usize = 256;
/// Commands waiting for an entry at most (the node-wide in-flight caps of three nodes
/// forwarding to one leader stay below it).
pub const MAX_QUEUED: usize = 16_384;

struct Pending {
    request: ProposeRequest,
    reply: oneshot::Sender<ProposeResult>,
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

    /// Commits `request` in the next entry and returns its own reply.
    pub async fn propose(&self, request: ProposeRequest) -> ProposeResult {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(NotServed::Busy(format!(
                "the leader has {MAX_QUEUED} writes waiting for the log; nothing was done: retry with backoff"
            )));
        }
        let (reply, answer) = oneshot::channel();
        if let Err(unsent) = self.queue.send(Pending { request, reply }) {
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
        let batch = queue.take_batch();
        waiting.fetch_sub(batch.len(), Ordering::SeqCst);
        let command = command_of(&batch, stamp());
        let commit = commit.clone();
        tokio::spawn(async move {
            let result = commit(command).await;
            drop(slot);
            answer(batch, result);
        });
    }
}

/// Commands that may share entries: those that arrived between two commands naming no
/// resource. The queue is a run of these; the one at the front is being committed.
#[derive(Default)]
struct Segment {
    /// Resources with commands waiting, in turn: each entry takes the first waiting command
    /// of up to [`MAX_BATCH`] of them, and a resource with more goes to the back.
    turns: VecDeque<String>,
    by_resource: HashMap<String, VecDeque<Pending>>,
    /// The command naming no resource that closes the segment: alone in its entry, after
    /// every command before it and before every command after it.
    then: Option<Pending>,
}

/// Commands waiting for an entry, in segments. Arrival order is kept per resource and across
/// every command that names no resource; within a segment resources take turns, so no
/// resource, however busy, keeps the others (or the next segment) waiting.
#[derive(Default)]
struct Queue {
    segments: VecDeque<Segment>,
    len: usize,
}

impl Queue {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, pending: Pending) {
        self.len += 1;
        if self.segments.back().is_none_or(|s| s.then.is_some()) {
            self.segments.push_back(Segment::default());
        }
        let Some(last) = self.segments.back_mut() else {
            return;
        };
        match pending.request.op.resource_key() {
            None => last.then = Some(pending),
            Some(name) => {
                let waiting = last.by_resource.entry(name.to_string()).or_default();
                if waiting.is_empty() {
                    last.turns.push_back(name.to_string());
                }
                waiting.push_back(pending);
            }
        }
    }

    /// The next entry's commands: up to [`MAX_BATCH`] naming distinct resources, each its
    /// resource's oldest, or, once the segment's commands are all taken, the command naming
    /// no resource that closes it. O(commands taken).
    fn take_batch(&mut self) -> Vec<Pending> {
        let mut batch = Vec::new();
        let Some(front) = self.segments.front_mut() else {
            return batch;
        };
        let mut again = Vec::new();
        while batch.len() < MAX_BATCH {
            let Some(name) = front.turns.pop_front() else {
                break;
            };
            let Some(waiting) = front.by_resource.get_mut(&name) else {
                continue;
            };
            if let Some(pending) = waiting.pop_front() {
                batch.push(pending);
            }
            if waiting.is_empty() {
                front.by_resource.remove(&name);
            } else {
                again.push(name);
            }
        }
        front.turns.extend(again);
        if batch.is_empty() {
            if let Some(alone) = front.then.take() {
                batch.push(alone);
            }
        }
        if front.turns.is_empty() && front.then.is_none() {
            self.segments.pop_front();
        }
        self.len -= batch.len();
        batch
    }
}

fn proposal(request: &ProposeRequest, stamp: Stamp) -> Proposal {
    Proposal {
        stamp,
        principal: request.principal.clone(),
        admin: request.admin,
        request_id: request.request_id.clone(),
        require_registration: request.require_registration,
        op: request.op.clone(),
    }
}

fn command_of(batch: &[Pending], stamp: Stamp) -> Command {
    match batch {
        [one] => Command::V1(proposal(&one.request, stamp)),
        many => Command::Batch(many.iter().map(|p| proposal(&p.request, stamp)).collect()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Op, ReleaseOp};
    use std::sync::Mutex;

    fn release(resource: &str) -> ProposeRequest {
        ProposeRequest {
            principal: "p".into(),
            admin: false,
            request_id: None,
            require_registration: false,
            op: Op::Release(ReleaseOp {
                resource: resource.into(),
                lease_id: String::new(),
                holder: "h".into(),
                fencing_token: 1,
            }),
        }
    }

    fn tick() -> ProposeRequest {
        ProposeRequest {
            op: Op::Tick,
            ..release("unused")
        }
    }

    fn queued(requests: Vec<ProposeRequest>) -> Queue {
        let mut queue = Queue::default();
        for request in requests {
            queue.push(Pending {
                request,
                reply: oneshot::channel().0,
            });
        }
        queue
    }

    fn keys(batch: &[Pending]) -> Vec<String> {
        batch
            .iter()
            .map(|p| p.request.op.resource_key().unwrap_or("-").to_string())
            .collect()
    }

    #[test]
    fn a_resource_named_twice_waits_for_the_next_entry_in_order() {
        let mut queue = queued(vec![release("a"), release("b"), release("a"), release("c")]);
        assert_eq!(keys(&queue.take_batch()), ["a", "b", "c"]);
        assert_eq!(keys(&queue.take_batch()), ["a"]);
        assert!(queue.is_empty());
    }

    /// Thousands of commands on one resource leave the queue one per entry, in order, each
    /// entry formed without looking through the rest; other resources share those entries.
    #[test]
    fn many_commands_on_one_resource_leave_one_per_entry_in_order() {
        let mut requests: Vec<ProposeRequest> = Vec::new();
        for i in 0..20_000 {
            let mut hot = release("hot");
            hot.request_id = Some(format!("{i}"));
            requests.push(hot);
        }
        requests.push(release("cold"));
        let mut queue = queued(requests);
        let first = queue.take_batch();
        assert_eq!(keys(&first), ["hot", "cold"]);
        for i in 1..20_000 {
            let batch = queue.take_batch();
            assert_eq!(batch.len(), 1);
            assert_eq!(batch[0].request.request_id, Some(format!("{i}")));
        }
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn past_the_bound_a_command_is_refused_at_once_with_a_retry_hint() {
        // A commit that never ends: every command stays queued.
        let batcher = Batcher::start(Stamp::default, |_command: Command| {
            std::future::pending::<ProposeResult>()
        });
        batcher.waiting.store(MAX_QUEUED, Ordering::SeqCst);
        // Refused at once: it never waits for the commit that never ends.
        let refused = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            batcher.propose(release("a")),
        )
        .await;
        match refused {
            Ok(Err(NotServed::Busy(detail))) => assert!(detail.contains("retry"), "{detail}"),
            other => panic!("expected busy, got {other:?}"),
        }
        assert_eq!(batcher.waiting.load(Ordering::SeqCst), MAX_QUEUED);
    }

    #[test]
    fn a_command_without_a_resource_commits_alone_and_keeps_its_place() {
        let mut queue = queued(vec![release("a"), tick(), release("b")]);
        assert_eq!(keys(&queue.take_batch()), ["a"]);
        assert_eq!(keys(&queue.take_batch()), ["-"]);
        assert_eq!(keys(&queue.take_batch()), ["b"]);
        // Also for a resource named on both sides of it.
        let mut queue = queued(vec![release("a"), tick(), release("a")]);
        assert_eq!(keys(&queue.take_batch()), ["a"]);
        assert_eq!(keys(&queue.take_batch()), ["-"]);
        assert_eq!(keys(&queue.take_batch()), ["a"]);
        assert!(queue.is_empty());
    }

    /// A resource that gets a new command for every entry keeps neither a later command
    /// naming no resource nor the resources queued behind that one waiting for ever; and
    /// more busy resources than an entry holds take turns.
    #[test]
    fn a_busy_resource_starves_nobody() {
        let mut queue = queued(vec![
            release("hot"),
            release("hot"),
            tick(),
            release("cold"),
        ]);
        let mut seen = Vec::new();
        for _ in 0..6 {
            queue.push(Pending {
                request: release("hot"),
                reply: oneshot::channel().0,
            });
            seen.push(keys(&queue.take_batch()));
        }
        assert_eq!(seen[..3], [vec!["hot"], vec!["hot"], vec!["-"]]);
        assert_eq!(seen[3], ["cold", "hot"]);
        let names: Vec<String> = (0..MAX_BATCH + 10).map(|i| format!("r{i}")).collect();
        let mut queue = queued(names.iter().chain(&names).map(|n| release(n)).collect());
        let first = keys(&queue.take_batch());
        let second = keys(&queue.take_batch());
        assert_eq!(first.len(), MAX_BATCH);
        // The ten that did not fit go first, then the others' second commands.
        assert_eq!(second[..10], names[MAX_BATCH..]);
    }

    #[test]
    fn an_entry_holds_at_most_max_batch_commands() {
        let names: Vec<String> = (0..MAX_BATCH + 3).map(|i| format!("r{i}")).collect();
        let mut queue = queued(names.iter().map(|n| release(n)).collect());
        assert_eq!(queue.take_batch().len(), MAX_BATCH);
        assert_eq!(keys(&queue.take_batch()), ["r256", "r257", "r258"]);
    }

    /// Commands sent while the first entry is being committed share the next entry, and
    /// each gets the reply at its own position.
    #[tokio::test]
    async fn commands_queued_behind_a_commit_share_one_entry_and_get_their_own_replies() {
        let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
        let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
        let recorded = seen.clone();
        let batcher = Batcher::start(Stamp::default, move |command: Command| {
            let recorded = recorded.clone();
            let mut gate = gate_rx.clone();
            async move {
                let replies: Vec<Reply> = match &command {
                    Command::V1(_) => vec![Reply::Cancelled {
                        cancelled: true,
                        revision: 0,
                    }],
                    Command::Batch(all) => (0..all.len())
                        .map(|i| Reply::Cancelled {
                            cancelled: true,
                            revision: i as u64,
                        })
                        .collect(),
                };
                recorded.lock().expect("lock").push(replies.len());
                // Hold every commit until the test opens the gate.
                let _ = gate.wait_for(|open| *open).await;
                Ok(match command {
                    Command::V1(_) => replies.into_iter().next().expect("one"),
                    Command::Batch(_) => Reply::Batch(replies),
                })
            }
        });
        // Fill both in-flight slots with lone commands, then queue five more.
        let mut calls = tokio::task::JoinSet::new();
        for (k, name) in ["x", "y"].into_iter().enumerate() {
            let b = batcher.clone();
            calls.spawn(async move { b.propose(release(name)).await });
            while seen.lock().expect("lock").len() <= k {
                tokio::task::yield_now().await;
            }
        }
        let mut later = Vec::new();
        for i in 0..5 {
            let b = batcher.clone();
            later.push(tokio::spawn(async move {
                b.propose(release(&format!("r{i}"))).await
            }));
            tokio::task::yield_now().await;
        }
        gate_tx.send_replace(true);
        let mut revisions = Vec::new();
        for call in later {
            match call.await.expect("join") {
                Ok(Reply::Cancelled { revision, .. }) => revisions.push(revision),
                other => panic!("unexpected {other:?}"),
            }
        }
        while calls.join_next().await.is_some() {}
        assert_eq!(*seen.lock().expect("lock"), [1, 1, 5]);
        assert_eq!(revisions, [0, 1, 2, 3, 4]);
    }
}
