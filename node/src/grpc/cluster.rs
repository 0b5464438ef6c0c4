//! `tenure.v1.Cluster`: what an operator asks of a node.

use crate::store::WatchReceiver as _;
use std::sync::Arc;

use crate::store::RaftMetrics;
use openraft::ServerState;
use tenure_proto::v1 as pb;
use tenure_proto::v1::cluster_server::Cluster;
use tonic::{Request, Response, Status};

use crate::coord::membership::{AdminReply, AdminRequest};
use crate::coord::views::{commit_index, member_views, top_principals, MemberView};
use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::quota::{self, Quota, QuotaView};
use crate::lease::{Op, Rejection, Reply};
use crate::store::StorageStats;

/// How long a refused peer stays in `Status.config_mismatches`.
const MISMATCHES_SHOWN_FOR: std::time::Duration = std::time::Duration::from_secs(600);

pub struct ClusterApi {
    pub node: Arc<Node>,
}

impl ClusterApi {
    /// SPEC §2: the Cluster service is admin only.
    fn admin_only<T>(&self, request: &Request<T>) -> Result<(), Status> {
        crate::metrics::record_request_id(None);
        if !crate::auth::caller_of(request)?.admin {
            return Err(ApiError::from(Rejection::InsufficientPermissions(
                "the Cluster service is for admins".into(),
            ))
            .into());
        }
        Ok(())
    }

    /// The membership as this node sees it, with the leader's view of each member's log.
    fn members(&self, metrics: &RaftMetrics) -> Vec<pb::Member> {
        let is_leader = metrics.state == ServerState::Leader;
        to_pb(&self.node, member_views(self.node.id, metrics), is_leader)
    }

    /// Runs a membership change through the leader and answers with the membership after it,
    /// as the leader sees it.
    async fn change(
        &self,
        request: AdminRequest,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let reply = self.node.admin(request).await?;
        let AdminReply::Membership {
            log_index,
            caught_up,
            members,
        } = reply
        else {
            return Err(
                ApiError::Internal(format!("a membership change answered {reply:?}")).into(),
            );
        };
        Ok(Response::new(pb::MembershipResponse {
            log_index,
            members: to_pb(&self.node, members, true),
            leader_id: self.node.leader().map_or(0, |(id, _)| id),
            caught_up,
        }))
    }
}

/// A quota view as the API shows it; watches and inboxes as this node counts them.
fn quota_pb(node: &Node, view: &QuotaView) -> pb::QuotaResponse {
    let principal = view.principal.clone().unwrap_or_default();
    pb::QuotaResponse {
        quotas: quota::ALL
            .into_iter()
            .map(|q| pb::QuotaLine {
                quota: q.name().to_string(),
                limit: view.limits.get(q),
                used: match (q, &view.principal) {
                    (_, None) => 0,
                    (Quota::Watches | Quota::Inboxes | Quota::AllResourceWatches, Some(p)) => {
                        node.streams_of(p, q)
                    }
                    (_, Some(_)) => view.usage.get(q),
                },
                overridden: view.settings.get(q).is_some(),
            })
            .collect(),
        principal,
    }
}

fn to_pb(node: &Node, members: Vec<MemberView>, from_leader: bool) -> Vec<pb::Member> {
    members
        .into_iter()
        .map(|m| pb::Member {
            id: m.id,
            addr: m.addr,
            voter: m.voter,
            matched_index: m.matched.unwrap_or(0),
            healthy: from_leader && m.matched.is_some(),
            rules: node
                .rules_of(m.id)
                .map(|range| range.to_string())
                .unwrap_or_default(),
        })
        .collect()
}

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.admin_only(&request)?;
        let node = &self.node;
        let metrics = node.raft.metrics().borrow_watched().clone();
        let members = self.members(&metrics);
        let leader = node.leader();
        let s = &node.sm.stats;
        let (active_leases, lease_now_ms, applied_index, top, rules_version) = {
            let applied = node.sm.read_parked().await;
            (
                applied.state.live_leases() as u64,
                applied.state.clock().now_ms(),
                applied.last_applied.map_or(0, |id| id.index),
                top_principals(applied.state.quotas()),
                applied.state.rules(),
            )
        };
        let rules_held_back = match (metrics.state == ServerState::Leader, node.rules_raise()) {
            (true, crate::rules::Raise::HeldBack(why)) => why,
            _ => Vec::new(),
        };
        let commit_index = commit_index(node.id, &metrics, applied_index);
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
            config_digest: self.node.config_digest(),
            config_mismatches: self.node.peers.mismatches.recent(MISMATCHES_SHOWN_FOR),
            top_principals: top.iter().map(|v| quota_pb(node, v)).collect(),
            rules_version,
            rules_range: node.rules_range().to_string(),
            rules_held_back,
            halted: node.sm.halted().unwrap_or_default(),
        }))
    }

    async fn set_quota(
        &self,
        request: Request<pb::SetQuotaRequest>,
    ) -> Result<Response<pb::QuotaResponse>, Status> {
        self.admin_only(&request)?;
        let caller = crate::auth::caller_of(&request)?;
        let req = request.into_inner();
        let op = super::validate::set_quota(&req)?;
        let request_id = super::validate::request_id(&req.request_id)?
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        crate::metrics::record_request_id(Some(&request_id));
        let reply = self
            .node
            .propose(self.node.proposal(caller, request_id, Op::SetQuota(op)))
            .await?;
        match reply {
            Reply::Quota(view) => Ok(Response::new(quota_pb(&self.node, &view))),
            Reply::Rejected(rejection) => Err(ApiError::from(rejection).into()),
            other => Err(ApiError::Internal(format!("SetQuota answered {other:?}")).into()),
        }
    }

    async fn get_quota(
        &self,
        request: Request<pb::GetQuotaRequest>,
    ) -> Result<Response<pb::QuotaResponse>, Status> {
        self.admin_only(&request)?;
        let principal = request.into_inner().principal;
        let principal = super::validate::quota_principal(&principal)?;
        let view = self
            .node
            .sm
            .read()
            .state
            .quotas()
            .view(principal.as_deref());
        Ok(Response::new(quota_pb(&self.node, &view)))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.admin_only(&request)?;
        let pb::AddLearnerRequest { id, addr, wait } = request.into_inner();
        self.change(AdminRequest::AddLearner { id, addr, wait })
            .await
    }

    async fn change_membership(
        &self,
        request: Request<pb::ChangeMembershipRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.admin_only(&request)?;
        let pb::ChangeMembershipRequest { promote, remove } = request.into_inner();
        self.change(AdminRequest::ChangeMembership { promote, remove })
            .await
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.admin_only(&request)?;
        let to = request.into_inner().to;
        let from = self.node.leader().map(|(id, _)| id);
        match self
            .node
            .admin(AdminRequest::TransferLeader { to, from })
            .await?
        {
            AdminReply::Transfer {
                from,
                to,
                transferred,
                detail,
            } => Ok(Response::new(pb::TransferLeaderResponse {
                previous_leader_id: from,
                leader_id: to.unwrap_or(0),
                transferred,
                detail,
            })),
            other => Err(ApiError::Internal(format!("a transfer answered {other:?}")).into()),
        }
    }

    async fn snapshot(
        &self,
        request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        self.admin_only(&request)?;
        let backup = request.get_ref().backup;
        let (last_index, bytes, build_micros, build_cpu_micros) = self.node.snapshot_now().await?;
        let (backup_path, backup_bytes) = match backup {
            true => self.node.backup().await?,
            false => (String::new(), 0),
        };
        Ok(Response::new(pb::SnapshotResponse {
            last_index,
            bytes,
            build_micros,
            backup_path,
            backup_bytes,
            build_cpu_micros,
        }))
    }
}
