//! The gRPC surface of a node: the client API (`leases`), administration (`cluster`), the
//! internal Raft service (`raft`), request validation, forwarding to the leader, and the
//! response layer shared by all of them (`transport`).

pub mod batch;
pub mod cluster;
pub mod convert;
pub mod forward;
pub mod leases;
pub mod membership;
pub mod owner;
pub mod raft;
pub mod read_barrier;
pub mod transport;
pub mod validate;
pub mod wait;
pub mod watch;

/// Names the call being handled in its `rpc` span (see `crate::metrics::RpcTimer`): a write's
/// `request_id`, or for a call without one an id assigned here, so that what the call logs
/// can be told apart from other calls'. Does nothing when the span is off.
pub fn record_request_id(request_id: Option<&str>) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    match request_id {
        Some(id) => span.record("request_id", id),
        None => span.record("request_id", uuid::Uuid::new_v4().to_string().as_str()),
    };
}
