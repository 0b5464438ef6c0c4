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

use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::time::Instant;

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
    /// When it joined the queue.
    queued_at: Instant,
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
        if let Err(unsent) = self.queue.send(Pending {
            request,
            reply,
            queued_at: Instant::now(),
        }) {
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

/// How each principal has fared in recent entries: averages over about [`HORIZON`] entries
/// of how often it had a command waiting when an entry formed, how many it had waiting, and
/// how many it got into the entry.
#[derive(Clone, Copy, Debug, Default)]
struct Share {
    present: f64,
    depth: f64,
    taken: f64,
}

/// Entries the averages of [`Share`] span.
const HORIZON: f64 = 64.0;
/// A principal with commands waiting at this share of entries or more is contending for the
/// log; one that writes now and then (a heartbeat a second) is not, and paces nobody.
const CONTENDER: f64 = 0.02;
/// The longest a command is held back for its principal's share: well within a call's
/// deadline and the nodes' `--request-timeout`, so that holding back never makes a call time
/// out and come back (a flood of 10,000 waits on one resource would then churn for minutes).
const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// A principal with this many commands waiting, on average, when an entry forms floods: it
/// has more to send than the log takes. Only such a principal is ever held back; one client
/// with a call in flight never has more than one waiting, and is never slowed for its luck.
const FLOODING: f64 = 2.0;
/// How far past the busiest other contender's share a flooding principal may get before it
/// is held back.
const SLACK: f64 = 1.25;

/// Fair shares of the log between principals that contend for it. An entry takes at most
/// as many commands of a principal as the busiest other could give ([`Segment::caps`]),
/// but that alone leaves one with many calls in flight a command in every entry, while a
/// client with one call in flight has one waiting in only some. So a principal that floods
/// (has commands waiting at [`FLOODING`] of entries or more) and has got more than [`SLACK`]
/// times the share of the busiest other contender is held back while another entry is being
/// committed, until the others catch up; alone (no other contender) it is never held back. Its clients' calls wait longer, and it gets about the rate of the
/// busiest other principal: honest clients keep their throughput beside one that floods.
#[derive(Debug, Default)]
struct Fairness {
    shares: HashMap<String, Share>,
}

impl Fairness {
    /// Principals held back now, among `waiting` (those with commands queued).
    fn over_share(&self, waiting: &VecDeque<String>) -> Vec<String> {
        let (mut first, mut second) = ((None::<&str>, 0.0f64), 0.0f64);
        let mut contenders = 0;
        for (principal, share) in &self.shares {
            if share.present < CONTENDER {
                continue;
            }
            contenders += 1;
            if share.taken > first.1 {
                second = first.1;
                first = (Some(principal.as_str()), share.taken);
            } else if share.taken > second {
                second = share.taken;
            }
        }
        waiting
            .iter()
            .filter(|principal| {
                let Some(mine) = self.shares.get(principal.as_str()) else {
                    return false;
                };
                if mine.depth < FLOODING {
                    return false;
                }
                let me_contending = usize::from(mine.present >= CONTENDER);
                if contenders <= me_contending {
                    return false;
                }
                let others = if first.0 == Some(principal.as_str()) {
                    second
                } else {
                    first.1
                };
                mine.taken > SLACK * others + 1.0 / HORIZON
            })
            .cloned()
            .collect()
    }

    /// After an entry formed: `waiting` had that many commands queued, `taken` got that
    /// many in.
    fn record(&mut self, waiting: &[(String, usize)], taken: &[(String, usize)]) {
        let keep = 1.0 - 1.0 / HORIZON;
        for share in self.shares.values_mut() {
            share.present *= keep;
            share.depth *= keep;
            share.taken *= keep;
        }
        for (principal, n) in waiting {
            let share = self.shares.entry(principal.clone()).or_default();
            share.present += 1.0 / HORIZON;
            share.depth += *n as f64 / HORIZON;
        }
        for (principal, n) in taken {
            self.shares.entry(principal.clone()).or_default().taken += *n as f64 / HORIZON;
        }
        self.shares
            .retain(|_, share| share.present > 1e-3 || share.taken > 1e-3);
    }
}

/// Commands that may share entries: those that arrived between two commands naming no
/// resource. The queue is a run of these; the one at the front is being committed.
#[derive(Default)]
struct Segment {
    /// Principals whose commands head some resource's queue, in turn.
    principals: VecDeque<String>,
    /// Per principal, the resources whose oldest waiting command is its own, in turn.
    turns: HashMap<String, VecDeque<String>>,
    /// Per resource, its waiting commands in arrival order (of any principal).
    by_resource: HashMap<String, VecDeque<Pending>>,
    /// Per principal, how many of its commands wait in `by_resource`.
    queued: HashMap<String, usize>,
    /// The command naming no resource that closes the segment: alone in its entry, after
    /// every command before it and before every command after it.
    then: Option<Pending>,
}

impl Segment {
    /// Whether `principal`'s oldest waiting command (its first turn's) has waited
    /// [`MAX_HOLD`] or more.
    fn oldest_is_due(&self, principal: &str) -> bool {
        self.turns
            .get(principal)
            .and_then(|turns| turns.front())
            .and_then(|resource| self.by_resource.get(resource))
            .and_then(|waiting| waiting.front())
            .is_some_and(|head| head.queued_at.elapsed() >= MAX_HOLD)
    }

    /// `resource`, whose oldest waiting command is now `principal`'s, takes its turn.
    fn enqueue(&mut self, principal: &str, resource: String) {
        let turns = self.turns.entry(principal.to_string()).or_default();
        if turns.is_empty() {
            self.principals.push_back(principal.to_string());
        }
        turns.push_back(resource);
    }

    /// How many commands each principal may put in the next entry: as many as the busiest
    /// of the others could (at least one); no bound when it is alone. A principal with more
    /// waiting than everyone else together is paced to the others' rate, so that it cannot
    /// take the log (and every node's time) from them: one flooding principal beside
    /// clients with a call or two in flight each gets about one command per entry.
    fn caps(&self) -> impl Fn(&str) -> usize + '_ {
        let (mut first, mut second) = (("", 0), 0);
        for principal in &self.principals {
            let waiting = self.turns.get(principal).map_or(0, VecDeque::len);
            if waiting > first.1 {
                second = first.1;
                first = (principal.as_str(), waiting);
            } else if waiting > second {
                second = waiting;
            }
        }
        let alone = self.principals.len() <= 1;
        move |principal: &str| {
            if alone {
                usize::MAX
            } else if principal == first.0 {
                second.max(1)
            } else {
                first.1.max(1)
            }
        }
    }
}

/// Commands waiting for an entry, in segments. Arrival order is kept per resource and across
/// every command that names no resource; within a segment principals take turns, and each
/// principal's resources take turns, so no resource and no principal, however busy, keeps
/// the others (or the next segment) waiting.
#[derive(Default)]
struct Queue {
    segments: VecDeque<Segment>,
    len: usize,
    /// Commands dropped because their callers went away, not yet counted off the batcher's
    /// `waiting`.
    dropped: usize,
    fairness: Fairness,
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
        match pending.request.op.resource_key().map(str::to_string) {
            None => last.then = Some(pending),
            Some(name) => {
                let waiting = last.by_resource.entry(name.clone()).or_default();
                let first = waiting.is_empty();
                let principal = pending.request.principal.clone();
                waiting.push_back(pending);
                *last.queued.entry(principal.clone()).or_default() += 1;
                if first {
                    last.enqueue(&principal, name);
                }
            }
        }
    }

    /// The next entry's commands: up to [`MAX_BATCH`] naming distinct resources, each its
    /// resource's oldest, the principals taking turns up to their [`Segment::caps`] (none
    /// for a principal over its share, with `hold_back`: see [`Fairness`]); or, once the
    /// segment's commands are all taken, the command naming no resource that closes it.
    /// Empty when all that waits is held back. O(commands taken + principals waiting).
    fn take_batch(&mut self, hold_back: bool) -> Vec<Pending> {
        loop {
            let before = self.dropped;
            let batch = self.take_once(hold_back);
            // Dropping a gone caller's command can leave this turn empty: take again.
            if !batch.is_empty() || self.dropped == before || self.is_empty() {
                return batch;
            }
        }
    }

    fn take_once(&mut self, hold_back: bool) -> Vec<Pending> {
        let mut batch = Vec::new();
        let Some(front) = self.segments.front_mut() else {
            return batch;
        };
        let mut held = if hold_back {
            self.fairness.over_share(&front.principals)
        } else {
            Vec::new()
        };
        // No command waits longer than MAX_HOLD for its principal's share: a held principal
        // whose oldest command has waited that long takes its turn.
        held.retain(|principal| !front.oldest_is_due(principal));
        let cap = front.caps();
        let caps: Vec<(String, usize)> = front
            .principals
            .iter()
            .map(|p| (p.clone(), if held.contains(p) { 0 } else { cap(p) }))
            .collect();
        drop(cap);
        let waiting: Vec<(String, usize)> = front
            .queued
            .iter()
            .map(|(principal, n)| (principal.clone(), *n))
            .collect();
        // Taken resources, whose next command (if any) takes its turn after this entry.
        let mut again = Vec::new();
        let mut dropped = Vec::new();
        let mut taken = vec![0usize; caps.len()];
        let mut more = true;
        while more && batch.len() < MAX_BATCH {
            more = false;
            for (i, (principal, cap)) in caps.iter().enumerate() {
                if batch.len() == MAX_BATCH {
                    break;
                }
                if taken[i] == *cap {
                    continue;
                }
                let Some(turns) = front.turns.get_mut(principal) else {
                    continue;
                };
                let Some(name) = turns.pop_front() else {
                    continue;
                };
                let Some(waiting) = front.by_resource.get_mut(&name) else {
                    continue;
                };
                // A command whose caller went away (a client, or a node forwarding for one,
                // that gave up) is dropped, never committed: no outcome was promised, and a
                // retry with the same request id is queued anew.
                while waiting.front().is_some_and(|head| head.reply.is_closed()) {
                    if let Some(gone) = waiting.pop_front() {
                        dropped.push(gone.request.principal);
                    }
                }
                if waiting
                    .front()
                    .is_some_and(|head| head.request.principal == *principal)
                {
                    if let Some(pending) = waiting.pop_front() {
                        batch.push(pending);
                        taken[i] += 1;
                    }
                }
                more |= taken[i] < *cap && !turns.is_empty();
                match waiting.front() {
                    None => {
                        front.by_resource.remove(&name);
                    }
                    Some(next) => again.push((next.request.principal.clone(), name)),
                }
            }
        }
        if !batch.is_empty() {
            let counts: Vec<(String, usize)> = counts_of(&caps, &taken)
                .map(|(principal, n)| (principal.clone(), n))
                .collect();
            self.fairness.record(&waiting, &counts);
        }
        let gone = dropped.iter().map(|principal| (principal, 1));
        for (principal, n) in counts_of(&caps, &taken).chain(gone) {
            if let Some(queued) = front.queued.get_mut(principal) {
                *queued -= n;
                if *queued == 0 {
                    front.queued.remove(principal);
                }
            }
        }
        self.dropped += dropped.len();
        // Principals served in this entry go behind those that were not; a principal with
        // nothing left at the head of a resource leaves the turns.
        let (served, waited): (Vec<_>, Vec<_>) = caps
            .into_iter()
            .zip(taken)
            .partition(|(_, taken)| *taken > 0);
        front.principals = waited
            .into_iter()
            .chain(served)
            .map(|((principal, _), _)| principal)
            .filter(|principal| front.turns.get(principal).is_some_and(|t| !t.is_empty()))
            .collect();
        front.turns.retain(|_, turns| !turns.is_empty());
        for (principal, name) in again {
            front.enqueue(&principal, name);
        }
        if batch.is_empty() && front.principals.is_empty() {
            if let Some(alone) = front.then.take() {
                batch.push(alone);
            }
        }
        if front.principals.is_empty() && front.then.is_none() {
            self.segments.pop_front();
        }
        self.len -= batch.len() + dropped.len();
        batch
    }

    /// Commands dropped since the last call because their callers went away.
    fn take_dropped(&mut self) -> usize {
        std::mem::take(&mut self.dropped)
    }
}

/// `(principal, commands taken)` of the principals that got some.
fn counts_of<'a>(
    caps: &'a [(String, usize)],
    taken: &'a [usize],
) -> impl Iterator<Item = (&'a String, usize)> + 'a {
    caps.iter()
        .zip(taken)
        .filter(|(_, n)| **n > 0)
        .map(|((principal, _), n)| (principal, *n))
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

    /// A reply channel whose caller stays (its receiver is never dropped).
    fn kept() -> oneshot::Sender<ProposeResult> {
        let (reply, answer) = oneshot::channel();
        std::mem::forget(answer);
        reply
    }

    /// A command whose caller went away is never committed; the one behind it on the same
    /// resource is, and the batcher's count of waiting commands drops by both.
    #[test]
    fn a_command_whose_caller_went_away_is_dropped() {
        let mut queue = Queue::default();
        let mut gone = release("a");
        gone.request_id = Some("gone".into());
        queue.push(Pending {
            request: gone,
            reply: oneshot::channel().0,
            queued_at: Instant::now(),
        });
        queue.push(Pending {
            request: by("q", "a"),
            reply: kept(),
            queued_at: Instant::now(),
        });
        let batch = queue.take_batch(false);
        assert_eq!(principals(&batch), ["q"]);
        assert_eq!(queue.take_dropped(), 1);
        assert!(queue.is_empty());
        assert!(queue.take_batch(false).is_empty());
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
                reply: kept(),
                queued_at: Instant::now(),
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
        assert_eq!(keys(&queue.take_batch(false)), ["a", "b", "c"]);
        assert_eq!(keys(&queue.take_batch(false)), ["a"]);
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
        let first = queue.take_batch(false);
        assert_eq!(keys(&first), ["hot", "cold"]);
        for i in 1..20_000 {
            let batch = queue.take_batch(false);
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
        assert_eq!(keys(&queue.take_batch(false)), ["a"]);
        assert_eq!(keys(&queue.take_batch(false)), ["-"]);
        assert_eq!(keys(&queue.take_batch(false)), ["b"]);
        // Also for a resource named on both sides of it.
        let mut queue = queued(vec![release("a"), tick(), release("a")]);
        assert_eq!(keys(&queue.take_batch(false)), ["a"]);
        assert_eq!(keys(&queue.take_batch(false)), ["-"]);
        assert_eq!(keys(&queue.take_batch(false)), ["a"]);
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
                reply: kept(),
                queued_at: Instant::now(),
            });
            seen.push(keys(&queue.take_batch(false)));
        }
        assert_eq!(seen[..3], [vec!["hot"], vec!["hot"], vec!["-"]]);
        assert_eq!(seen[3], ["cold", "hot"]);
        let names: Vec<String> = (0..MAX_BATCH + 10).map(|i| format!("r{i}")).collect();
        let mut queue = queued(names.iter().chain(&names).map(|n| release(n)).collect());
        let first = keys(&queue.take_batch(false));
        let second = keys(&queue.take_batch(false));
        assert_eq!(first.len(), MAX_BATCH);
        // The ten that did not fit go first, then the others' second commands.
        assert_eq!(second[..10], names[MAX_BATCH..]);
    }

    fn by(principal: &str, resource: &str) -> ProposeRequest {
        ProposeRequest {
            principal: principal.into(),
            ..release(resource)
        }
    }

    fn principals(batch: &[Pending]) -> Vec<String> {
        batch.iter().map(|p| p.request.principal.clone()).collect()
    }

    /// One principal with many commands waiting beside others with one each gets one per
    /// entry, as they do; alone, it gets the whole entry; two busy principals share evenly.
    #[test]
    fn a_flooding_principal_is_paced_to_the_others() {
        let mut requests: Vec<ProposeRequest> =
            (0..16).map(|i| by("noisy", &format!("n{i}"))).collect();
        requests.extend((0..4).map(|i| by(&format!("honest-{i}"), &format!("h{i}"))));
        let mut queue = queued(requests);
        let first = principals(&queue.take_batch(false));
        assert_eq!(first.iter().filter(|p| *p == "noisy").count(), 1);
        assert_eq!(first.len(), 5, "{first:?}");
        // The honest ones are served: the noisy principal is alone now.
        let second = principals(&queue.take_batch(false));
        assert_eq!(second, vec!["noisy"; 15]);
        assert!(queue.is_empty());

        let mut requests: Vec<ProposeRequest> = Vec::new();
        for i in 0..300 {
            requests.push(by("a", &format!("a{i}")));
            requests.push(by("b", &format!("b{i}")));
        }
        requests.push(by("c", "c0"));
        let mut queue = queued(requests);
        let batch = principals(&queue.take_batch(false));
        assert_eq!(batch.len(), MAX_BATCH);
        let count = |who: &str| batch.iter().filter(|p| *p == who).count();
        assert_eq!(count("c"), 1);
        assert!(
            count("a").abs_diff(count("b")) <= 1,
            "{} {}",
            count("a"),
            count("b")
        );
    }

    /// Beside principals that each have a command waiting at every fourth entry, one that
    /// always has sixteen waiting gets about their rate while entries are being committed,
    /// not one command in every entry; alone, or with the log idle, it is not held back.
    #[test]
    fn a_flooding_principal_gets_about_the_share_of_the_busiest_other() {
        let mut queue = Queue::default();
        let push = |queue: &mut Queue, principal: &str, resource: String| {
            queue.push(Pending {
                request: by(principal, &resource),
                reply: kept(),
                queued_at: Instant::now(),
            })
        };
        let mut got: HashMap<String, usize> = HashMap::new();
        let (mut noisy_waiting, mut fresh) = (0, 0);
        for entry in 0..2000 {
            while noisy_waiting < 16 {
                fresh += 1;
                push(&mut queue, "noisy", format!("n{fresh}"));
                noisy_waiting += 1;
            }
            push(
                &mut queue,
                &format!("honest-{}", entry % 4),
                format!("h{entry}"),
            );
            for principal in principals(&queue.take_batch(true)) {
                noisy_waiting -= usize::from(principal == "noisy");
                *got.entry(principal).or_default() += 1;
            }
        }
        let honest: Vec<usize> = (0..4).map(|h| got[&format!("honest-{h}")]).collect();
        assert!(honest.iter().all(|n| *n == 500), "{honest:?}");
        let noisy = got["noisy"];
        assert!(
            (250..=750).contains(&noisy),
            "noisy got {noisy}, honest {honest:?}"
        );

        // Alone, it fills the entry.
        let mut alone = Queue::default();
        for i in 0..2000 {
            push(&mut alone, "noisy", format!("a{i}"));
            if i % 16 == 15 {
                assert_eq!(alone.take_batch(true).len(), 16);
            }
        }
        // Clients with one call in flight each are never held back, however often they have
        // it waiting and however unevenly they are served.
        let mut steady = Queue::default();
        let mut served: HashMap<String, usize> = HashMap::new();
        for entry in 0..500 {
            for h in 0..8 {
                if entry == 0 || served.get(&format!("one-{h}")).copied().unwrap_or(0) == entry {
                    push(&mut steady, &format!("one-{h}"), format!("s{h}-{entry}"));
                }
            }
            for principal in principals(&steady.take_batch(true)) {
                *served.entry(principal).or_default() += 1;
            }
        }
        assert!(served.values().all(|n| *n == 500), "{served:?}");
        // With the log idle (no hold back), the one over its share is served too.
        push(&mut queue, "honest-0", "last".into());
        let batch = principals(&queue.take_batch(false));
        assert!(batch.contains(&"noisy".to_string()), "{batch:?}");
    }

    /// A principal over its share waits, but no command of it longer than `MAX_HOLD`.
    #[test]
    fn a_held_principal_takes_its_turn_once_its_oldest_command_has_waited_max_hold() {
        let trained = || {
            let mut queue = Queue::default();
            let shares = &mut queue.fairness.shares;
            let share = |present, depth, taken| Share {
                present,
                depth,
                taken,
            };
            shares.insert("noisy".into(), share(1.0, 16.0, 1.0));
            shares.insert("honest".into(), share(0.5, 1.0, 0.1));
            queue
        };
        let pending = |principal: &str, resource: &str, waited: std::time::Duration| Pending {
            request: by(principal, resource),
            reply: kept(),
            queued_at: Instant::now() - waited,
        };
        let mut fresh = trained();
        fresh.push(pending("noisy", "n1", std::time::Duration::ZERO));
        fresh.push(pending("honest", "h1", std::time::Duration::ZERO));
        assert_eq!(principals(&fresh.take_batch(true)), ["honest"]);
        let mut due = trained();
        due.push(pending("noisy", "n1", MAX_HOLD));
        due.push(pending("honest", "h1", std::time::Duration::ZERO));
        let mut batch = principals(&due.take_batch(true));
        batch.sort();
        assert_eq!(batch, ["honest", "noisy"]);
    }

    /// Commands of different principals on one resource keep their arrival order, one per
    /// entry, whoever sent them.
    #[test]
    fn one_resource_keeps_arrival_order_across_principals() {
        let mut queue = queued(vec![by("a", "x"), by("b", "x"), by("a", "x"), by("b", "y")]);
        let order: Vec<(String, String)> = std::iter::from_fn(|| {
            let batch = queue.take_batch(false);
            (!batch.is_empty()).then_some(batch)
        })
        .flatten()
        .map(|p| {
            (
                p.request.principal.clone(),
                p.request.op.resource_key().unwrap_or("-").to_string(),
            )
        })
        .collect();
        let on_x: Vec<&str> = order
            .iter()
            .filter(|(_, r)| r == "x")
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(on_x, ["a", "b", "a"]);
        assert_eq!(order.len(), 4);
    }

    #[test]
    fn an_entry_holds_at_most_max_batch_commands() {
        let names: Vec<String> = (0..MAX_BATCH + 3).map(|i| format!("r{i}")).collect();
        let mut queue = queued(names.iter().map(|n| release(n)).collect());
        assert_eq!(queue.take_batch(false).len(), MAX_BATCH);
        assert_eq!(keys(&queue.take_batch(false)), ["r256", "r257", "r258"]);
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
