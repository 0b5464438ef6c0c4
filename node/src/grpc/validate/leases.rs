//! Acquire, renew, release, transfer, cancel a wait; book and cancel a booking.

use super::*;

pub fn acquire(req: &pb::AcquireRequest) -> Result<AcquireOp, ApiError> {
    let resource = name("resource", &req.resource)?;
    let holder = name("holder", &req.holder)?;
    let ttl_ms = ttl("ttl", req.ttl.as_ref())?;
    let mode = mode(req.mode)?;
    let wait_ms = match pb::OnConflict::try_from(req.on_conflict) {
        Ok(pb::OnConflict::Unspecified | pb::OnConflict::Fail) => None,
        Ok(pb::OnConflict::Wait) => {
            let wait_ms = duration_ms("wait_timeout", req.wait_timeout.as_ref())?
                .filter(|ms| *ms > 0)
                .unwrap_or(DEFAULT_WAIT_TIMEOUT_MS);
            if wait_ms > MAX_TTL_CEILING_MS {
                return Err(ApiError::invalid(
                    "wait_timeout",
                    format!("must be at most {MAX_TTL_CEILING_MS} ms"),
                ));
            }
            Some(wait_ms)
        }
        Err(_) => {
            return Err(ApiError::invalid(
                "on_conflict",
                format!("unknown OnConflict {}", req.on_conflict),
            ))
        }
    };
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

/// How long a `WAIT` acquire stays queued when the request leaves `wait_timeout` unset.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 =
    tenure_proto::contract::DEFAULT_WAIT_TIMEOUT.as_millis() as u64;

pub fn cancel_wait(req: &pb::CancelWaitRequest) -> Result<CancelWaitOp, ApiError> {
    Ok(CancelWaitOp {
        resource: name("resource", &req.resource)?,
        holder: name("holder", &req.holder)?,
        wait_id: None,
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
