//! The gRPC adapters of a node: the services (the client API `leases`, administration
//! `cluster`, the internal Raft service `raft`, owner inboxes `owner`, the `watch` stream, the
//! `keepalive` stream of renewals),
//! the parsing of their requests (`validate`), domain ↔ protobuf conversions (`convert`),
//! the gate every call passes first (`gate`), reflection and health (`reflection`, `health`),
//! and the response layer shared by all of them (`transport`). What a call does beyond
//! parsing and replying is the node's (`crate::coord`).

pub mod cluster;
pub mod convert;
pub mod gate;
pub mod health;
pub mod keepalive;
pub mod leases;
pub mod owner;
pub mod raft;
pub mod reflection;
pub mod transport;
pub mod validate;
pub mod watch;

#[cfg(test)]
mod pipeline_tests;
