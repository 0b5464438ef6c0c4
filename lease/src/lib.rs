//! The lease domain: every rule of SPEC §4 that the replicated state machine applies.
//!
//! Nothing here knows about Raft, gRPC or disks. [`machine::apply`] is a pure function of
//! (state, entry): no clock, no randomness, no I/O. Time enters only through the leader's
//! [`command::Stamp`] in each entry and the lease clock of [`lease_clock`]; the entry's log index
//! is the fencing token of whatever it grants.

mod admission;
pub mod archive;
pub mod bookings;
pub mod command;
pub mod dedup;
pub mod encoding;
pub mod expiry;
mod grant;
pub mod history;
pub mod lease_clock;
mod lease_id;
mod legacy;
pub mod machine;
pub mod many;
mod mutate;
pub mod policy;
pub mod query;
pub mod quota;
mod rejection;
pub mod rules;
pub mod session;
pub mod types;
pub mod unencoded;
pub mod waiting;
pub mod watch;

#[cfg(test)]
mod model;
#[cfg(test)]
mod spec_tests;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use bookings::Booking;
pub use command::{
    AcquireManyOp, AcquireOp, BookOp, CancelBookingOp, CancelWaitOp, Claim, CloseSessionOp,
    Command, CreateOp, CreateSessionOp, Op, Proposal, ReleaseOp, RenewMetadataOp, RenewOp,
    RenewSessionOp, Reply, SessionAcquireOp, Stamp, TransferOp,
};
pub use history::{Event, EventKind};
pub use lease_clock::{LeaderKey, LeaseClock};
pub use machine::{apply, check_name, Effects, EntryMeta, State, FRESH_MS};
pub use many::{ClaimOutcome, ManyOutcome};
pub use policy::{FsmRequirement, Policy};
pub use query::{Answer, Query, ResourceView, Validation};
pub use session::{Session, SessionStatus, SessionView};
pub use types::{
    AcquireOutcome, Lease, LeaseId, LeaseStatus, LeaseView, Metadata, Mode, Name, Refusal,
    Rejection,
};
pub use waiting::{WaitOutcome, Waiter};
pub use watch::{Cursor, Scope};
