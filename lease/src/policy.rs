//! Resource policies and the limits of SPEC §4.13.

use serde::{Deserialize, Serialize};

use super::types::{Mode, Rejection};

/// The name rule is the contract's, shared with the API's request checks.
pub use super::legacy::shapes::PolicyV1;
pub use tenure_proto::contract::{valid_name, MAX_NAME_BYTES, NAME_RULE};

pub const SECOND_MS: u64 = 1_000;
pub const MINUTE_MS: u64 = 60 * SECOND_MS;
pub const HOUR_MS: u64 = 60 * MINUTE_MS;
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// The shortest ttl any lease may have.
pub const MIN_TTL_MS: u64 = SECOND_MS;
/// The absolute ceiling of any ttl or lifetime, whatever a policy says.
pub const MAX_TTL_CEILING_MS: u64 = 90 * DAY_MS;
/// Metadata: keys plus values, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// How long a `request_id` is remembered, in lease-clock time.
pub const DEDUP_WINDOW_MS: u64 = 10 * MINUTE_MS;
/// Waiters per resource, by default and at most.
pub const DEFAULT_MAX_WAITERS: u32 = 10_000;
pub const MAX_WAITERS_CEILING: u32 = 1_000_000;
/// A policy's `max_holders` at most.
pub const MAX_HOLDERS_CEILING: u32 = 1_000_000;
/// `kind`, `display_name`, and each FSM machine or transition name: at most this many bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// FSM requirements per policy.
pub const MAX_FSM_REQUIREMENTS: usize = 64;

fn bookable_before_the_rule() -> bool {
    true
}

/// A (machine, transition) pair a lease on the resource may guard (SPEC §4.10).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FsmRequirement {
    pub machine: String,
    pub transition: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Whether holders may book windows of the resource (SPEC §4.8, bookable resources only).
    /// A policy from before the field had no such rule: it reads as bookable.
    #[serde(default = "bookable_before_the_rule")]
    pub bookable: bool,
    /// Live leases at most, for shared resources without a unit pool; 0 = no cap.
    #[serde(default)]
    pub max_holders: u32,
    pub default_ttl_ms: u64,
    pub max_ttl_ms: u64,
    /// Absolute cap from acquisition, renewals included; 0 = no cap.
    pub max_lifetime_ms: u64,
    pub renewal_grace_ms: u64,
    pub transferable: bool,
    /// Shared modes that may coexist; empty = exclusive only.
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

impl Policy {
    /// The policy of ad-hoc resources (SPEC §4.13): default ttl 60 s, max ttl 24 h, no grace,
    /// exclusive only, not transferable, no lifetime cap.
    pub fn ad_hoc() -> Self {
        Policy {
            bookable: false,
            max_holders: 0,
            default_ttl_ms: 60 * SECOND_MS,
            max_ttl_ms: DAY_MS,
            max_lifetime_ms: 0,
            renewal_grace_ms: 0,
            transferable: false,
            shared_modes: Vec::new(),
            total_units: 0,
            lock_delay_ms: 0,
            max_waiters: DEFAULT_MAX_WAITERS,
            max_metadata_bytes: MAX_METADATA_BYTES as u32,
            kind: String::new(),
            display_name: String::new(),
            fsm_requirements: Vec::new(),
        }
    }

    /// The defaults of a registered resource (SPEC §4.13): default ttl 1 h, max ttl 24 h,
    /// grace 60 s; everything else as ad hoc.
    pub fn registered() -> Self {
        Policy {
            default_ttl_ms: HOUR_MS,
            renewal_grace_ms: MINUTE_MS,
            ..Policy::ad_hoc()
        }
    }

    /// Checks that the policy is coherent and within the absolute limits. The API checks a
    /// policy before proposing it and apply checks it again, so a log entry can never install
    /// an incoherent one.
    pub fn check(&self) -> Result<(), Rejection> {
        let bad = |field: &str, problem: String| Err(Rejection::invalid(field, problem));
        let ceiling = MAX_TTL_CEILING_MS;
        if !(MIN_TTL_MS..=ceiling).contains(&self.max_ttl_ms) {
            return bad(
                "policy.max_ttl",
                format!("must be within [{MIN_TTL_MS}, {ceiling}] ms"),
            );
        }
        if self.max_lifetime_ms != 0 && !(MIN_TTL_MS..=ceiling).contains(&self.max_lifetime_ms) {
            return bad(
                "policy.max_lifetime",
                format!("must be 0 (no cap) or within [{MIN_TTL_MS}, {ceiling}] ms"),
            );
        }
        // Against the effective ceiling, so that an acquire without a ttl can be granted.
        if !(MIN_TTL_MS..=self.ttl_ceiling_ms()).contains(&self.default_ttl_ms) {
            return bad(
                "policy.default_ttl",
                format!("must be within [{MIN_TTL_MS} ms, max_ttl] and at most max_lifetime"),
            );
        }
        for (field, value) in [
            ("policy.renewal_grace", self.renewal_grace_ms),
            ("policy.lock_delay", self.lock_delay_ms),
        ] {
            if value > ceiling {
                return bad(field, format!("must be at most {ceiling} ms"));
            }
        }
        if self.shared_modes.contains(&Mode::Exclusive) {
            return bad("policy.shared_modes", "may list READ and WRITE only".into());
        }
        if self.max_holders > MAX_HOLDERS_CEILING {
            return bad(
                "policy.max_holders",
                format!("must be 0 (no cap) or at most {MAX_HOLDERS_CEILING}"),
            );
        }
        if !(1..=MAX_WAITERS_CEILING).contains(&self.max_waiters) {
            return bad(
                "policy.max_waiters",
                format!("must be within [1, {MAX_WAITERS_CEILING}]"),
            );
        }
        if !(1..=MAX_METADATA_BYTES as u32).contains(&self.max_metadata_bytes) {
            return bad(
                "policy.max_metadata_bytes",
                format!("must be within [1, {MAX_METADATA_BYTES}]"),
            );
        }
        for (field, value) in [("kind", &self.kind), ("display_name", &self.display_name)] {
            if !valid_label(value, true) {
                return bad(
                    field,
                    format!("must be at most {MAX_LABEL_BYTES} bytes without control characters"),
                );
            }
        }
        if self.fsm_requirements.len() > MAX_FSM_REQUIREMENTS {
            return bad(
                "policy.fsm_requirements",
                format!("at most {MAX_FSM_REQUIREMENTS} pairs"),
            );
        }
        for r in &self.fsm_requirements {
            if !valid_label(&r.machine, false) || !valid_label(&r.transition, false) {
                return bad(
                    "policy.fsm_requirements",
                    format!("machine and transition must be 1-{MAX_LABEL_BYTES} bytes without control characters"),
                );
            }
        }
        Ok(())
    }

    /// Whether `(machine, transition)` is one of the policy's FSM requirements.
    pub fn guards(&self, machine: &str, transition: &str) -> bool {
        self.fsm_requirements
            .iter()
            .any(|r| r.machine == machine && r.transition == transition)
    }

    /// Whether a lease in `mode` is allowed at all under this policy.
    pub fn allows(&self, mode: Mode) -> bool {
        mode == Mode::Exclusive || self.shared_modes.contains(&mode)
    }

    /// The effective upper bound of a ttl under this policy: `max_ttl`, and no more than the
    /// lifetime cap, since a longer ttl could never be held.
    pub fn ttl_ceiling_ms(&self) -> u64 {
        let ceiling = self.max_ttl_ms.min(MAX_TTL_CEILING_MS);
        match self.max_lifetime_ms {
            0 => ceiling,
            cap => ceiling.min(cap),
        }
    }
}

/// A free-text label: at most 256 bytes, no control characters; empty only if allowed.
pub fn valid_label(value: &str, may_be_empty: bool) -> bool {
    (may_be_empty || !value.is_empty())
        && value.len() <= MAX_LABEL_BYTES
        && !value.chars().any(char::is_control)
}

/// Bytes a metadata map counts against a policy's limit: every key and value. (What it
/// costs in memory, and against its principal's quota, adds `quota::METADATA_ENTRY_BYTES`
/// per entry; [`MAX_METADATA_ENTRIES`] bounds that part.)
pub fn metadata_bytes<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> usize {
    entries.into_iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// Metadata entries per lease at most.
pub const MAX_METADATA_ENTRIES: usize = 64;

/// Checks metadata against `max_bytes` of keys and values: at most [`MAX_METADATA_ENTRIES`]
/// entries, no control characters in keys or values.
pub fn check_metadata(
    metadata: &std::collections::BTreeMap<String, String>,
    max_bytes: usize,
) -> Result<(), Rejection> {
    if metadata.len() > MAX_METADATA_ENTRIES {
        return Err(Rejection::invalid(
            "metadata",
            format!("more than {MAX_METADATA_ENTRIES} entries"),
        ));
    }
    let control = |s: &String| s.chars().any(char::is_control);
    if metadata.iter().any(|(k, v)| control(k) || control(v)) {
        return Err(Rejection::invalid(
            "metadata",
            "control characters in a key or value",
        ));
    }
    if metadata_bytes(metadata) > max_bytes {
        return Err(Rejection::invalid(
            "metadata",
            format!("over {max_bytes} bytes of keys and values"),
        ));
    }
    Ok(())
}
