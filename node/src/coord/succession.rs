//! A quicker election when the leader's process is gone.
//!
//! openraft (0.9 and 0.10 alike) starts an election only when a follower has heard nothing from the leader
//! for its leader lease (`--election-max`) plus its own election timeout, checked every one
//! and a half heartbeats. A voter grants its vote once the lease alone has run out. A
//! follower that forwards a call to the leader and has the connection *refused* knows that no
//! process listens there any more, not just that the leader is slow. It then asks openraft for
//! an election as soon as the other voters would grant it: when the lease on the old leader
//! has run out, counted from the last entries this node received from it. Its own timeout
//! and the tick rounding are skipped.
//!
//! Two followers doing this at the same instant would split the vote. So the surviving
//! voters go in id order, each an `--election-min` after the one before, and a later one
//! still goes if the earlier campaign lost (a voter refuses a candidate with a shorter log).
//! openraft's own timers still run, and nothing here changes what an election decides —
//! only when it starts.

use crate::store::WatchReceiver as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use crate::store::{NodeId, Raft};

/// Margin past the lease: another voter may have had the leader's last entries a little
/// later than this node.
const LEASE_MARGIN: Duration = Duration::from_millis(25);

/// When this node heard from the leader last, and which leader it is electing a successor to.
pub struct Succession {
    raft: Raft,
    id: NodeId,
    election_min: Duration,
    election_max: Duration,
    started: Instant,
    /// Milliseconds since `started` of the last AppendEntries from a leader.
    last_append_ms: AtomicU64,
    /// The leader a successor election is scheduled for (`u64::MAX`: none).
    replacing: AtomicU64,
}

impl Succession {
    pub fn new(raft: Raft, id: NodeId, election_min: Duration, election_max: Duration) -> Self {
        Succession {
            raft,
            id,
            election_min,
            election_max,
            started: Instant::now(),
            last_append_ms: AtomicU64::new(0),
            replacing: AtomicU64::new(u64::MAX),
        }
    }

    /// Called for every AppendEntries this node receives.
    pub fn heard_from_leader(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_append_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long a hand-over of leadership may take: the lease on the old leader, a campaign,
    /// and a margin for a slow vote.
    pub fn hand_over_limit(&self) -> Duration {
        self.election_max * 3 + self.election_min * 2
    }

    fn last_heard(&self) -> Instant {
        self.started + Duration::from_millis(self.last_append_ms.load(Ordering::Relaxed))
    }
}

/// How long after the lease on `leader` ran out node `me` starts an election: the surviving
/// voters in id order, an `election_min` apart. None if `me` is no surviving voter.
pub fn turn(
    me: NodeId,
    leader: NodeId,
    voters: impl IntoIterator<Item = NodeId>,
    election_min: Duration,
) -> Option<Duration> {
    let mut survivors: Vec<NodeId> = voters.into_iter().filter(|id| *id != leader).collect();
    survivors.sort_unstable();
    let rank = survivors.iter().position(|id| *id == me)?;
    Some(election_min * rank as u32)
}

/// Whether a failed call to the leader means no process listens at its address.
pub fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        cause = error.source();
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
            // An io::Error wrapping another error names it by `get_ref`, not `source`.
            if let Some(inner) = io.get_ref() {
                cause = Some(inner);
            }
        }
    }
    false
}

impl Succession {
    /// A call this node forwarded to `leader` was refused: schedules this node's turn to
    /// start an election (once per leader), unless the leader changes first.
    pub fn leader_refused(self: &Arc<Self>, leader: NodeId) {
        if self.replacing.swap(leader, Ordering::Relaxed) == leader {
            return;
        }
        let voters: Vec<NodeId> = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow_watched();
            metrics.membership_config.membership().voter_ids().collect()
        };
        let Some(turn) = turn(self.id, leader, voters, self.election_min) else {
            self.replacing.store(u64::MAX, Ordering::Relaxed);
            return;
        };
        let at = self.last_heard() + self.election_max + LEASE_MARGIN + turn;
        let node = self.clone();
        tokio::spawn(async move {
            let mut metrics = node.raft.metrics();
            // No successor yet: the dead leader, or none (an earlier turn's campaign that
            // lost, say to a longer log, leaves the term leaderless; the next turn runs).
            let leaderless = |m: &crate::store::RaftMetrics| {
                m.state != ServerState::Leader && m.current_leader.is_none_or(|l| l == leader)
            };
            let succeeded = tokio::time::timeout_at(at, async {
                loop {
                    if !leaderless(&metrics.borrow_and_update()) {
                        return;
                    }
                    if metrics.changed().await.is_err() {
                        return;
                    }
                }
            })
            .await;
            if succeeded.is_err() && leaderless(&metrics.borrow_watched()) {
                tracing::info!(leader, "the leader's address refuses connections: electing");
                if let Err(error) = node.raft.trigger().elect(false).await {
                    tracing::debug!(%error, "could not start an election");
                }
            }
            node.replacing.store(u64::MAX, Ordering::Relaxed);
        });
    }
}

impl Succession {
    /// The leader `leader` is handing leadership to this node (`TransferLeader`) and has
    /// stopped its heartbeats: campaigns as soon as the other voters' lease on it has run out,
    /// counted from the last entries this node received from it (which a write still in
    /// flight may push later).
    /// Gives up at [`Self::hand_over_limit`], the old leader's own wait: by then it has taken
    /// writes and sent heartbeats again.
    pub fn hand_over(self: &Arc<Self>, leader: NodeId) {
        let node = self.clone();
        let give_up = Instant::now() + self.hand_over_limit();
        tokio::spawn(async move {
            loop {
                let at = node.last_heard() + node.election_max + LEASE_MARGIN;
                if Instant::now() >= at {
                    break;
                }
                if at >= give_up {
                    tracing::debug!(leader, "the leader kept replicating: not taking over");
                    return;
                }
                tokio::time::sleep_until(at).await;
            }
            let (state, current) = {
                let metrics = node.raft.metrics();
                let m = metrics.borrow_watched();
                (m.state, m.current_leader)
            };
            if state == ServerState::Follower && current.is_none_or(|l| l == leader) {
                tracing::info!(leader, "taking over leadership: electing");
                if let Err(error) = node.raft.trigger().elect(false).await {
                    tracing::debug!(%error, "could not start an election");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survivors_take_turns_in_id_order() {
        let min = Duration::from_millis(150);
        assert_eq!(turn(2, 1, [1, 2, 3], min), Some(Duration::ZERO));
        assert_eq!(turn(3, 1, [1, 2, 3], min), Some(min));
        assert_eq!(turn(1, 2, [1, 2, 3], min), Some(Duration::ZERO));
        assert_eq!(turn(5, 2, [1, 2, 3, 4, 5], min), Some(min * 3));
        // A learner, or the leader itself, never starts one.
        assert_eq!(turn(4, 1, [1, 2, 3], min), None);
        assert_eq!(turn(1, 1, [1, 2, 3], min), None);
    }

    #[test]
    fn only_a_refused_connection_counts() {
        let refused_io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(refused(&refused_io));
        let wrapped = std::io::Error::other(refused_io);
        assert!(refused(&wrapped));
        let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert!(!refused(&timeout));
    }
}
