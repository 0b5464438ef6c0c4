//! The leader's own proposals (docs/design.md §4): a `Tick` on taking office and while
//! anything is live, a `Reclaim` as soon as a lease is due. The plan is `lease::expiry::plan`;
//! this task only runs it while this node leads.

use crate::store::WatchReceiver as _;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::coord::Node;
use crate::lease::expiry::{self, Plan};
use crate::lease::{LeaderKey, Proposal, Stamp};

pub use crate::lease::command::SYSTEM;

pub async fn run(node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    let mut applied = node.sm.subscribe();
    let mut metrics = node.raft.metrics();
    let tick_ms = node.config.tick_interval.as_millis() as u64;
    loop {
        if *stop.borrow() {
            return;
        }
        let (leading, term) = {
            let m = metrics.borrow_and_update();
            (m.state == ServerState::Leader, m.current_term)
        };
        let wait_ms = if leading {
            let me = LeaderKey {
                term,
                node_id: node.id,
            };
            let plan = if node.own_commit.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                // First thing as leader in this process: commit an entry of our own, so reads
                // get a current read index (see `Node::own_commit`).
                Plan::Propose(crate::lease::Op::Tick)
            } else {
                let applied = node.sm.read_parked().await;
                expiry::plan(&applied.state, me, node.clock.stamp(), tick_ms)
            };
            match plan {
                Plan::Propose(op) => {
                    let request = own(op);
                    let outcome = tokio::time::timeout(
                        node.config.request_timeout,
                        node.propose_local(request),
                    )
                    .await;
                    if matches!(outcome, Ok(Ok(_))) {
                        continue;
                    }
                    tracing::debug!(?outcome, "leader proposal not committed; will retry");
                    50
                }
                Plan::Wait(ms) => ms,
            }
        } else {
            tick_ms
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            _ = applied.changed() => {}
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// A command of the leader's own (`Tick`, `Reclaim`): the system's, stamped when batched.
pub fn own(op: crate::lease::Op) -> Proposal {
    Proposal {
        stamp: Stamp::default(),
        principal: SYSTEM.into(),
        admin: true,
        request_id: None,
        require_registration: false,
        op,
    }
}
