//! Request → command: every field checked before anything reaches the log (SPEC §3, first in
//! the order of checks). Rules that depend on a resource's policy are checked again at apply.

use tenure_proto::v1 as pb;

use crate::error::ApiError;
use crate::lease::policy::{self, MAX_METADATA_BYTES, MAX_TTL_CEILING_MS, MIN_TTL_MS};
use crate::lease::{AcquireOp, Mode, Query, Rejection, ReleaseOp, RenewOp};

/// Longest `request_id`, `idempotency_key` and `lease_id` accepted.
pub const MAX_KEY_BYTES: usize = 128;

fn name(field: &str, value: &str) -> Result<String, ApiError> {
    if policy::valid_name(value) {
        Ok(value.to_string())
    } else {
        Err(ApiError::invalid(
            field,
            "must be 1-128 bytes of [A-Za-z0-9_.:/-]",
        ))
    }
}

fn key(field: &str, value: &str) -> Result<Option<String>, ApiError> {
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

/// A ttl in milliseconds: absent = the policy's default; negative or malformed is
/// `invalid_argument`; below 1 s or above the 90-day ceiling is `ttl_out_of_range`.
fn ttl(field: &str, value: Option<&prost_types::Duration>) -> Result<Option<u64>, ApiError> {
    let Some(d) = value else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(ApiError::invalid(field, "must be a non-negative duration"));
    }
    let ttl_ms = (d.seconds as u64)
        .saturating_mul(1_000)
        .saturating_add(d.nanos as u64 / 1_000_000);
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
    match pb::LeaseMode::try_from(value) {
        Ok(pb::LeaseMode::Unspecified | pb::LeaseMode::Exclusive) => Ok(Mode::Exclusive),
        Ok(pb::LeaseMode::Read) => Ok(Mode::Read),
        Ok(pb::LeaseMode::Write) => Ok(Mode::Write),
        Err(_) => Err(ApiError::invalid(
            "mode",
            format!("unknown LeaseMode {value}"),
        )),
    }
}

fn token(value: u64) -> Result<u64, ApiError> {
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

pub fn acquire(req: &pb::AcquireRequest) -> Result<AcquireOp, ApiError> {
    let resource = name("resource", &req.resource)?;
    let holder = name("holder", &req.holder)?;
    let ttl_ms = ttl("ttl", req.ttl.as_ref())?;
    let mode = mode(req.mode)?;
    match pb::OnConflict::try_from(req.on_conflict) {
        Ok(pb::OnConflict::Unspecified | pb::OnConflict::Fail) => {}
        Ok(pb::OnConflict::Wait) => {
            return Err(ApiError::invalid(
                "on_conflict",
                "WAIT needs the waiting room, which this release lacks",
            ))
        }
        Err(_) => {
            return Err(ApiError::invalid(
                "on_conflict",
                format!("unknown OnConflict {}", req.on_conflict),
            ))
        }
    }
    if policy::metadata_bytes(&req.metadata) > MAX_METADATA_BYTES {
        return Err(ApiError::invalid(
            "metadata",
            format!("over {MAX_METADATA_BYTES} bytes of keys and values"),
        ));
    }
    Ok(AcquireOp {
        resource,
        holder,
        ttl_ms,
        mode,
        units: req.units,
        metadata: req.metadata.clone().into_iter().collect(),
        idempotency_key: key("idempotency_key", &req.idempotency_key)?,
    })
}

pub fn renew(req: &pb::RenewRequest) -> Result<RenewOp, ApiError> {
    Ok(RenewOp {
        resource: name("resource", &req.resource)?,
        lease_id: key("lease_id", &req.lease_id)?.unwrap_or_default(),
        holder: name("holder", &req.holder)?,
        fencing_token: token(req.fencing_token)?,
        ttl_ms: ttl("ttl", req.ttl.as_ref())?,
    })
}

pub fn release(req: &pb::ReleaseRequest) -> Result<ReleaseOp, ApiError> {
    Ok(ReleaseOp {
        resource: name("resource", &req.resource)?,
        lease_id: key("lease_id", &req.lease_id)?.unwrap_or_default(),
        holder: name("holder", &req.holder)?,
        fencing_token: token(req.fencing_token)?,
    })
}

pub fn validate(req: &pb::ValidateRequest) -> Result<(Query, bool), ApiError> {
    let resource = name("resource", &req.resource)?;
    let lease_id = key("lease_id", &req.lease_id)?.unwrap_or_default();
    if lease_id.is_empty() && req.fencing_token == 0 {
        return Err(ApiError::invalid(
            "lease_id",
            "lease_id or fencing_token is required",
        ));
    }
    key("fsm_machine", &req.fsm_machine)?;
    key("fsm_transition", &req.fsm_transition)?;
    let query = Query::Validate {
        resource,
        lease_id,
        fencing_token: req.fencing_token,
    };
    Ok((query, stale(req.consistency)?))
}

pub fn get_resource(req: &pb::GetResourceRequest) -> Result<(Query, bool), ApiError> {
    Ok((
        Query::Resource {
            name: name("name", &req.name)?,
        },
        stale(req.consistency)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire_req() -> pb::AcquireRequest {
        pb::AcquireRequest {
            resource: "r".into(),
            holder: "h".into(),
            ..Default::default()
        }
    }

    fn reason(result: Result<AcquireOp, ApiError>) -> &'static str {
        result.err().map_or("ok", |e| e.reason_and_code().0)
    }

    #[test]
    fn ttl_zero_negative_and_huge_get_their_reasons() {
        let with_ttl = |seconds, nanos| pb::AcquireRequest {
            ttl: Some(prost_types::Duration { seconds, nanos }),
            ..acquire_req()
        };
        assert_eq!(reason(acquire(&with_ttl(0, 0))), "ttl_out_of_range");
        assert_eq!(
            reason(acquire(&with_ttl(0, 999_000_000))),
            "ttl_out_of_range"
        );
        assert_eq!(reason(acquire(&with_ttl(-5, 0))), "invalid_argument");
        assert_eq!(reason(acquire(&with_ttl(1, -1))), "invalid_argument");
        assert_eq!(reason(acquire(&with_ttl(i64::MAX, 0))), "ttl_out_of_range");
        assert_eq!(reason(acquire(&with_ttl(30, 0))), "ok");
    }

    #[test]
    fn unknown_enum_values_are_invalid_arguments() {
        assert_eq!(
            reason(acquire(&pb::AcquireRequest {
                mode: 99,
                ..acquire_req()
            })),
            "invalid_argument"
        );
        assert_eq!(
            reason(acquire(&pb::AcquireRequest {
                on_conflict: -1,
                ..acquire_req()
            })),
            "invalid_argument"
        );
        assert!(stale(7).is_err());
    }

    #[test]
    fn metadata_over_16_kib_is_refused() {
        let mut req = acquire_req();
        req.metadata
            .insert("k".into(), "v".repeat(MAX_METADATA_BYTES));
        assert_eq!(reason(acquire(&req)), "invalid_argument");
        req.metadata
            .insert("k".into(), "v".repeat(MAX_METADATA_BYTES - 1));
        assert_eq!(reason(acquire(&req)), "ok");
    }

    #[test]
    fn renew_and_release_require_a_fencing_token() {
        let renew_req = pb::RenewRequest {
            resource: "r".into(),
            holder: "h".into(),
            ..Default::default()
        };
        assert_eq!(
            renew(&renew_req).err().map(|e| e.reason_and_code().0),
            Some("invalid_argument")
        );
    }
}
