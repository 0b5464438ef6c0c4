//! The reads (`ListResources`, `ListLeases`, `History`, `Validate`, `GetResource`) and
//! `Watch`: what they ask for, and their page tokens.

use super::*;

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
    let (holder, principal) = holder_and_principal(&req.holder, &req.principal)?;
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

/// A listing's `holder` and `principal` filters: empty = none, else a name and a label.
pub(super) fn holder_and_principal(
    holder: &str,
    principal: &str,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let holder = (!holder.is_empty())
        .then(|| name("holder", holder))
        .transpose()?;
    let principal = (!principal.is_empty())
        .then(|| label("principal", principal, false))
        .transpose()?;
    Ok((holder, principal))
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
