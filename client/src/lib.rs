//! Rust client for Tenure: leases on named resources, each tenure fenced by a token that only
//! grows (SPEC §1).
//!
//! A [`Lease`] renews itself in the background and tells when it is lost:
//!
//! ```no_run
//! # async fn run() -> Result<(), tenure_client::Error> {
//! let client = tenure_client::Client::new(["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"])?;
//! if let tenure_client::Acquired::Granted(lease) = client.lease("world/eu-1", "server-7", std::time::Duration::from_secs(30)).await? {
//!     let token = lease.fencing_token(); // hand it to whatever the lease protects
//!     tokio::select! {
//!         _ = lease.lost() => { /* stop: the lease is gone or may be */ }
//!         _ = async { /* work */ } => { lease.release().await?; }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! The same lease, call by call: acquire with a ttl, renew before it runs out, release.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure_client::{pb, prost_duration, release_request, renew_request, Client, Reason};
//!
//! # async fn run() -> Result<(), tenure_client::Error> {
//! let client = Client::from_list("127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")?;
//! let ttl = Duration::from_secs(30);
//! let answer = client
//!     .acquire(pb::AcquireRequest {
//!         resource: "world/eu-1".into(),
//!         holder: "server-7".into(),
//!         ttl: Some(prost_duration(ttl)),
//!         ..Default::default()
//!     })
//!     .await?;
//! let Some(lease) = answer.lease.filter(|_| answer.granted) else {
//!     println!("not granted: {}", answer.reason); // e.g. resource_unavailable
//!     return Ok(());
//! };
//! match client.renew(renew_request(&lease, ttl)).await {
//!     Ok(_) => {} // it now expires a ttl after the renewal
//!     Err(error) if error.reason() == Some(Reason::LeaseExpired) => {
//!         return Ok(()); // reclaimed, maybe granted to another: stop using its fencing token
//!     }
//!     Err(error) => return Err(error),
//! }
//! client.release(release_request(&lease)).await?;
//! # Ok(()) }
//! ```
//!
//! Every call has a deadline, carries a `request_id` (reused on retries, so a retried write
//! applies once), goes to the leader once a `tenure-leader` header named it, and moves on to
//! the next endpoint when a node is unreachable or has no leader.
//!
//! Beyond one lease: [`Client::lock`] builds an acquire that can queue in the waiting room
//! (`wait(timeout)`, a blocking lock); [`Client::session`] holds many leases on one heartbeat
//! ([`Session::lock`]), all lost together; [`Client::lock_many`] takes several resources
//! in one step, all or none, and waits for them without deadlock; [`Client::campaign`] and [`Client::observe`] elect and
//! follow a leader; [`Client::watch_resuming`] is a `Watch` that survives node failures; and
//! [`Fence`] is the downstream check that refuses a write with a stale fencing token.

#![warn(missing_docs)]

mod client;
mod election;
mod error;
mod fence;
mod lease;
mod lock;
mod many;
mod observe;
mod owner;
mod retry;
mod session;
mod watch;

pub use client::{Client, DEFAULT_ENDPOINTS};
pub use election::Leadership;
pub use error::Error;
pub use fence::{Fence, Stale};
pub use lease::{
    from_prost_duration, prost_duration, release_request, renew_request, safety_margin, Acquired,
    Lease, Lost,
};
pub use lock::Lock;
pub use many::{AcquiredMany, LockMany};
pub use observe::{Leader, Leaders};
pub use owner::{Forwarded, Inbox, DEFAULT_FORWARD_TIMEOUT, MAX_PAYLOAD_BYTES};
pub use session::Session;
pub use tenure_proto::contract::Reason;
/// The generated `tenure.v1` messages and services: the requests of [`Client`]'s calls.
pub use tenure_proto::v1 as pb;
pub use watch::WatchMessages;
