//! What the log carries (commands, in a versioned envelope) and what applying one answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bookings::Booking;
pub use super::legacy::shapes::{BookOpV1, CreateOpV1};
use super::many::ManyOutcome;
use super::policy::Policy;
use super::query::ResourceView;
use super::quota::{Quota, QuotaView};
use super::session::SessionView;
use super::types::{AcquireOutcome, LeaseView, Mode, Rejection};

/// The principal the leader's own entries carry (reclaims, ticks, the rules' raise).
pub const SYSTEM: &str = "tenure";

/// A log entry's payload. Versioned so that a later release can still read an older log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// Commands live briefly (proposed, applied, dropped); boxing V1 would change every caller.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    V1(Proposal),
    /// Proposals the leader committed together as one entry, applied in order, each with its
    /// own reply. No two name the same resource ([`Op::resource_key`]), so every grant on a
    /// resource still has its own entry index as its fencing token.
    Batch(Vec<Proposal>),
}

impl Command {
    /// The rules version a member needs to apply the entry: its ops' highest.
    pub fn rules_needed(&self) -> u32 {
        self.proposals()
            .iter()
            .map(|p| p.op.rules_needed())
            .max()
            .unwrap_or(crate::rules::FIRST)
    }

    /// The entry's proposals, in the order they apply.
    pub fn proposals(&self) -> &[Proposal] {
        match self {
            Command::V1(proposal) => std::slice::from_ref(proposal),
            Command::Batch(proposals) => proposals.as_slice(),
        }
    }
}

/// How openraft names an entry's payload in its logs: the resources it touches, not the
/// whole command (which holds callers' names and metadata).
impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proposals = self.proposals();
        write!(f, "{} command(s)", proposals.len())?;
        if let Some(resource) = proposals.iter().find_map(|p| p.op.resource_key()) {
            write!(f, ", first on {resource:?}")?;
        }
        Ok(())
    }
}

/// The leader's clocks when it proposed the entry. Followers never stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The leader's monotonic clock (CLOCK_MONOTONIC, since boot), milliseconds.
    pub mono_ms: u64,
    /// The leader's wall clock, Unix milliseconds: advisory, for `expires_at` in replies.
    pub wall_ms: u64,
    /// Which run of the monotonic clock `mono_ms` comes from (the boot, in production):
    /// stamps of different epochs are never compared, so a reboot cannot freeze the clock.
    #[serde(default)]
    pub clock_epoch: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub stamp: Stamp,
    /// The authenticated caller.
    pub principal: String,
    /// Whether the caller has the admin role (may change any principal's lease).
    pub admin: bool,
    /// Exactly-once key (SPEC §5), per principal.
    pub request_id: Option<String>,
    /// The proposing node runs with registration required: an acquire of an unregistered
    /// name is `resource_not_found`. Carried in the entry so that every node applies alike.
    #[serde(default)]
    pub require_registration: bool,
    pub op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A registration as logs written before policies had `bookable` and `max_holders` hold it
    /// (its policy a `PolicyV1`); new ones are [`Op::CreateResource`]. Variants keep their
    /// numbers in the encoding, so a new variant goes last and an old one stays readable.
    #[serde(rename = "CreateResource")]
    CreateResourceV1(CreateOpV1),
    Acquire(AcquireOp),
    Renew(RenewOp),
    Release(ReleaseOp),
    Transfer(TransferOp),
    CancelWait(CancelWaitOp),
    /// A booking as logs written before bookings needed a bookable resource hold it: applied
    /// by the rules of then (any resource bookable, a booking denies renewals of leases
    /// granted before it). New ones are [`Op::Book`].
    #[serde(rename = "Book")]
    BookV1(BookOpV1),
    CancelBooking(CancelBookingOp),
    /// Proposed by the leader when leases are due: ends each that is still past its grace.
    Reclaim {
        leases: Vec<(String, u64)>,
    },
    /// Proposed by the leader to keep the committed lease clock fresh.
    Tick,
    /// An admin changes quotas (appended: older logs keep their variant numbers).
    SetQuota(SetQuotaOp),
    /// JSON names the variants: the old names stay with the old layouts.
    #[serde(rename = "CreateResource2")]
    CreateResource(CreateOp),
    #[serde(rename = "Book2")]
    Book(BookOp),
    /// Sessions (SPEC §4.24).
    CreateSession(CreateSessionOp),
    RenewSession(RenewSessionOp),
    CloseSession(CloseSessionOp),
    /// An acquire whose lease (or wait) lives on a session.
    AcquireOnSession(SessionAcquireOp),
    /// All of several resources in one entry, or none (SPEC §4.25).
    AcquireMany(AcquireManyOp),
    /// Proposed by the leader once every member supports rules version `to` (SPEC §4.26):
    /// the cluster uses them from the next entry on. Rules version 2.
    RaiseRules {
        to: u32,
    },
    /// A renew that also replaces its lease's metadata (`RenewRequest.replace_metadata`).
    /// Rules version 2.
    RenewWithMetadata(RenewMetadataOp),
}

impl Op {
    /// The one resource this op reads and changes, when it names it: ops that share an entry
    /// must name different resources. `None` (an op without a name, or one that touches many
    /// resources) commits in an entry of its own.
    pub fn resource_key(&self) -> Option<&str> {
        match self {
            Op::CreateResource(op) => op.name.as_deref(),
            Op::CreateResourceV1(op) => op.name.as_deref(),
            Op::BookV1(op) => Some(&op.resource),
            Op::Acquire(op) => Some(&op.resource),
            Op::Renew(op) => Some(&op.resource),
            Op::RenewWithMetadata(op) => Some(&op.renew.resource),
            Op::Release(op) => Some(&op.resource),
            Op::Transfer(op) => Some(&op.resource),
            Op::CancelWait(op) => Some(&op.resource),
            Op::Book(op) => Some(&op.resource),
            Op::CancelBooking(op) => Some(&op.resource),
            Op::AcquireOnSession(op) => Some(&op.acquire.resource),
            // A session's renewals batch with other commands; two of the same session do not
            // share an entry (a resource of the same name only costs a batch its company).
            Op::RenewSession(op) => Some(&op.session_id),
            // A session is named after its entry, and its end touches many resources.
            Op::Reclaim { .. }
            | Op::Tick
            | Op::SetQuota(_)
            | Op::RaiseRules { .. }
            | Op::CreateSession(_)
            | Op::CloseSession(_)
            // Its grants share its entry's index as their token: an entry of its own.
            | Op::AcquireMany(_) => None,
        }
    }

    /// The acquire an op asks for, on a session or not.
    /// The metadata the op carries, if any: most of what a large command weighs.
    pub fn metadata(&self) -> Option<&BTreeMap<String, String>> {
        match self {
            Op::AcquireMany(op) => Some(&op.metadata),
            Op::CreateSession(op) => Some(&op.metadata),
            Op::RenewWithMetadata(op) => Some(&op.metadata),
            op => op.acquire_op().map(|op| &op.metadata),
        }
    }

    pub fn acquire_op(&self) -> Option<&AcquireOp> {
        match self {
            Op::Acquire(op) => Some(op),
            Op::AcquireOnSession(op) => Some(&op.acquire),
            _ => None,
        }
    }

    /// Whether a `request_id` makes the op exactly-once (SPEC §5). A renew does not: applied
    /// again with the same token it extends the same lease from a later instant, as asked,
    /// and renews are most of a busy cluster's writes. Nor do the leader's own entries. A
    /// renew that replaces metadata does: applied again late, it could put back metadata a
    /// later renew replaced.
    pub fn exactly_once(&self) -> bool {
        !matches!(
            self,
            Op::Renew(_)
                | Op::RenewSession(_)
                | Op::Reclaim { .. }
                | Op::Tick
                | Op::RaiseRules { .. }
        )
    }

    /// The rules version that introduced the op (SPEC §4.26): a member of an older release
    /// cannot decode it, so it is proposed only once the cluster runs that version.
    pub fn rules_needed(&self) -> u32 {
        match self {
            // A member applies a raise only to rules it knows.
            Op::RaiseRules { to } => (*to).max(crate::rules::RAISE),
            Op::RenewWithMetadata(_) => crate::rules::RENEW_METADATA,
            _ => crate::rules::FIRST,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSessionOp {
    pub holder: String,
    /// None = the ad-hoc policy's default ttl.
    pub ttl_ms: Option<u64>,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewSessionOp {
    /// `ses_<index>` as written (checked when applied).
    pub session_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseSessionOp {
    pub session_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAcquireOp {
    pub session_id: String,
    /// Its `ttl_ms` is None: the lease lives while the session lives.
    pub acquire: AcquireOp,
}

/// SPEC §4.25: every named resource, granted together in one entry, or none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireManyOp {
    pub holder: String,
    /// Distinct resources, in the caller's order (the order of the granted leases).
    pub claims: Vec<Claim>,
    /// None = each resource's policy default (or the session's ttl).
    pub ttl_ms: Option<u64>,
    /// `ses_<n>` as written: every lease lives on this session.
    pub session_id: Option<String>,
    /// Every lease's metadata.
    pub metadata: BTreeMap<String, String>,
    /// `on_conflict = WAIT`: queue in every room for at most this long. None = FAIL.
    pub wait_ms: Option<u64>,
}

/// One resource of an [`AcquireManyOp`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub resource: String,
    pub mode: Mode,
    pub units: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetQuotaOp {
    /// None = the defaults of every principal.
    pub principal: Option<String>,
    /// Each quota's new limit; None = back to the default.
    pub changes: Vec<(Quota, Option<u64>)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateOp {
    /// None = a name made from the entry's index (`res_<index>`).
    pub name: Option<String>,
    /// Complete: the API fills absent fields with the registered defaults.
    pub policy: Policy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireOp {
    pub resource: String,
    pub holder: String,
    /// None = the policy's default ttl.
    pub ttl_ms: Option<u64>,
    pub mode: Mode,
    pub units: u64,
    pub metadata: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
    /// `on_conflict = WAIT`: queue for at most this long. None = answer at once (FAIL).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelWaitOp {
    pub resource: String,
    pub holder: String,
    /// Only the wait queued by this entry; None = the holder's wait, whichever it is.
    pub wait_id: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookOp {
    pub resource: String,
    pub holder: String,
    /// Unix milliseconds.
    pub start_wall_ms: u64,
    pub duration_ms: u64,
    /// The proposing node lets holders book ad-hoc resources (`--ad-hoc-bookable`); carried
    /// in the entry so that every node applies alike.
    pub ad_hoc_bookable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelBookingOp {
    pub resource: String,
    pub holder: String,
    pub start_wall_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewOp {
    pub resource: String,
    /// Empty = the holder's current lease on the resource.
    pub lease_id: String,
    pub holder: String,
    pub fencing_token: u64,
    /// None = the lease's last ttl.
    pub ttl_ms: Option<u64>,
}

/// [`Op::RenewWithMetadata`]: the renew, and the lease's metadata from now on (empty: none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewMetadataOp {
    pub renew: RenewOp,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseOp {
    pub resource: String,
    pub lease_id: String,
    pub holder: String,
    pub fencing_token: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferOp {
    pub resource: String,
    pub lease_id: String,
    pub holder: String,
    pub fencing_token: u64,
    pub to_holder: String,
    /// None = the lease keeps its principal.
    pub to_principal: Option<String>,
}

/// The answer of applying one entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Acquire(AcquireOutcome),
    Lease(LeaseView),
    Resource(Box<ResourceView>),
    Rejected(Rejection),
    /// CancelWait: whether a wait was removed, and the index of the entry that decided it.
    Cancelled {
        cancelled: bool,
        revision: u64,
    },
    Booking(Booking),
    /// Reclaims done by the entry (Reclaim/Tick), and entries with nothing to answer.
    Reclaimed(Vec<LeaseView>),
    /// Blank and membership entries.
    None,
    /// A [`Command::Batch`]: one reply per proposal, in order.
    Batch(Vec<Reply>),
    /// SetQuota: the limits as they are now (appended, like the op).
    Quota(Box<QuotaView>),
    /// CreateSession, RenewSession, CloseSession: the session as the entry left it.
    Session(Box<SessionView>),
    /// AcquireMany: all granted, or why not, resource by resource.
    Many(Box<ManyOutcome>),
}
