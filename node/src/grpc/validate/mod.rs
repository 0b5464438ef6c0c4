//! Request → command: every field checked before anything reaches the log (SPEC §3, first in
//! the order of checks). Rules that depend on a resource's policy are checked again at apply.
//!
//! Here the fields every request family shares; `leases` checks the writes on leases and
//! bookings, `resources` the registrations and quotas, `reads` the reads and `Watch`.

mod leases;
mod reads;
mod resources;
mod sessions;
#[cfg(test)]
mod tests;

use tenure_proto::v1 as pb;

use crate::error::ApiError;
use crate::lease::command::SetQuotaOp;
use crate::lease::many::MAX_CLAIMS;
use crate::lease::policy::{self, MAX_METADATA_BYTES, MAX_TTL_CEILING_MS, MIN_TTL_MS};
use crate::lease::query::MAX_PAGE_SIZE;
use crate::lease::quota::{self, Quota};
use crate::lease::types::lease_order;
use crate::lease::{
    AcquireManyOp, AcquireOp, BookOp, CancelBookingOp, CancelWaitOp, Claim, CreateOp, EventKind,
    FsmRequirement, Mode, Op, Policy, Query, Rejection, ReleaseOp, RenewMetadataOp, RenewOp,
    TransferOp,
};

pub use leases::*;
pub use reads::*;
pub use resources::*;
pub use sessions::*;

/// Longest `request_id`, `idempotency_key` and `lease_id` accepted.
pub const MAX_KEY_BYTES: usize = 128;

pub(crate) fn name(field: &str, value: &str) -> Result<String, ApiError> {
    crate::lease::check_name(field, value)?;
    Ok(value.to_string())
}

pub(crate) fn key(field: &str, value: &str) -> Result<Option<String>, ApiError> {
    if value.len() > MAX_KEY_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("longer than {MAX_KEY_BYTES} bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(field, "contains control characters"));
    }
    Ok((!value.is_empty()).then(|| value.to_string()))
}

/// A duration in milliseconds; negative or malformed is `invalid_argument`.
pub(crate) fn duration_ms(
    field: &str,
    value: Option<&prost_types::Duration>,
) -> Result<Option<u64>, ApiError> {
    let Some(d) = value else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(ApiError::invalid(field, "must be a non-negative duration"));
    }
    Ok(Some(
        (d.seconds as u64)
            .saturating_mul(1_000)
            .saturating_add(d.nanos as u64 / 1_000_000),
    ))
}

/// A ttl in milliseconds: absent = the policy's default; negative or malformed is
/// `invalid_argument`; below 1 s or above the 90-day ceiling is `ttl_out_of_range`.
fn ttl(field: &str, value: Option<&prost_types::Duration>) -> Result<Option<u64>, ApiError> {
    let Some(ttl_ms) = duration_ms(field, value)? else {
        return Ok(None);
    };
    if !(MIN_TTL_MS..=MAX_TTL_CEILING_MS).contains(&ttl_ms) {
        return Err(Rejection::TtlOutOfRange {
            ttl_ms,
            min_ms: MIN_TTL_MS,
            max_ms: MAX_TTL_CEILING_MS,
        }
        .into());
    }
    Ok(Some(ttl_ms))
}

fn mode(value: i32) -> Result<Mode, ApiError> {
    mode_in("mode", value)
}

/// A `LeaseMode` in `field`.
fn mode_in(field: &str, value: i32) -> Result<Mode, ApiError> {
    match pb::LeaseMode::try_from(value) {
        Ok(pb::LeaseMode::Unspecified | pb::LeaseMode::Exclusive) => Ok(Mode::Exclusive),
        Ok(pb::LeaseMode::Read) => Ok(Mode::Read),
        Ok(pb::LeaseMode::Write) => Ok(Mode::Write),
        Err(_) => Err(ApiError::invalid(
            field,
            format!("unknown LeaseMode {value}"),
        )),
    }
}

pub(crate) fn token(value: u64) -> Result<u64, ApiError> {
    if value == 0 {
        return Err(ApiError::invalid(
            "fencing_token",
            "is required (the token of the lease's grant)",
        ));
    }
    Ok(value)
}

/// Whether a read may be served from local state.
pub fn stale(consistency: i32) -> Result<bool, ApiError> {
    match pb::Consistency::try_from(consistency) {
        Ok(pb::Consistency::Stale) => Ok(true),
        Ok(_) => Ok(false),
        Err(_) => Err(ApiError::invalid(
            "consistency",
            format!("unknown Consistency {consistency}"),
        )),
    }
}

pub fn request_id(value: &str) -> Result<Option<String>, ApiError> {
    key("request_id", value)
}

/// A quota call's principal: empty = the defaults of every principal.
pub fn quota_principal(value: &str) -> Result<Option<String>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    name("principal", value).map(Some)
}

/// A Unix instant in milliseconds; before 1970 or malformed is `invalid_argument`.
fn instant_ms(field: &str, value: Option<&prost_types::Timestamp>) -> Result<u64, ApiError> {
    let t = value.ok_or_else(|| ApiError::invalid(field, "is required"))?;
    if t.seconds < 0 || t.nanos < 0 || t.nanos >= 1_000_000_000 {
        return Err(ApiError::invalid(
            field,
            "must be a valid instant after 1970",
        ));
    }
    Ok((t.seconds as u64)
        .saturating_mul(1_000)
        .saturating_add(t.nanos as u64 / 1_000_000))
}

/// A page size: 0 = the default, above 1000 is `invalid_argument`.
fn page_size(value: u32) -> Result<u32, ApiError> {
    if value > MAX_PAGE_SIZE {
        return Err(ApiError::invalid(
            "page_size",
            format!("must be at most {MAX_PAGE_SIZE}"),
        ));
    }
    Ok(value)
}

fn bad_page_token() -> ApiError {
    ApiError::invalid("page_token", "is not a token this listing returned")
}

/// A label (kind, display name, principal): at most 256 bytes, no control characters.
fn label(field: &str, value: &str, may_be_empty: bool) -> Result<String, ApiError> {
    if policy::valid_label(value, may_be_empty) {
        Ok(value.to_string())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "must be {}-{} bytes without control characters",
                u8::from(!may_be_empty),
                policy::MAX_LABEL_BYTES
            ),
        ))
    }
}
