//! Tenure's server: a Raft-replicated lease store with log-index fencing tokens.
//!
//! Layout (docs/design.md §2): `lease` is the pure domain; `store` adapts it to openraft over
//! sled; `network` carries Raft RPCs; `coord` is the node's coordination (the [`coord::Node`],
//! proposing through the leader, batching, reads, membership, succession, timers); `grpc` holds
//! the gRPC adapters (services, request parsing, replies); `metrics` serves Prometheus; `app`
//! wires one node together.

pub mod agreement;
pub mod app;
pub mod auth;
pub mod config;
pub mod coord;
pub mod error;
pub mod gateway;
pub mod grpc;
pub mod guard;
/// The pure domain, a crate of its own (`tenure-lease`) so that the compiler keeps it pure.
pub use tenure_lease as lease;
pub mod limits;
pub mod metrics;
pub mod network;
pub mod rules;
pub mod store;
pub mod tls;
