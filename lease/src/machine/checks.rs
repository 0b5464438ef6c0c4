//! The argument checks the rules share: names (the contract's rule, which the API's request
//! checks use too) and a ttl against a policy.

use super::super::policy::{self, Policy};
use super::super::types::Rejection;

pub(crate) fn check_names(resource: &str, holder: &str) -> Result<(), Rejection> {
    check_name("resource", resource)?;
    check_name("holder", holder)
}

/// A resource, holder or principal name: `invalid_argument` naming `field` unless it follows
/// the contract's name rule.
pub fn check_name(field: &str, value: &str) -> Result<(), Rejection> {
    if policy::valid_name(value) {
        Ok(())
    } else {
        Err(Rejection::invalid(
            field,
            format!("must be {}", policy::NAME_RULE),
        ))
    }
}

pub(crate) fn check_ttl(policy: &Policy, ttl_ms: u64) -> Result<(), Rejection> {
    let max_ms = policy.ttl_ceiling_ms();
    if ttl_ms < policy::MIN_TTL_MS || ttl_ms > max_ms {
        return Err(Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: policy::MIN_TTL_MS,
            max_ms,
        });
    }
    Ok(())
}
