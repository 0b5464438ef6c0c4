//! Acquire, renew, release, transfer, cancel a wait; book and cancel a booking.

use super::*;

pub fn acquire(req: &pb::AcquireRequest) -> Result<AcquireOp, ApiError> {
    let resource = name("resource", &req.resource)?;
    let holder = name("holder", &req.holder)?;
    let ttl_ms = ttl("ttl", req.ttl.as_ref())?;
    let mode = mode(req.mode)?;
    let wait_ms = wait_ms(req.on_conflict, req.wait_timeout.as_ref())?;
    let metadata = req.metadata.clone().into_iter().collect();
    policy::check_metadata(&metadata, MAX_METADATA_BYTES)?;
    Ok(AcquireOp {
        resource,
        holder,
        ttl_ms,
        mode,
        units: req.units,
        metadata,
        idempotency_key: key("idempotency_key", &req.idempotency_key)?,
        wait_ms,
    })
}

/// `on_conflict` and `wait_timeout`: None = FAIL, or how long a `WAIT` stays queued.
fn wait_ms(
    on_conflict: i32,
    wait_timeout: Option<&prost_types::Duration>,
) -> Result<Option<u64>, ApiError> {
    match pb::OnConflict::try_from(on_conflict) {
        Ok(pb::OnConflict::Unspecified | pb::OnConflict::Fail) => Ok(None),
        Ok(pb::OnConflict::Wait) => {
            let wait_ms = duration_ms("wait_timeout", wait_timeout)?
                .filter(|ms| *ms > 0)
                .unwrap_or(DEFAULT_WAIT_TIMEOUT_MS);
            if wait_ms > MAX_TTL_CEILING_MS {
                return Err(ApiError::invalid(
                    "wait_timeout",
                    format!("must be at most {MAX_TTL_CEILING_MS} ms"),
                ));
            }
            Ok(Some(wait_ms))
        }
        Err(_) => Err(ApiError::invalid(
            "on_conflict",
            format!("unknown OnConflict {on_conflict}"),
        )),
    }
}

/// `AcquireMany` (SPEC §4.25): each claim's name and mode, 1 to 64 distinct resources, and
/// the fields an acquire has.
pub fn acquire_many(req: &pb::AcquireManyRequest) -> Result<AcquireManyOp, ApiError> {
    let holder = name("holder", &req.holder)?;
    if req.claims.is_empty() {
        return Err(ApiError::invalid("claims", "name at least one resource"));
    }
    if req.claims.len() > MAX_CLAIMS {
        return Err(ApiError::invalid(
            "claims",
            format!("at most {MAX_CLAIMS} resources in one AcquireMany"),
        ));
    }
    let mut claims = Vec::with_capacity(req.claims.len());
    let mut seen = std::collections::BTreeSet::new();
    for (k, claim) in req.claims.iter().enumerate() {
        let resource = name(&format!("claims[{k}].resource"), &claim.resource)?;
        if !seen.insert(resource.clone()) {
            return Err(ApiError::invalid(
                "claims",
                format!("names resource {resource} twice"),
            ));
        }
        claims.push(Claim {
            resource,
            mode: mode_in(&format!("claims[{k}].mode"), claim.mode)?,
            units: claim.units,
        });
    }
    let ttl_ms = ttl("ttl", req.ttl.as_ref())?;
    let session_id = match req.session_id.as_str() {
        "" => None,
        id => Some(super::session_id(id)?),
    };
    if session_id.is_some() && ttl_ms.is_some() {
        return Err(ApiError::invalid(
            "ttl",
            "a lease on a session lives while its session lives: leave ttl unset",
        ));
    }
    let metadata = req.metadata.clone().into_iter().collect();
    policy::check_metadata(&metadata, MAX_METADATA_BYTES)?;
    Ok(AcquireManyOp {
        holder,
        claims,
        ttl_ms,
        session_id,
        metadata,
        wait_ms: wait_ms(req.on_conflict, req.wait_timeout.as_ref())?,
    })
}

/// How long a `WAIT` acquire stays queued when the request leaves `wait_timeout` unset.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 =
    tenure_proto::contract::DEFAULT_WAIT_TIMEOUT.as_millis() as u64;

pub fn cancel_wait(req: &pb::CancelWaitRequest) -> Result<CancelWaitOp, ApiError> {
    Ok(CancelWaitOp {
        resource: name("resource", &req.resource)?,
        holder: name("holder", &req.holder)?,
        wait_id: (req.queued_revision != 0).then_some(req.queued_revision),
    })
}

pub fn book(req: &pb::BookRequest) -> Result<BookOp, ApiError> {
    let resource = name("resource", &req.resource)?;
    let holder = name("holder", &req.holder)?;
    let start_wall_ms = instant_ms("start", req.start.as_ref())?;
    let duration_ms = duration_ms("duration", req.duration.as_ref())?
        .ok_or_else(|| ApiError::invalid("duration", "is required"))?;
    if !(MIN_TTL_MS..=MAX_TTL_CEILING_MS).contains(&duration_ms) {
        return Err(ApiError::invalid(
            "duration",
            format!("must be between {MIN_TTL_MS} ms and {MAX_TTL_CEILING_MS} ms"),
        ));
    }
    Ok(BookOp {
        resource,
        holder,
        start_wall_ms,
        duration_ms,
        // The node's own setting, which the API sets (validation is the request's alone).
        ad_hoc_bookable: false,
    })
}

pub fn cancel_booking(req: &pb::CancelBookingRequest) -> Result<CancelBookingOp, ApiError> {
    Ok(CancelBookingOp {
        resource: name("resource", &req.resource)?,
        holder: name("holder", &req.holder)?,
        start_wall_ms: instant_ms("start", req.start.as_ref())?,
    })
}

/// A renew, and with `replace_metadata` the lease's new metadata (rules version 2).
pub fn renew(req: &pb::RenewRequest) -> Result<Op, ApiError> {
    let renew = RenewOp {
        resource: name("resource", &req.resource)?,
        lease_id: key("lease_id", &req.lease_id)?.unwrap_or_default(),
        holder: name("holder", &req.holder)?,
        fencing_token: token(req.fencing_token)?,
        ttl_ms: ttl("ttl", req.ttl.as_ref())?,
    };
    if !req.replace_metadata {
        if !req.metadata.is_empty() {
            return Err(ApiError::invalid(
                "metadata",
                "set replace_metadata to replace the lease's metadata (or leave metadata empty)",
            ));
        }
        return Ok(Op::Renew(renew));
    }
    let metadata = req.metadata.clone().into_iter().collect();
    policy::check_metadata(&metadata, MAX_METADATA_BYTES)?;
    Ok(Op::RenewWithMetadata(RenewMetadataOp { renew, metadata }))
}

pub fn release(req: &pb::ReleaseRequest) -> Result<ReleaseOp, ApiError> {
    Ok(ReleaseOp {
        resource: name("resource", &req.resource)?,
        lease_id: key("lease_id", &req.lease_id)?.unwrap_or_default(),
        holder: name("holder", &req.holder)?,
        fencing_token: token(req.fencing_token)?,
    })
}

pub fn transfer(req: &pb::TransferRequest) -> Result<TransferOp, ApiError> {
    Ok(TransferOp {
        resource: name("resource", &req.resource)?,
        lease_id: key("lease_id", &req.lease_id)?.unwrap_or_default(),
        holder: name("holder", &req.holder)?,
        fencing_token: token(req.fencing_token)?,
        to_holder: name("to_holder", &req.to_holder)?,
        to_principal: if req.to_principal.is_empty() {
            None
        } else {
            Some(name("to_principal", &req.to_principal)?)
        },
    })
}
