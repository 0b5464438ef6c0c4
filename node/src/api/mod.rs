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
