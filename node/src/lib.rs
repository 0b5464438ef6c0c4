//! Tenure's server: a Raft-replicated lease store with log-index fencing tokens.
//!
//! Layout (docs/design.md §2): `lease` is the pure domain; `store` adapts it to openraft over
//! sled; `network` carries Raft RPCs; `api` serves gRPC; `app` wires one node together;
//! `timers` runs the leader's own proposals; `clock` is where a leader's stamps come from.

pub mod agreement;
pub mod api;
pub mod app;
pub mod auth;
pub mod clock;
pub mod config;
pub mod error;
pub mod guard;
pub mod lease;
pub mod limits;
pub mod metrics;
pub mod network;
pub mod store;
pub mod succession;
pub mod timers;
pub mod tls;
