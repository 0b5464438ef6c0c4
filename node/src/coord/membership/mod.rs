//! Cluster administration on the leader (SPEC §2 `Cluster`, §6): adding a learner, promoting
//! and removing members, handing leadership over, and a snapshot on demand.
//!
//! A follower hands these calls to the leader over `Raft.Admin`, as it does writes, and
//! retries them on the next leader after an election. So each is idempotent: adding a learner
//! that is already there with the same address, promoting a voter and removing a node that is
//! gone change nothing and succeed.
//!
//! Safety rules the leader enforces before openraft sees a change:
//! - no two members share an address (the transport is keyed by address, so one process
//!   would answer, and vote, for both); a wiped node rejoins under a new id, after the old
//!   id is removed;
//! - a learner becomes a voter only once it has caught up with the log, so a promotion never
//!   adds a voter that cannot ack for a long while;
//! - a change never leaves the cluster without a voter.
//!
//! Handing leadership over is `transfer`.

mod transfer;

use crate::store::WatchReceiver as _;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::store::RaftMetrics;
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, ServerState};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::coord::forward::NotServed;
use crate::coord::views::{matched_index, member_views, MemberView};
use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::Rejection;
use crate::network::{decode, PeerClient};
use crate::store::NodeId;

/// A `Cluster` call the leader serves, or the leader's request that a transfer's target run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    AddLearner {
        id: NodeId,
        addr: String,
        wait: bool,
    },
    ChangeMembership {
        promote: Vec<NodeId>,
        remove: Vec<NodeId>,
    },
    TransferLeader {
        /// 0: the most up-to-date other voter.
        to: NodeId,
        /// The leader when the call began: a retry that finds another leader reports the
        /// move instead of making a second one.
        from: Option<NodeId>,
    },
    /// Leader → target of a transfer: campaign once the lease on `leader` has run out.
    Campaign { leader: NodeId },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminReply {
    Membership {
        /// The last membership entry this call committed (0: nothing changed).
        log_index: u64,
        caught_up: bool,
        /// The membership afterwards, as the leader sees it.
        members: Vec<MemberView>,
    },
    /// Best effort: a transfer that could not be made says why in `detail`.
    Transfer {
        from: NodeId,
        to: Option<NodeId>,
        transferred: bool,
        detail: String,
    },
    Campaigning,
}

/// Why the leader refused an admin call (the same on every attempt, unlike [`NotServed`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminError {
    Rejected(Rejection),
    /// The id or the address is taken.
    Exists(String),
    Unavailable(String),
}

impl From<AdminError> for ApiError {
    fn from(error: AdminError) -> Self {
        match error {
            AdminError::Rejected(rejection) => ApiError::Rejected(rejection),
            AdminError::Exists(what) => ApiError::MemberExists(what),
            AdminError::Unavailable(why) => ApiError::Unavailable(why),
        }
    }
}

pub type AdminOutcome = Result<AdminReply, AdminError>;

fn invalid(field: &str, problem: impl Into<String>) -> AdminOutcome {
    Err(AdminError::Rejected(Rejection::invalid(field, problem)))
}

fn already_exists(what: String) -> AdminOutcome {
    Err(AdminError::Exists(what))
}

/// How long a promotion waits for a learner to catch up before it is refused.
const CATCH_UP_WAIT: Duration = Duration::from_secs(3);

/// Checks `HOST:PORT`.
fn valid_addr(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

impl Node {
    fn metrics_now(&self) -> RaftMetrics {
        self.raft.metrics().borrow_watched().clone()
    }

    /// Serves `request` on this node: as the leader, or (`Campaign`) as a transfer's target.
    pub async fn admin_local(&self, request: &AdminRequest) -> Result<AdminOutcome, NotServed> {
        let leads = self.metrics_now().state == ServerState::Leader;
        match request {
            AdminRequest::Campaign { leader } => {
                self.succession.hand_over(*leader);
                Ok(Ok(AdminReply::Campaigning))
            }
            _ if !leads => Err(NotServed::NotLeader),
            // One at a time with a raise of the rules (`coord::rules`).
            AdminRequest::AddLearner { id, addr, wait } => {
                let _rules = self.members_or_rules.lock().await;
                self.add_learner(*id, addr, *wait).await
            }
            AdminRequest::ChangeMembership { promote, remove } => {
                let _rules = self.members_or_rules.lock().await;
                self.change_voters(promote, remove).await
            }
            AdminRequest::TransferLeader { to, from } => {
                let voters = self
                    .metrics_now()
                    .membership_config
                    .membership()
                    .voter_ids()
                    .collect::<BTreeSet<_>>();
                if *to != 0 && !voters.contains(to) {
                    return Ok(invalid("to", format!("{to} is not a voter")));
                }
                Ok(Ok(self.transfer_leader(*to, *from).await))
            }
        }
    }

    async fn add_learner(
        &self,
        id: NodeId,
        addr: &str,
        wait: bool,
    ) -> Result<AdminOutcome, NotServed> {
        if id == 0 {
            return Ok(invalid("id", "must be a positive integer"));
        }
        if !valid_addr(addr) {
            return Ok(invalid("addr", format!("expected HOST:PORT, got {addr:?}")));
        }
        let config = &self.config;
        let clear_token = self.auth().is_on() && self.tls.is_none() && !config.insecure_transport;
        if clear_token && !tenure_proto::is_loopback(addr) {
            return Ok(invalid(
                "addr",
                format!(
                    "{addr} is off this machine and would receive the peer token in clear: turn \
                     TLS on (--tls-cert, --tls-key, --tls-ca) or start the nodes with \
                     --insecure-transport"
                ),
            ));
        }
        let metrics = self.metrics_now();
        let membership = metrics.membership_config.membership();
        if let Some((other, _)) = membership
            .nodes()
            .find(|(other, node)| node.addr == addr && **other != id)
        {
            return Ok(already_exists(format!(
                "{addr} is the address of member {other}: remove {other} first (a wiped node rejoins under a new id)"
            )));
        }
        let voter = membership.voter_ids().any(|v| v == id);
        let log_index = match membership.get_node(&id) {
            // Already there (a retry, or a learner since promoted): nothing to do.
            Some(node) if node.addr == addr => 0,
            Some(node) => {
                let role = if voter { "voter" } else { "learner" };
                return Ok(already_exists(format!(
                    "node {id} is a {role} at {}: remove it first to move it",
                    node.addr
                )));
            }
            None => {
                let node = BasicNode {
                    addr: addr.to_string(),
                };
                match self.raft.add_learner(id, node, false).await {
                    Ok(response) => response.log_id.index,
                    Err(error) => return write_error(error),
                }
            }
        };
        if log_index > 0 {
            tracing::info!(id, addr, log_index, "added a learner");
        }
        let caught_up = if voter {
            true
        } else if wait {
            let target = log_index.max(metrics.last_log_index.unwrap_or(0));
            self.caught_up(id, target, self.config.request_timeout / 2)
                .await
                .is_ok()
        } else {
            false
        };
        Ok(Ok(self.membership_reply(log_index, caught_up)))
    }

    fn membership_reply(&self, log_index: u64, caught_up: bool) -> AdminReply {
        AdminReply::Membership {
            log_index,
            caught_up,
            members: member_views(self.id, &self.metrics_now()),
        }
    }

    /// Waits until the leader has replicated up to `index` to `id`; Err(matched) at `limit`.
    async fn caught_up(&self, id: NodeId, index: u64, limit: Duration) -> Result<(), u64> {
        let matched = |m: &RaftMetrics| matched_index(m, id).unwrap_or(0);
        let mut metrics = self.raft.metrics();
        let deadline = Instant::now() + limit;
        loop {
            let now = matched(&metrics.borrow_and_update());
            if now >= index {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(now),
            }
        }
    }

    async fn change_voters(
        &self,
        promote: &[NodeId],
        remove: &[NodeId],
    ) -> Result<AdminOutcome, NotServed> {
        if promote.is_empty() && remove.is_empty() {
            return Ok(invalid(
                "promote",
                "name at least one node to promote or remove",
            ));
        }
        let metrics = self.metrics_now();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members: BTreeSet<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
        for id in promote {
            if remove.contains(id) {
                return Ok(invalid("promote", format!("{id} is also to be removed")));
            }
            if !members.contains(id) {
                return Ok(invalid(
                    "promote",
                    format!("{id} is not a member: add it as a learner first"),
                ));
            }
        }
        let mut target = voters.clone();
        target.extend(promote.iter().copied());
        target.retain(|id| !remove.contains(id));
        if target.is_empty() {
            return Ok(invalid("remove", "the cluster would have no voter left"));
        }
        let commit = metrics.last_applied.map_or(0, |log_id| log_id.index);
        for id in promote.iter().filter(|id| !voters.contains(id)) {
            if let Err(matched) = self.caught_up(*id, commit, CATCH_UP_WAIT).await {
                return Ok(Err(AdminError::Unavailable(format!(
                    "learner {id} has not caught up (it has the log to {matched} of {commit}); retry once it has"
                ))));
            }
            if let Some(why) = self.rules_refuse_voter(*id) {
                return Ok(Err(AdminError::Unavailable(why)));
            }
        }
        let mut log_index = 0;
        if target != voters {
            match self.raft.change_membership(target.clone(), false).await {
                Ok(response) => log_index = response.log_id.index,
                Err(error) => return write_error(error),
            }
            tracing::info!(voters = ?target, log_index, "changed the voters");
        }
        // Learners to remove (voters left with the change above).
        let learners: BTreeSet<NodeId> = {
            let metrics = self.metrics_now();
            let membership = metrics.membership_config.membership();
            let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
            membership
                .nodes()
                .map(|(id, _)| *id)
                .filter(|id| remove.contains(id) && !voters.contains(id))
                .collect()
        };
        if !learners.is_empty() {
            let change = ChangeMembers::RemoveNodes(learners.clone());
            match self.raft.change_membership(change, false).await {
                Ok(response) => log_index = response.log_id.index,
                Err(error) => return write_error(error),
            }
            tracing::info!(?learners, log_index, "removed learners");
        }
        Ok(Ok(self.membership_reply(log_index, true)))
    }

    /// Builds a snapshot of this node's state now; returns its last index, size and build time.
    /// openraft ignores a request while a build runs, so one that covers less than what was
    /// applied at the call is followed by another.
    pub async fn snapshot_now(&self) -> Result<(u64, u64, u64, u64), ApiError> {
        use crate::store::StorageStats;
        let stats = &self.sm.stats;
        let applied = self.sm.read().last_applied.map_or(0, |log_id| log_id.index);
        // A million leases take seconds; the deadline is generous.
        let deadline = Instant::now() + self.config.request_timeout.max(Duration::from_secs(60));
        let mut watch = self.raft.metrics();
        let covered = |m: &RaftMetrics| m.snapshot.map_or(0, |s| s.index) >= applied;
        while !covered(&watch.borrow_and_update()) {
            if Instant::now() >= deadline {
                return Err(ApiError::Unavailable(
                    "the snapshot is still being built".into(),
                ));
            }
            self.raft
                .trigger()
                .snapshot()
                .await
                .map_err(|e| ApiError::Unavailable(format!("could not start a snapshot: {e}")))?;
            // A finished build (this one, or one already running) changes the metrics; look
            // again then, and ask again if it did not cover `applied`.
            let _ = tokio::time::timeout_at(deadline, watch.changed()).await;
        }
        Ok((
            StorageStats::get(&stats.last_snapshot_index),
            StorageStats::get(&stats.last_snapshot_bytes),
            StorageStats::get(&stats.last_snapshot_build_micros),
            StorageStats::get(&stats.last_snapshot_build_cpu_micros),
        ))
    }

    /// Writes this node's newest snapshot whole to `DATA_DIR/backups/`: the file's path and
    /// size.
    pub async fn backup(&self) -> Result<(String, u64), ApiError> {
        let sm = self.sm.clone();
        let dir = self.config.data_dir.join("backups");
        let written = tokio::task::spawn_blocking(move || sm.backup(&dir))
            .await
            .map_err(|e| ApiError::Internal(format!("the backup stopped: {e}")))?;
        let (path, bytes) =
            written.map_err(|e| ApiError::Unavailable(format!("the backup failed: {e:#}")))?;
        Ok((path.display().to_string(), bytes))
    }
}

fn write_error(
    error: RaftError<crate::store::TypeConfig, ClientWriteError<crate::store::TypeConfig>>,
) -> Result<AdminOutcome, NotServed> {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => Err(NotServed::NotLeader),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(change)) => {
            Ok(Err(match change {
                ChangeMembershipError::InProgress(_) => {
                    AdminError::Unavailable(format!("{change}; retry once it has committed"))
                }
                other => AdminError::Rejected(Rejection::invalid("membership", other.to_string())),
            }))
        }
        // The entry may yet commit under another leader: the caller sees the outcome in the
        // membership, not by a retry here.
        RaftError::APIError(discarded @ ClientWriteError::LogEntryDiscarded(_)) => {
            Err(NotServed::Unavailable(discarded.to_string()))
        }
        RaftError::APIError(ClientWriteError::PreconditionFailed(failed)) => {
            Err(NotServed::Unavailable(failed.to_string()))
        }
        RaftError::Fatal(fatal) => Err(NotServed::Unavailable(fatal.to_string())),
    }
}

/// A membership change's reply shows nothing its encoding leaves out.
impl crate::lease::unencoded::Unencoded for AdminReply {
    fn each_part(&mut self, _: &mut dyn FnMut(crate::lease::unencoded::Part<'_>)) {}
}

#[cfg(test)]
mod tests {
    use super::valid_addr;

    #[test]
    fn an_address_is_host_and_port() {
        assert!(valid_addr("127.0.0.1:7104"));
        assert!(valid_addr("tenure-3.tenure:7101"));
        assert!(valid_addr("[::1]:7101"));
        assert!(!valid_addr("127.0.0.1"));
        assert!(!valid_addr(":7101"));
        assert!(!valid_addr("host:0"));
        assert!(!valid_addr("host:99999"));
        assert!(!valid_addr("bad host:1"));
    }
}
