//! `grpc.health.v1`, for load balancers and probes: tonic's health service, told this node's
//! state.

use crate::store::WatchReceiver as _;
use std::sync::Arc;

use crate::coord::Node;

/// `grpc.health.v1`: SERVING while this node knows a leader.
pub async fn report(node: Arc<Node>, health: tonic_health::server::HealthReporter) {
    let mut metrics = node.raft.metrics();
    loop {
        let has_leader = metrics.borrow_and_update().current_leader.is_some();
        let status = if has_leader {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        health.set_service_status("", status).await;
        health.set_service_status("tenure.v1.Leases", status).await;
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
