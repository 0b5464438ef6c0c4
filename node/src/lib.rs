//! Tenure's server: a Raft-replicated lease store with log-index fencing tokens.
//!
//! Layout (DESIGN §2): `lease` is the pure domain; `store` adapts it to openraft over sled;
//! `network` carries Raft RPCs; `api` serves gRPC; `app` wires one node together.

pub mod lease;
