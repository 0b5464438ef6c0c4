//! Request → command: every field checked before anything reaches the log (SPEC §3, first in
//! the order of checks). Rules that depend on a resource's policy are checked again at apply.

use tenure_proto::v1 as pb;

use crate::error::ApiError;
use crate::lease::command::SetQuotaOp;
use crate::lease::policy::{self, MAX_METADATA_BYTES, MAX_TTL_CEILING_MS, MIN_TTL_MS};
use crate::lease::query::MAX_PAGE_SIZE;
use crate::lease::quota::{self, Quota};
use crate::lease::types::lease_order;
use crate::lease::{
    AcquireOp, BookOp, CancelBookingOp, CancelWaitOp, CreateOp, EventKind, FsmRequirement, Mode,
    Policy, Query, Rejection, ReleaseOp, RenewOp, TransferOp,
};

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

pub fn set_quota(req: &pb::SetQuotaRequest) -> Result<SetQuotaOp, ApiError> {
    let principal = quota_principal(&req.principal)?;
    if req.changes.is_empty() {
        return Err(ApiError::invalid("changes", "name at least one quota"));
    }
    let mut changes = Vec::with_capacity(req.changes.len());
    for change in &req.changes {
        let Some(quota) = Quota::from_name(&change.quota) else {
            let known: Vec<&str> = quota::ALL.iter().map(|q| q.name()).collect();
            return Err(ApiError::invalid(
                "changes.quota",
                format!(
                    "{:?} is not a quota (one of {})",
                    change.quota,
                    known.join(", ")
                ),
            ));
        };
        if changes.iter().any(|(q, _)| *q == quota) {
            return Err(ApiError::invalid(
                "changes.quota",
                format!("{} is named twice", quota.name()),
            ));
        }
        changes.push((quota, (!change.reset).then_some(change.limit)));
    }
    Ok(SetQuotaOp { principal, changes })
}

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

/// What a `Watch` streams: one resource or a prefix, from a revision, some event kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    pub scope: crate::lease::Scope,
    pub after: u64,
    pub kinds: Vec<EventKind>,
    pub live_only: bool,
}

pub fn watch(req: &pb::WatchRequest) -> Result<WatchSpec, ApiError> {
    let scope = match (req.resource.is_empty(), req.prefix.is_empty()) {
        (false, false) => {
            return Err(ApiError::invalid(
                "resource",
                "give either resource or prefix, not both",
            ))
        }
        (false, true) => crate::lease::Scope::Resource(name("resource", &req.resource)?),
        (true, _) => {
            if !req.prefix.is_empty() && !policy::valid_name(&req.prefix) {
                return Err(ApiError::invalid(
                    "prefix",
                    "must be at most 128 bytes of [A-Za-z0-9_.:/-]",
                ));
            }
            crate::lease::Scope::Prefix(req.prefix.clone())
        }
    };
    let kinds = req
        .events
        .iter()
        .map(|k| event_kind(*k))
        .collect::<Result<Vec<_>, _>>()?;
    if req.live_only && req.start_revision != 0 {
        return Err(ApiError::invalid(
            "live_only",
            "cannot be combined with a start_revision",
        ));
    }
    Ok(WatchSpec {
        scope,
        after: req.start_revision,
        kinds,
        live_only: req.live_only,
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

/// A registered policy: absent fields take the registered defaults of SPEC §4.13.
pub fn policy(
    value: Option<&pb::Policy>,
    kind: &str,
    display_name: &str,
) -> Result<Policy, ApiError> {
    let defaults = Policy::registered();
    let p = value.cloned().unwrap_or_default();
    let or = |field: &str, d: Option<&prost_types::Duration>, default: u64| {
        duration_ms(field, d).map(|ms| ms.unwrap_or(default))
    };
    let mut shared_modes = p
        .shared_modes
        .iter()
        .map(|m| match mode(*m)? {
            Mode::Exclusive => Err(ApiError::invalid(
                "policy.shared_modes",
                "may list READ and WRITE only",
            )),
            shared => Ok(shared),
        })
        .collect::<Result<Vec<_>, _>>()?;
    shared_modes.sort();
    shared_modes.dedup();
    let mut fsm_requirements: Vec<FsmRequirement> = p
        .fsm_requirements
        .iter()
        .map(|r| FsmRequirement {
            machine: r.machine.clone(),
            transition: r.transition.clone(),
        })
        .collect();
    fsm_requirements.sort();
    fsm_requirements.dedup();
    let pick = |top: &str, inner: String| {
        if top.is_empty() {
            inner
        } else {
            top.to_string()
        }
    };
    let mut policy = Policy {
        bookable: p.bookable,
        max_holders: p.max_holders,
        default_ttl_ms: or("policy.default_ttl", p.default_ttl.as_ref(), 0)?,
        max_ttl_ms: or("policy.max_ttl", p.max_ttl.as_ref(), defaults.max_ttl_ms)?,
        max_lifetime_ms: or("policy.max_lifetime", p.max_lifetime.as_ref(), 0)?,
        renewal_grace_ms: or(
            "policy.renewal_grace",
            p.renewal_grace.as_ref(),
            defaults.renewal_grace_ms,
        )?,
        transferable: p.transferable,
        shared_modes,
        total_units: p.total_units,
        lock_delay_ms: or("policy.lock_delay", p.lock_delay.as_ref(), 0)?,
        max_waiters: match p.max_waiters {
            0 => defaults.max_waiters,
            n => n,
        },
        max_metadata_bytes: match p.max_metadata_bytes {
            0 => defaults.max_metadata_bytes,
            n => n,
        },
        kind: pick(kind, p.kind),
        display_name: pick(display_name, p.display_name),
        fsm_requirements,
    };
    if p.default_ttl.is_none() {
        // The registered default (1 h), but never more than the policy lets a lease hold: a
        // policy capping max_ttl or max_lifetime below 1 h needs no default_ttl of its own.
        policy.default_ttl_ms = defaults.default_ttl_ms.min(policy.ttl_ceiling_ms());
    }
    policy.check()?;
    Ok(policy)
}

pub fn create_resource(req: &pb::CreateResourceRequest) -> Result<CreateOp, ApiError> {
    let name = if req.name.is_empty() {
        None
    } else {
        Some(name("name", &req.name)?)
    };
    label("kind", &req.kind, true)?;
    label("display_name", &req.display_name, true)?;
    Ok(CreateOp {
        name,
        policy: policy(req.policy.as_ref(), &req.kind, &req.display_name)?,
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

pub fn list_resources(req: &pb::ListResourcesRequest) -> Result<(Query, bool), ApiError> {
    if !req.prefix.is_empty() && !policy::valid_name(&req.prefix) {
        return Err(ApiError::invalid(
            "prefix",
            format!("must be empty or {}", policy::NAME_RULE),
        ));
    }
    let after = match req.page_token.as_str() {
        "" => None,
        t if policy::valid_name(t) => Some(t.to_string()),
        _ => return Err(bad_page_token()),
    };
    Ok((
        Query::Resources {
            prefix: req.prefix.clone(),
            page_size: page_size(req.page_size)?,
            after,
        },
        stale(req.consistency)?,
    ))
}

/// The page token of `ListLeases`: `RESOURCE|LEASE_ID` (`|` is in neither charset).
pub fn lease_page_token(resource: &str, lease_id: &str) -> String {
    format!("{resource}|{lease_id}")
}

pub fn list_leases(req: &pb::ListLeasesRequest) -> Result<(Query, bool), ApiError> {
    if req.holder.is_empty() && req.principal.is_empty() {
        return Err(ApiError::invalid(
            "holder",
            "holder or principal is required",
        ));
    }
    let holder = (!req.holder.is_empty())
        .then(|| name("holder", &req.holder))
        .transpose()?;
    let principal = (!req.principal.is_empty())
        .then(|| label("principal", &req.principal, false))
        .transpose()?;
    let after = match req.page_token.split_once('|') {
        _ if req.page_token.is_empty() => None,
        Some((r, l)) if policy::valid_name(r) && lease_order(l).is_some() => {
            Some((r.to_string(), l.to_string()))
        }
        _ => return Err(bad_page_token()),
    };
    Ok((
        Query::Leases {
            holder,
            principal,
            page_size: page_size(req.page_size)?,
            after,
        },
        stale(req.consistency)?,
    ))
}

/// The page token of `History`: `REVISION.SEQ`.
pub fn history_page_token((revision, seq): (u64, u32)) -> String {
    format!("{revision}.{seq}")
}

fn event_kind(value: i32) -> Result<EventKind, ApiError> {
    use pb::EventType as T;
    Ok(match T::try_from(value) {
        Ok(T::Registered) => EventKind::Registered,
        Ok(T::Acquired) => EventKind::Acquired,
        Ok(T::Queued) => EventKind::Queued,
        Ok(T::Admitted) => EventKind::Admitted,
        Ok(T::WaitTimedOut) => EventKind::WaitTimedOut,
        Ok(T::WaitCancelled) => EventKind::WaitCancelled,
        Ok(T::Renewed) => EventKind::Renewed,
        Ok(T::Released) => EventKind::Released,
        Ok(T::Transferred) => EventKind::Transferred,
        Ok(T::Reclaimed) => EventKind::Reclaimed,
        Ok(T::Booked) => EventKind::Booked,
        Ok(T::BookingCancelled) => EventKind::BookingCancelled,
        Ok(T::Unspecified) | Err(_) => {
            return Err(ApiError::invalid(
                "events",
                format!("unknown EventType {value}"),
            ))
        }
    })
}

pub fn history(req: &pb::HistoryRequest) -> Result<(Query, bool), ApiError> {
    let ascending = match pb::Order::try_from(req.order) {
        Ok(pb::Order::Asc) => true,
        Ok(pb::Order::Unspecified | pb::Order::Desc) => false,
        Err(_) => {
            return Err(ApiError::invalid(
                "order",
                format!("unknown Order {}", req.order),
            ))
        }
    };
    let after = match req.page_token.split_once('.') {
        _ if req.page_token.is_empty() => None,
        Some((r, s)) => Some((
            r.parse().map_err(|_| bad_page_token())?,
            s.parse().map_err(|_| bad_page_token())?,
        )),
        None => return Err(bad_page_token()),
    };
    let mut kinds = req
        .events
        .iter()
        .map(|e| event_kind(*e))
        .collect::<Result<Vec<_>, _>>()?;
    kinds.sort();
    kinds.dedup();
    Ok((
        Query::History {
            resource: name("resource", &req.resource)?,
            page_size: page_size(req.page_size)?,
            after,
            ascending,
            kinds,
        },
        stale(req.consistency)?,
    ))
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
    let machine = label("fsm_machine", &req.fsm_machine, true)?;
    let transition = label("fsm_transition", &req.fsm_transition, true)?;
    let fsm = match (machine.is_empty(), transition.is_empty()) {
        (true, true) => None,
        (false, false) => Some((machine, transition)),
        _ => {
            return Err(ApiError::invalid(
                "fsm_transition",
                "fsm_machine and fsm_transition go together",
            ))
        }
    };
    let query = Query::Validate {
        resource,
        lease_id,
        fencing_token: req.fencing_token,
        fsm,
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
        result
            .err()
            .map_or("ok", |e| e.reason_and_code().0.as_str())
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
    fn metadata_with_too_many_entries_or_control_characters_is_refused() {
        let mut req = acquire_req();
        for i in 0..policy::MAX_METADATA_ENTRIES {
            req.metadata.insert(format!("k{i}"), "v".into());
        }
        assert_eq!(reason(acquire(&req)), "ok");
        req.metadata.insert("one-more".into(), "v".into());
        assert_eq!(reason(acquire(&req)), "invalid_argument");
        for bad in ["tab\there", "bell\u{7}", "nul\0", "c1\u{85}"] {
            let mut req = acquire_req();
            req.metadata.insert("k".into(), bad.into());
            assert_eq!(reason(acquire(&req)), "invalid_argument", "{bad:?}");
            let mut req = acquire_req();
            req.metadata.insert(bad.into(), "v".into());
            assert_eq!(
                reason(acquire(&req)),
                "invalid_argument",
                "{bad:?} as a key"
            );
        }
    }

    #[test]
    fn an_absent_default_ttl_fits_under_the_policys_caps() {
        let with = |p: pb::Policy| policy(Some(&p), "", "").expect("a valid policy");
        let mins = |m: i64| {
            Some(prost_types::Duration {
                seconds: m * 60,
                nanos: 0,
            })
        };
        assert_eq!(with(pb::Policy::default()).default_ttl_ms, 3_600_000);
        let capped = with(pb::Policy {
            max_lifetime: mins(10),
            ..Default::default()
        });
        assert_eq!(capped.default_ttl_ms, 600_000);
        let short = with(pb::Policy {
            max_ttl: mins(5),
            ..Default::default()
        });
        assert_eq!(short.default_ttl_ms, 300_000);
        let explicit = policy(
            Some(&pb::Policy {
                default_ttl: mins(20),
                max_lifetime: mins(10),
                ..Default::default()
            }),
            "",
            "",
        );
        assert_eq!(
            explicit.err().map(|e| e.reason_and_code().0.as_str()),
            Some("invalid_argument"),
            "a default_ttl the caps forbid is refused, not clamped"
        );
    }

    #[test]
    fn renew_and_release_require_a_fencing_token() {
        let renew_req = pb::RenewRequest {
            resource: "r".into(),
            holder: "h".into(),
            ..Default::default()
        };
        assert_eq!(
            renew(&renew_req)
                .err()
                .map(|e| e.reason_and_code().0.as_str()),
            Some("invalid_argument")
        );
    }
}
