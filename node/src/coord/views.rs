//! What a node reports of the cluster and of its principals, the same to an operator's
//! `Cluster.Status` and to a Prometheus scrape: the members with their replication, the commit
//! index, and the principals nearest their quotas.

use std::collections::BTreeSet;

use crate::store::RaftMetrics;
use openraft::ServerState;
use serde::{Deserialize, Serialize};

use crate::lease::quota::{self, QuotaView, Quotas};
use crate::store::NodeId;

/// One member as a node sees it; `matched` is the leader's replicated index (leader only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    pub id: NodeId,
    pub addr: String,
    pub voter: bool,
    pub matched: Option<u64>,
}

/// The members `metrics` shows, with the replicated index of each when `me` leads.
pub fn member_views(me: NodeId, metrics: &RaftMetrics) -> Vec<MemberView> {
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, node)| MemberView {
            id: *id,
            addr: node.addr.clone(),
            voter: voters.contains(id),
            matched: if *id == me {
                metrics.last_log_index
            } else {
                matched_index(metrics, *id)
            },
        })
        .collect()
}

/// The commit index as `me` knows it. openraft 0.9 published none (0.10's metrics carry
/// `committed`, which could replace this): on the leader it is the quorum's matched index;
/// elsewhere, the applied index stands in for it.
pub fn commit_index(me: NodeId, metrics: &RaftMetrics, applied: u64) -> u64 {
    if metrics.state != ServerState::Leader {
        return applied;
    }
    let membership = metrics.membership_config.membership();
    let mut matched: Vec<u64> = membership
        .voter_ids()
        .map(|id| {
            if id == me {
                metrics.last_log_index.unwrap_or(0)
            } else {
                matched_index(metrics, id).unwrap_or(0)
            }
        })
        .collect();
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched
        .get(matched.len() / 2)
        .copied()
        .unwrap_or(0)
        .max(applied)
}

/// The leader's replicated index for member `id` (None: unknown, or not the leader).
pub fn matched_index(metrics: &RaftMetrics, id: NodeId) -> Option<u64> {
    metrics
        .replication
        .as_ref()
        .and_then(|r| r.get(&id).cloned().flatten())
        .map(|log_id| log_id.index)
}

/// How many principals `Status` shows.
const TOP_PRINCIPALS: usize = 10;

/// The principals with the largest share of any of their limits, largest first.
pub fn top_principals(quotas: &Quotas) -> Vec<QuotaView> {
    let mut seen = std::collections::BTreeSet::new();
    let mut all: Vec<(u128, QuotaView)> = Vec::new();
    for q in quota::ALL {
        for (principal, _) in quotas.top(q, TOP_PRINCIPALS) {
            if !seen.insert(principal.clone()) {
                continue;
            }
            let view = quotas.view(Some(&principal));
            // The share in millionths: the largest of any quota.
            let share = quota::ALL
                .into_iter()
                .map(|q| {
                    u128::from(view.usage.get(q)) * 1_000_000
                        / u128::from(view.limits.get(q).max(1))
                })
                .max()
                .unwrap_or(0);
            all.push((share, view));
        }
    }
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.principal.cmp(&b.1.principal)));
    all.into_iter()
        .take(TOP_PRINCIPALS)
        .map(|(_, v)| v)
        .collect()
}
