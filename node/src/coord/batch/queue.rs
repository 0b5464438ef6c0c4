//! The commands waiting for an entry ([`Queue`]), and how an entry takes them.

use std::collections::{HashMap, VecDeque};

use super::fairness::{Fairness, MAX_HOLD};
use super::{Pending, MAX_BATCH};

/// Commands that may share entries: those that arrived between two commands naming no
/// resource. The queue is a run of these; the one at the front is being committed.
#[derive(Default)]
pub(super) struct Segment {
    /// Principals whose commands head some resource's queue, in turn.
    principals: VecDeque<String>,
    /// Per principal, the resources whose oldest waiting command is its own, in turn.
    turns: HashMap<String, VecDeque<String>>,
    /// Per resource, its waiting commands in arrival order (of any principal).
    by_resource: HashMap<String, VecDeque<Pending>>,
    /// Per principal, how many of its commands wait in `by_resource`, and what they weigh
    /// (`super::weight`).
    queued: HashMap<String, usize>,
    weights: HashMap<String, usize>,
    /// The command naming no resource that closes the segment: alone in its entry, after
    /// every command before it and before every command after it.
    then: Option<Pending>,
}

impl Segment {
    /// Whether `principal`'s oldest waiting command (its first turn's) has waited
    /// [`MAX_HOLD`] or more.
    pub(super) fn oldest_is_due(&self, principal: &str) -> bool {
        self.turns
            .get(principal)
            .and_then(|turns| turns.front())
            .and_then(|resource| self.by_resource.get(resource))
            .and_then(|waiting| waiting.front())
            .is_some_and(|head| head.queued_at.elapsed() >= MAX_HOLD)
    }

    /// `resource`, whose oldest waiting command is now `principal`'s, takes its turn.
    pub(super) fn enqueue(&mut self, principal: &str, resource: String) {
        let turns = self.turns.entry(principal.to_string()).or_default();
        if turns.is_empty() {
            self.principals.push_back(principal.to_string());
        }
        turns.push_back(resource);
    }

    /// What weight of commands each principal may put in the next entry: as much as the
    /// busiest of the others could (and at least one command); no bound when it is alone.
    /// A principal with more waiting than everyone else together is paced to the others'
    /// rate, so that it cannot take the log (and every node's time and disk) from them: one
    /// flooding principal beside clients with a call or two in flight each gets about one
    /// small command, or its bytes, per entry.
    pub(super) fn caps(&self) -> impl Fn(&str) -> usize + '_ {
        let (mut first, mut second) = (("", 0), 0);
        for principal in &self.principals {
            // One command per resource it heads, of its commands' average weight.
            let heads = self.turns.get(principal).map_or(0, VecDeque::len);
            let count = self.queued.get(principal).copied().unwrap_or(0).max(1);
            let weight = self.weights.get(principal).copied().unwrap_or(0);
            let waiting = heads.saturating_mul(weight.div_ceil(count).max(1));
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
pub(super) struct Queue {
    segments: VecDeque<Segment>,
    len: usize,
    /// Commands dropped because their callers went away, not yet counted off the batcher's
    /// `waiting`.
    dropped: usize,
    pub(super) fairness: Fairness,
}

impl Queue {
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push(&mut self, pending: Pending) {
        self.len += 1;
        if self.segments.back().is_none_or(|s| s.then.is_some()) {
            self.segments.push_back(Segment::default());
        }
        let Some(last) = self.segments.back_mut() else {
            return;
        };
        match pending.proposal.op.resource_key().map(str::to_string) {
            None => last.then = Some(pending),
            Some(name) => {
                let waiting = last.by_resource.entry(name.clone()).or_default();
                let first = waiting.is_empty();
                let principal = pending.proposal.principal.clone();
                *last.weights.entry(principal.clone()).or_default() += pending.weight;
                waiting.push_back(pending);
                *last.queued.entry(principal.clone()).or_default() += 1;
                if first {
                    last.enqueue(&principal, name);
                }
            }
        }
    }

    /// The next entry's commands: up to [`MAX_BATCH`] naming distinct resources, each its
    /// resource's oldest, the principals taking turns up to the weight of their
    /// [`Segment::caps`] (none for a principal over its share, with `hold_back`: see
    /// [`Fairness`], which weighs shares too); or, once the
    /// segment's commands are all taken, the command naming no resource that closes it.
    /// Empty when all that waits is held back. O(commands taken + principals waiting).
    pub(super) fn take_batch(&mut self, hold_back: bool) -> Vec<Pending> {
        loop {
            let before = self.dropped;
            let batch = self.take_once(hold_back);
            // Dropping a gone caller's command can leave this turn empty: take again.
            if !batch.is_empty() || self.dropped == before || self.is_empty() {
                return batch;
            }
        }
    }

    pub(super) fn take_once(&mut self, hold_back: bool) -> Vec<Pending> {
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
        // Per principal: commands taken, and their weight.
        let mut taken = vec![0usize; caps.len()];
        let mut weighed = vec![0usize; caps.len()];
        let mut full = vec![false; caps.len()];
        let mut more = true;
        while more && batch.len() < MAX_BATCH {
            more = false;
            for (i, (principal, cap)) in caps.iter().enumerate() {
                if batch.len() == MAX_BATCH {
                    break;
                }
                if full[i] || weighed[i] >= *cap {
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
                        dropped.push((gone.proposal.principal, gone.weight));
                    }
                }
                let head = waiting
                    .front()
                    .filter(|head| head.proposal.principal == *principal);
                // Past its cap's weight a principal waits for the next entry (its first
                // command goes whatever it weighs).
                if head.is_some_and(|head| taken[i] > 0 && weighed[i] + head.weight > *cap) {
                    turns.push_front(name);
                    full[i] = true;
                    continue;
                }
                if head.is_some() {
                    if let Some(pending) = waiting.pop_front() {
                        weighed[i] += pending.weight;
                        batch.push(pending);
                        taken[i] += 1;
                    }
                }
                more |= weighed[i] < *cap && !turns.is_empty();
                match waiting.front() {
                    None => {
                        front.by_resource.remove(&name);
                    }
                    Some(next) => again.push((next.proposal.principal.clone(), name)),
                }
            }
        }
        if !batch.is_empty() {
            let weights: Vec<(String, usize)> = counts_of(&caps, &weighed)
                .map(|(principal, n)| (principal.clone(), n))
                .collect();
            self.fairness.record(&waiting, &weights);
        }
        let gone = dropped
            .iter()
            .map(|(principal, weight)| (principal, 1, *weight));
        let served = counts_of(&caps, &taken)
            .zip(counts_of(&caps, &weighed))
            .map(|((principal, n), (_, weight))| (principal, n, weight));
        for (principal, n, weight) in served.chain(gone) {
            if let Some(queued) = front.queued.get_mut(principal) {
                *queued -= n;
                if *queued == 0 {
                    front.queued.remove(principal);
                    front.weights.remove(principal);
                } else if let Some(weights) = front.weights.get_mut(principal) {
                    *weights = weights.saturating_sub(weight);
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
    pub(super) fn take_dropped(&mut self) -> usize {
        std::mem::take(&mut self.dropped)
    }
}

/// `(principal, commands taken)` of the principals that got some.
pub(super) fn counts_of<'a>(
    caps: &'a [(String, usize)],
    taken: &'a [usize],
) -> impl Iterator<Item = (&'a String, usize)> + 'a {
    caps.iter()
        .zip(taken)
        .filter(|(_, n)| **n > 0)
        .map(|((principal, _), n)| (principal, *n))
}
