//! Resource policies and the limits of SPEC §4.13.

use serde::{Deserialize, Serialize};

use super::types::Mode;

pub const SECOND_MS: u64 = 1_000;
pub const MINUTE_MS: u64 = 60 * SECOND_MS;
pub const HOUR_MS: u64 = 60 * MINUTE_MS;
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// The shortest ttl any lease may have.
pub const MIN_TTL_MS: u64 = SECOND_MS;
/// The absolute ceiling of any ttl or lifetime, whatever a policy says.
pub const MAX_TTL_CEILING_MS: u64 = 90 * DAY_MS;
/// Resource and holder names: 1–128 bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Metadata: keys plus values, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// How long a `request_id` is remembered, in lease-clock time.
pub const DEDUP_WINDOW_MS: u64 = 10 * MINUTE_MS;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
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
}

impl Policy {
    /// The policy of ad-hoc resources (SPEC §4.13): default ttl 60 s, max ttl 24 h, no grace,
    /// exclusive only, not transferable, no lifetime cap.
    pub fn ad_hoc() -> Self {
        Policy {
            default_ttl_ms: 60 * SECOND_MS,
            max_ttl_ms: DAY_MS,
            max_lifetime_ms: 0,
            renewal_grace_ms: 0,
            transferable: false,
            shared_modes: Vec::new(),
            total_units: 0,
            lock_delay_ms: 0,
            max_waiters: 10_000,
            max_metadata_bytes: MAX_METADATA_BYTES as u32,
            kind: String::new(),
            display_name: String::new(),
        }
    }

    /// Whether a lease in `mode` is allowed at all under this policy.
    pub fn allows(&self, mode: Mode) -> bool {
        mode == Mode::Exclusive || self.shared_modes.contains(&mode)
    }

    /// The effective upper bound of a ttl under this policy.
    pub fn ttl_ceiling_ms(&self) -> u64 {
        self.max_ttl_ms.min(MAX_TTL_CEILING_MS)
    }
}

/// Whether `name` is a valid resource or holder name: 1–128 bytes of `[A-Za-z0-9_.:/-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'))
}

/// Bytes a metadata map counts against its limit: every key and value.
pub fn metadata_bytes<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> usize {
    entries.into_iter().map(|(k, v)| k.len() + v.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_spec_charset_and_length() {
        assert!(valid_name("world/eu-1:shard_7.a"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("ünïcode"));
        assert!(valid_name(&"a".repeat(128)));
        assert!(!valid_name(&"a".repeat(129)));
    }
}
