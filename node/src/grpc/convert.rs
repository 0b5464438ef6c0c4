//! Domain → protobuf conversions for replies. (Requests go the other way in `validate`.)

use tenure_proto::v1 as pb;

use crate::error::ApiError;
use crate::lease::session::session_name;
use crate::lease::ManyOutcome;
use crate::lease::{
    Booking, Event, EventKind, LeaseStatus, LeaseView, Mode, Policy, Refusal, Reply, ResourceView,
    SessionStatus, SessionView,
};

pub fn timestamp(unix_ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (unix_ms / 1_000) as i64,
        nanos: ((unix_ms % 1_000) * 1_000_000) as i32,
    }
}

pub fn duration(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (ms / 1_000) as i64,
        nanos: ((ms % 1_000) * 1_000_000) as i32,
    }
}

pub fn mode(mode: Mode) -> pb::LeaseMode {
    match mode {
        Mode::Exclusive => pb::LeaseMode::Exclusive,
        Mode::Read => pb::LeaseMode::Read,
        Mode::Write => pb::LeaseMode::Write,
    }
}

pub fn status(status: LeaseStatus) -> pb::LeaseStatus {
    match status {
        LeaseStatus::Active => pb::LeaseStatus::Active,
        LeaseStatus::Grace => pb::LeaseStatus::Grace,
        LeaseStatus::Released => pb::LeaseStatus::Released,
        LeaseStatus::Reclaimed => pb::LeaseStatus::Reclaimed,
        LeaseStatus::Transferred => pb::LeaseStatus::Transferred,
    }
}

pub fn lease(view: &LeaseView) -> pb::Lease {
    let lease = &view.lease;
    pb::Lease {
        lease_id: lease.lease_id().to_string(),
        resource: lease.resource.to_string(),
        holder: lease.holder.to_string(),
        principal: lease.principal.to_string(),
        mode: mode(lease.mode) as i32,
        units: lease.units,
        fencing_token: lease.fencing_token,
        acquired_at: Some(timestamp(lease.acquired_wall_ms)),
        expires_at: Some(timestamp(view.expires_wall_ms)),
        metadata: lease
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        status: status(view.status) as i32,
        ttl: Some(duration(lease.ttl_ms)),
        remaining: Some(duration(view.remaining_ms)),
        session_id: lease
            .session
            .map(|id| session_name(id.get()))
            .unwrap_or_default(),
    }
}

pub fn session(view: &SessionView) -> pb::Session {
    pb::Session {
        session_id: session_name(view.id),
        holder: view.holder.to_string(),
        principal: view.principal.to_string(),
        ttl: Some(duration(view.ttl_ms)),
        created_at: Some(timestamp(view.created_wall_ms)),
        expires_at: Some(timestamp(view.expires_wall_ms)),
        remaining: Some(duration(view.remaining_ms)),
        status: match view.status {
            SessionStatus::Active => pb::SessionStatus::Active,
            SessionStatus::Grace => pb::SessionStatus::Grace,
            SessionStatus::Closed => pb::SessionStatus::Closed,
            SessionStatus::Expired => pb::SessionStatus::Expired,
        } as i32,
        metadata: view
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        lease_count: view.lease_count,
        wait_count: view.wait_count,
        leases: view.leases.iter().map(lease).collect(),
    }
}

/// The session of a session write's reply.
pub fn session_reply(reply: Reply) -> Result<pb::Session, ApiError> {
    match reply {
        Reply::Session(view) => Ok(session(&view)),
        Reply::Rejected(rejection) => Err(rejection.into()),
        other => Err(unexpected(other)),
    }
}

pub fn policy(policy: &Policy) -> pb::Policy {
    pb::Policy {
        default_ttl: Some(duration(policy.default_ttl_ms)),
        max_ttl: Some(duration(policy.max_ttl_ms)),
        max_lifetime: Some(duration(policy.max_lifetime_ms)),
        renewal_grace: Some(duration(policy.renewal_grace_ms)),
        transferable: policy.transferable,
        shared_modes: policy
            .shared_modes
            .iter()
            .map(|m| mode(*m) as i32)
            .collect(),
        total_units: policy.total_units,
        lock_delay: Some(duration(policy.lock_delay_ms)),
        max_waiters: policy.max_waiters,
        max_metadata_bytes: policy.max_metadata_bytes,
        kind: policy.kind.clone(),
        display_name: policy.display_name.clone(),
        fsm_requirements: policy
            .fsm_requirements
            .iter()
            .map(|r| pb::FsmRequirement {
                machine: r.machine.clone(),
                transition: r.transition.clone(),
            })
            .collect(),
        bookable: policy.bookable,
        max_holders: policy.max_holders,
    }
}

pub fn event_type(kind: EventKind) -> pb::EventType {
    use pb::EventType as T;
    match kind {
        EventKind::Registered => T::Registered,
        EventKind::Acquired => T::Acquired,
        EventKind::Queued => T::Queued,
        EventKind::Admitted => T::Admitted,
        EventKind::WaitTimedOut => T::WaitTimedOut,
        EventKind::WaitCancelled => T::WaitCancelled,
        EventKind::Renewed => T::Renewed,
        EventKind::Released => T::Released,
        EventKind::Transferred => T::Transferred,
        EventKind::Reclaimed => T::Reclaimed,
        EventKind::Booked => T::Booked,
        EventKind::BookingCancelled => T::BookingCancelled,
    }
}

pub fn history_entry(resource: &str, event: &Event) -> pb::HistoryEntry {
    let status_of = |s: Option<LeaseStatus>| s.map_or(pb::LeaseStatus::Unspecified, status) as i32;
    let successor = event.successor.as_ref();
    pb::HistoryEntry {
        revision: event.revision,
        seq: event.seq,
        event: event_type(event.kind) as i32,
        resource: resource.to_string(),
        at: Some(timestamp(event.at_wall_ms)),
        actor: event.actor.to_string(),
        holder: event.holder.to_string(),
        lease_id: event.lease_id.to_string(),
        fencing_token: event.fencing_token,
        from: status_of(event.from),
        to: status_of(event.to),
        metadata: event
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        mode: mode(event.mode) as i32,
        units: event.units,
        to_holder: successor.map(|s| s.holder.to_string()).unwrap_or_default(),
        to_lease_id: successor
            .map(|s| s.lease_id.to_string())
            .unwrap_or_default(),
        to_fencing_token: successor.map_or(0, |s| s.fencing_token),
        session_id: event
            .session
            .map(|id| session_name(id.get()))
            .unwrap_or_default(),
    }
}

pub fn resource(view: &ResourceView) -> pb::Resource {
    pb::Resource {
        name: view.name.clone(),
        kind: view.policy.kind.clone(),
        display_name: view.policy.display_name.clone(),
        policy: Some(policy(&view.policy)),
        leases: view.leases.iter().map(lease).collect(),
        waiting: view.waiting as u32,
        revision: view.revision,
        ad_hoc: view.ad_hoc,
        lease_count: view.lease_count as u64,
        units_in_use: view.units_in_use,
        bookings: view
            .bookings
            .iter()
            .map(|b| booking(&view.name, b))
            .collect(),
        waiters: view
            .waiters
            .iter()
            .enumerate()
            .map(|(at, (w, deadline_wall_ms))| pb::Waiter {
                holder: w.holder.to_string(),
                principal: w.principal.to_string(),
                mode: mode(w.mode) as i32,
                units: w.units,
                position: at as u32 + 1,
                queued_revision: w.wait_id,
                wait_deadline: Some(timestamp(*deadline_wall_ms)),
            })
            .collect(),
    }
}

pub fn booking(resource: &str, b: &Booking) -> pb::Booking {
    pb::Booking {
        resource: resource.to_string(),
        holder: b.holder.to_string(),
        principal: b.principal.to_string(),
        start: Some(timestamp(b.start_wall_ms)),
        duration: Some(duration(b.duration_ms)),
        revision: b.revision,
    }
}

/// The lease a write answered with; a rejection becomes the error.
pub fn lease_reply(reply: Reply) -> Result<pb::Lease, ApiError> {
    match reply {
        Reply::Lease(view) => Ok(lease(&view)),
        Reply::Rejected(rejection) => Err(rejection.into()),
        other => Err(unexpected(other)),
    }
}

/// The booking a write answered with; a rejection becomes the error.
pub fn booking_reply(resource: &str, reply: Reply) -> Result<pb::Booking, ApiError> {
    match reply {
        Reply::Booking(view) => Ok(booking(resource, &view)),
        Reply::Rejected(rejection) => Err(rejection.into()),
        other => Err(unexpected(other)),
    }
}

/// A reply of another kind than the call's: a bug, reported as `internal`.
pub fn unexpected(what: impl std::fmt::Debug) -> ApiError {
    ApiError::Internal(format!("unexpected reply {what:?}"))
}

/// A refusal's `booked_from`: the start of the booking in the way.
pub fn booked_from(refusal: Option<Refusal>) -> Option<prost_types::Timestamp> {
    match refusal {
        Some(Refusal::ResourceBooked { start_wall_ms }) => Some(timestamp(start_wall_ms)),
        _ => None,
    }
}

/// An `AcquireMany` answer (SPEC §4.25).
pub fn acquire_many(outcome: &ManyOutcome) -> pb::AcquireManyResponse {
    let reason = |refusal: Option<Refusal>| refusal.map(|r| r.reason().to_string());
    pb::AcquireManyResponse {
        granted: outcome.granted,
        leases: outcome.leases.iter().map(lease).collect(),
        reason: match outcome.granted {
            true => String::new(),
            false => reason(outcome.summary().refusal).unwrap_or_default(),
        },
        claims: outcome
            .claims
            .iter()
            .map(|claim| pb::ClaimOutcome {
                resource: claim.resource.clone(),
                reason: reason(claim.refusal).unwrap_or_default(),
                holders: claim.holders.iter().map(lease).collect(),
                queue_position: claim.queue_position,
                booked_from: booked_from(claim.refusal),
                closed_until: claim.closed_until_wall_ms.map(timestamp),
            })
            .collect(),
    }
}
