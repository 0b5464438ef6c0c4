//! The gRPC surface of a node: the client API (`leases`), administration (`cluster`), the
//! internal Raft service (`raft`), request validation, forwarding to the leader, and the
//! response layer shared by all of them (`transport`).

pub mod batch;
pub mod cluster;
pub mod convert;
pub mod forward;
pub mod gate;
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
/// `request_id`, or for a call without one `local-N`, numbered by this process, so that what
/// the call logs can be told apart from other calls'. Does nothing when the span is off.
pub fn record_request_id(request_id: Option<&str>) {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    match request_id {
        Some(id) => span.record("request_id", id),
        None => {
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            span.record("request_id", format_args!("local-{n}"))
        }
    };
}
