//! What this node logs about a peer that does not answer Raft calls: one line when it stops
//! answering, one summary every [`SUMMARY_EVERY`] while it stays down, one when it answers
//! again, each naming the peer. openraft's own per-call lines (every heartbeat, 10 a second
//! for a dead peer) are off by default (`main.rs`): these replace them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::NodeId;

/// How often a peer that stays down is reported again.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// A peer that has been failing since `since`.
struct Failing {
    since: Instant,
    failures: u64,
    last_reported: Instant,
}

/// Which line, if any, a call's outcome is worth.
#[derive(Debug, PartialEq, Eq)]
pub enum Report {
    /// The first failure after the peer answered (or since this node started).
    Down,
    /// Still failing, [`SUMMARY_EVERY`] after the last line: how long and how many calls.
    StillDown { for_: Duration, failures: u64 },
    /// Answered after failing.
    Up { after: Duration, failures: u64 },
}

#[derive(Default)]
pub struct PeerHealth {
    failing: Mutex<HashMap<NodeId, Failing>>,
    /// How many entries `failing` holds: an answered call, the common case, reads only this
    /// while every peer answers, and takes no lock.
    failing_count: AtomicUsize,
}

impl PeerHealth {
    /// A call to `peer` failed at `now`.
    pub fn failed(&self, peer: NodeId, now: Instant) -> Option<Report> {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        let Some(state) = failing.get_mut(&peer) else {
            failing.insert(
                peer,
                Failing {
                    since: now,
                    failures: 1,
                    last_reported: now,
                },
            );
            self.failing_count.store(failing.len(), Ordering::Release);
            return Some(Report::Down);
        };
        state.failures += 1;
        if now.duration_since(state.last_reported) < SUMMARY_EVERY {
            return None;
        }
        state.last_reported = now;
        Some(Report::StillDown {
            for_: now.duration_since(state.since),
            failures: state.failures,
        })
    }

    /// A call to `peer` was answered at `now`.
    pub fn answered(&self, peer: NodeId, now: Instant) -> Option<Report> {
        // A failure recorded after this load is for a call that ended after this answer; the
        // next answer from that peer reports it up.
        if self.failing_count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        let state = failing.remove(&peer)?;
        self.failing_count.store(failing.len(), Ordering::Release);
        Some(Report::Up {
            after: now.duration_since(state.since),
            failures: state.failures,
        })
    }

    /// Logs `report` about `peer` at `addr`; `error` is the failure that caused it, if any.
    pub fn log(peer: NodeId, addr: &str, report: Report, error: Option<&str>) {
        let error = error.unwrap_or_default();
        match report {
            Report::Down => tracing::warn!(
                peer, %addr, %error,
                "peer {peer} does not answer Raft calls (reported again every {}s while it stays down)",
                SUMMARY_EVERY.as_secs()
            ),
            Report::StillDown { for_, failures } => tracing::warn!(
                peer, %addr, %error, failures,
                "peer {peer} still does not answer, for {}s ({failures} failed calls)",
                for_.as_secs()
            ),
            Report::Up { after, failures } => tracing::info!(
                peer, %addr, failures,
                "peer {peer} answers again after {}s ({failures} failed calls)",
                after.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_down_peer_is_reported_once_then_summarised_then_its_return() {
        let health = PeerHealth::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(
            health.answered(2, at(0)),
            None,
            "never failed: nothing to say"
        );
        assert_eq!(health.failed(2, at(0)), Some(Report::Down));
        // Heartbeats every 100 ms for just under the summary period: silent.
        for ms in (100..30_000).step_by(100) {
            assert_eq!(health.failed(2, at(ms)), None, "at {ms} ms");
        }
        assert_eq!(
            health.failed(2, at(30_000)),
            Some(Report::StillDown {
                for_: Duration::from_secs(30),
                failures: 301
            })
        );
        assert_eq!(health.failed(2, at(30_100)), None);
        // Another peer is its own story.
        assert_eq!(health.failed(3, at(30_100)), Some(Report::Down));
        assert_eq!(
            health.answered(2, at(31_000)),
            Some(Report::Up {
                after: Duration::from_secs(31),
                failures: 302
            })
        );
        assert_eq!(health.answered(2, at(31_100)), None);
        assert_eq!(health.failed(2, at(31_200)), Some(Report::Down));
        // Once every peer answers again, answers are back on the lock-free path.
        assert!(health.answered(3, at(31_300)).is_some());
        assert!(health.answered(2, at(31_400)).is_some());
        assert_eq!(health.failing_count.load(Ordering::Acquire), 0);
        assert_eq!(health.answered(2, at(31_500)), None);
    }
}
