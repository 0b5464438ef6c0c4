//! The cluster's rules version as the node runs it (`crate::rules`, SPEC §4.26): the
//! leader raises it once every member supports a higher one, every node takes a snapshot
//! once it rises (so its data shows the version to an older release at once, in a format that
//! release refuses by name), and the leader refuses what needs a version not reached yet.

use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::Op;
use crate::rules::{self, Raise, Range};
use crate::store::{NodeId, RaftMetrics, WatchReceiver as _};

/// How often the leader looks for a raise (members announce their ranges many times a
/// second; a raise is once per upgrade).
const LOOK_EVERY: Duration = Duration::from_millis(500);

pub async fn run(node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    let mut snapshotted = node.sm.read().state.rules();
    let mut every = tokio::time::interval(LOOK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        let current = node.sm.read().state.rules();
        if current > snapshotted {
            tracing::info!(
                rules = current,
                "the cluster runs rules version {current} now"
            );
            if node.raft.trigger().snapshot().await.is_ok() {
                snapshotted = current;
            }
        }
        let leading = node.raft.metrics().borrow_watched().state == ServerState::Leader;
        // Only once this leader has committed an entry of its own: its state is current then.
        if !leading || node.own_commit.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            continue;
        }
        if let Raise::To(to) = node.rules_raise() {
            tracing::info!(
                from = current,
                to,
                "every member supports rules version {to}: raising the cluster's rules"
            );
            let proposal = crate::coord::timers::own(Op::RaiseRules { to });
            let outcome =
                tokio::time::timeout(node.config.request_timeout, node.propose_local(proposal))
                    .await;
            if !matches!(outcome, Ok(Ok(_))) {
                tracing::warn!(?outcome, "the raise was not committed; trying again");
            }
        }
    }
}

impl Node {
    /// This node's rules range (its release's, lowered by `--max-rules`).
    pub fn rules_range(&self) -> Range {
        rules::own_range(self.sm.max_rules())
    }

    /// Each member's range as this node knows it: its own, and the others' as they last
    /// announced it to this node (None: not lately; only a leader hears from every member).
    pub fn member_rules(&self, metrics: &RaftMetrics) -> Vec<(NodeId, Option<Range>)> {
        metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| match *id == self.id {
                true => (*id, Some(self.rules_range())),
                false => (*id, self.peers.rules.of(*id)),
            })
            .collect()
    }

    /// What the leader may raise the rules to now, or what holds a raise back.
    pub fn rules_raise(&self) -> Raise {
        let members = self.member_rules(&self.raft.metrics().borrow_watched());
        rules::raise(self.sm.read().state.rules(), &members)
    }

    /// Refuses `op` if it needs rules the cluster has not reached, as this node's state
    /// shows them: the version only rises, so a state behind the leader's refuses at worst
    /// what it could have taken, never the other way round. The raise itself is gated by
    /// [`Node::rules_raise`].
    pub fn gate(&self, op: &Op) -> Result<(), ApiError> {
        let needs = op.rules_needed();
        let cluster = self.sm.read().state.rules();
        if needs <= cluster || matches!(op, Op::RaiseRules { .. }) || self.config.ungated() {
            return Ok(());
        }
        Err(ApiError::RulesNotReached(rules::not_reached(
            "this request",
            needs,
            cluster,
        )))
    }
}
