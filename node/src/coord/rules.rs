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
    let mut snapshotted = node.sm.rules();
    let mut announced = snapshotted;
    node.peers.announce_cluster_rules(announced);
    let mut every = tokio::time::interval(LOOK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A raise is announced to the peers on the next call after it applies here (the
    // leader's heartbeats carry it to followers that have not applied it yet, `Node::gate`),
    // not up to a look later. Woken only by a change of version: Raft's metrics, which change
    // with every round, would wake this on every read.
    let mut applied = node.sm.subscribe_rules();
    loop {
        let look = tokio::select! {
            _ = every.tick() => true,
            changed = applied.changed() => {
                if changed.is_err() {
                    // The state machine is gone: nothing more applies here.
                    return;
                }
                false
            }
            _ = stop.changed() => return,
        };
        let current = node.sm.rules();
        if current > announced {
            tracing::info!(
                rules = current,
                "the cluster runs rules version {current} now"
            );
            node.peers.announce_cluster_rules(current);
            announced = current;
        }
        if !look {
            continue;
        }
        if current > snapshotted {
            // A snapshot that covers the raise: its format names the version to any release
            // started on this data (one from before the raise refuses the format by name).
            match node.snapshot_now().await {
                Ok(_) => snapshotted = current,
                Err(e) => tracing::warn!("no snapshot after the raise yet: {e}"),
            }
        }
        let leading = node.raft.metrics().borrow_watched().state == ServerState::Leader;
        // Only once this leader has committed an entry of its own: its state is current then.
        if !leading || node.own_commit.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            continue;
        }
        // No member joins or leaves while a raise is decided and committed.
        let _members = node.members_or_rules.lock().await;
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
            .map(|(id, _)| (*id, self.rules_of(*id)))
            .collect()
    }

    /// Member `id`'s range as this node knows it: its own, or as `id` last announced it.
    pub fn rules_of(&self, id: NodeId) -> Option<Range> {
        match id == self.id {
            true => Some(self.rules_range()),
            false => self
                .peers
                .rules
                .of(id, rules::heard_for(self.config.heartbeat)),
        }
    }

    /// What the leader may raise the rules to now, or what holds a raise back. Only over a
    /// membership that is settled: committed and applied, and not a joint one (a member on
    /// its way in may not have been heard from yet).
    pub fn rules_raise(&self) -> Raise {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let membership = &metrics.membership_config;
        let applied = self.sm.read().last_applied.map_or(0, |id| id.index);
        let changing = membership.log_id().is_some_and(|id| id.index > applied)
            || membership.membership().get_joint_config().len() > 1;
        if changing {
            return Raise::HeldBack(vec!["a membership change is under way".into()]);
        }
        rules::raise(self.sm.rules(), &self.member_rules(&metrics))
    }

    /// Why learner `id` may not become a voter under the cluster's rules, if it may not: it
    /// has not announced a range that holds them (an older release would stop at the next
    /// entry, and a voter that cannot apply costs the quorum a member).
    pub fn rules_refuse_voter(&self, id: NodeId) -> Option<String> {
        let cluster = self.sm.rules();
        match self.rules_of(id) {
            Some(range) if range.contains(cluster) => None,
            Some(range) => Some(format!(
                "learner {id} applies rules {range} and the cluster runs {cluster}: start it on a release that supports {cluster}"
            )),
            None => Some(format!(
                "learner {id} has not announced its rules lately; retry once it answers the leader"
            )),
        }
    }

    /// Refuses `op` if it needs rules the cluster has not reached, as this node's state
    /// shows them or a peer's applied state told it (a raise applied anywhere is committed,
    /// and every entry after it applies after it): the version only rises, so a node behind
    /// refuses at worst what it could have taken, never the other way round, and a follower
    /// that has not applied the raise yet, told of it, hands the write on. The raise itself
    /// is gated by [`Node::rules_raise`].
    pub fn gate(&self, op: &Op) -> Result<(), ApiError> {
        let needs = op.rules_needed();
        // Every write passes here, twice on a leader: the applied rules without the state's lock.
        let cluster =
            (self.sm.rules()).max(self.rules_heard.load(std::sync::atomic::Ordering::Relaxed));
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
