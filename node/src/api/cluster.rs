//! `tenure.v1.Cluster`: what an operator asks of a node.

use std::sync::Arc;

use openraft::ServerState;
use tenure_proto::v1 as pb;
use tenure_proto::v1::cluster_server::Cluster;
use tonic::{Request, Response, Status};

use crate::app::Node;
use crate::error::ApiError;
use crate::lease::Rejection;
use crate::store::StorageStats;

pub struct ClusterApi {
    pub node: Arc<Node>,
}

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let node = &self.node;
        // SPEC §2: the Cluster service is admin only.
        if !node.auth.caller(request.metadata())?.admin {
            return Err(ApiError::from(Rejection::InsufficientPermissions(
                "the Cluster service is for admins".into(),
            ))
            .into());
        }
        let metrics = node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: Vec<u64> = membership.voter_ids().collect();
        let matched = |id: u64| {
            metrics
                .replication
                .as_ref()
                .and_then(|r| r.get(&id).cloned())
                .flatten()
                .map(|log_id| log_id.index)
        };
        let is_leader = metrics.state == ServerState::Leader;
        let members = membership
            .nodes()
            .map(|(id, n)| {
                let matched_index = if *id == node.id {
                    metrics.last_log_index
                } else {
                    matched(*id)
                };
                pb::Member {
                    id: *id,
                    addr: n.addr.clone(),
                    voter: voters.contains(id),
                    matched_index: matched_index.unwrap_or(0),
                    healthy: is_leader && matched_index.is_some(),
                }
            })
            .collect();
        let leader = node.leader();
        let s = &node.sm.stats;
        let (active_leases, lease_now_ms, applied_index) = {
            let applied = node.sm.read();
            (
                applied.state.live_leases() as u64,
                applied.state.clock().now_ms(),
                applied.last_applied.map_or(0, |id| id.index),
            )
        };
        // openraft 0.9 publishes no commit index; on the leader, the quorum's matched index is it.
        let commit_index = if is_leader {
            let mut matched: Vec<u64> = membership
                .voter_ids()
                .map(|id| {
                    if id == node.id {
                        metrics.last_log_index.unwrap_or(0)
                    } else {
                        matched(id).unwrap_or(0)
                    }
                })
                .collect();
            matched.sort_unstable_by(|a, b| b.cmp(a));
            matched
                .get(matched.len() / 2)
                .copied()
                .unwrap_or(0)
                .max(applied_index)
        } else {
            applied_index
        };
        Ok(Response::new(pb::StatusResponse {
            id: node.id,
            addr: node.addr.clone(),
            leader_id: leader.as_ref().map_or(0, |(id, _)| *id),
            leader_addr: leader.map(|(_, addr)| addr).unwrap_or_default(),
            term: metrics.current_term,
            state: format!("{:?}", metrics.state),
            last_log_index: metrics.last_log_index.unwrap_or(0),
            commit_index,
            applied_index,
            members,
            storage: Some(pb::StorageStats {
                log_appends: StorageStats::get(&s.log_appends),
                log_entries: StorageStats::get(&s.log_entries),
                log_fsyncs: StorageStats::get(&s.log_fsyncs),
                log_sync_micros: StorageStats::get(&s.log_sync_micros),
                snapshots_built: StorageStats::get(&s.snapshots_built),
                last_snapshot_index: StorageStats::get(&s.last_snapshot_index),
                last_snapshot_bytes: StorageStats::get(&s.last_snapshot_bytes),
                last_snapshot_build_micros: StorageStats::get(&s.last_snapshot_build_micros),
                snapshot_building: StorageStats::get(&s.snapshot_building) != 0,
            }),
            active_leases,
            lease_now_ms,
        }))
    }
}
