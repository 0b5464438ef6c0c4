//! `grpc.health.v1`, for load balancers and probes: tonic's health service, told this node's
//! state.

use crate::store::WatchReceiver as _;
use std::sync::Arc;

use crate::coord::Node;

/// `grpc.health.v1`: SERVING while this node knows a leader and applies its log (a node
/// that met rules above its own stops applying, `store::state_machine`; so does its Raft).
pub async fn report(node: Arc<Node>, health: tonic_health::server::HealthReporter) {
    let mut metrics = node.raft.metrics();
    loop {
        let has_leader = metrics.borrow_and_update().current_leader.is_some();
        let status = if has_leader && node.sm.halted().is_none() {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        health.set_service_status("", status).await;
        health.set_service_status("tenure.v1.Leases", status).await;
        if metrics.changed().await.is_err() {
            // Raft stopped (a halt, or the node shuts down): nothing is served any more.
            let status = tonic_health::ServingStatus::NotServing;
            health.set_service_status("", status).await;
            health.set_service_status("tenure.v1.Leases", status).await;
            return;
        }
    }
}
