//! The shapes of older logs and snapshots that the current ones replaced: read, converted,
//! never written (but in tests of their readers).

use serde::{Deserialize, Serialize};

use crate::policy::{FsmRequirement, Policy};
use crate::types::Mode;

/// A policy as old logs (`Op::CreateResourceV1`) and snapshots of format 3 and 4 hold it
/// (postcard has no optional fields): without `bookable` (every resource was) and
/// `max_holders`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyV1 {
    pub default_ttl_ms: u64,
    pub max_ttl_ms: u64,
    pub max_lifetime_ms: u64,
    pub renewal_grace_ms: u64,
    pub transferable: bool,
    pub shared_modes: Vec<Mode>,
    pub total_units: u64,
    pub lock_delay_ms: u64,
    pub max_waiters: u32,
    pub max_metadata_bytes: u32,
    pub kind: String,
    pub display_name: String,
    #[serde(default)]
    pub fsm_requirements: Vec<FsmRequirement>,
}

impl From<PolicyV1> for Policy {
    fn from(old: PolicyV1) -> Policy {
        Policy {
            bookable: true,
            max_holders: 0,
            default_ttl_ms: old.default_ttl_ms,
            max_ttl_ms: old.max_ttl_ms,
            max_lifetime_ms: old.max_lifetime_ms,
            renewal_grace_ms: old.renewal_grace_ms,
            transferable: old.transferable,
            shared_modes: old.shared_modes,
            total_units: old.total_units,
            lock_delay_ms: old.lock_delay_ms,
            max_waiters: old.max_waiters,
            max_metadata_bytes: old.max_metadata_bytes,
            kind: old.kind,
            display_name: old.display_name,
            fsm_requirements: old.fsm_requirements,
        }
    }
}

/// The layout of before (tests of the readers of old logs and snapshots).
#[cfg(any(test, feature = "testkit"))]
impl From<&Policy> for PolicyV1 {
    fn from(p: &Policy) -> PolicyV1 {
        PolicyV1 {
            default_ttl_ms: p.default_ttl_ms,
            max_ttl_ms: p.max_ttl_ms,
            max_lifetime_ms: p.max_lifetime_ms,
            renewal_grace_ms: p.renewal_grace_ms,
            transferable: p.transferable,
            shared_modes: p.shared_modes.clone(),
            total_units: p.total_units,
            lock_delay_ms: p.lock_delay_ms,
            max_waiters: p.max_waiters,
            max_metadata_bytes: p.max_metadata_bytes,
            kind: p.kind.clone(),
            display_name: p.display_name.clone(),
            fsm_requirements: p.fsm_requirements.clone(),
        }
    }
}

/// [`Op::CreateResourceV1`]'s registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateOpV1 {
    pub name: Option<String>,
    pub policy: PolicyV1,
}

/// [`Op::BookV1`]'s booking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookOpV1 {
    pub resource: String,
    pub holder: String,
    pub start_wall_ms: u64,
    pub duration_ms: u64,
}
