//! What `Serve` and `Forward` must carry, who may open an inbox, and whom a forward goes to.
//! Arguments are checked first (SPEC §3); the lease checks run on a linearizable read and
//! follow the state machine's order: existence → holder and permission → token → state.

use std::time::Duration;

use tenure_proto::v1 as pb;

use super::{DEFAULT_FORWARD_TIMEOUT, MAX_FORWARD_TIMEOUT, MAX_PAYLOAD_BYTES};
use crate::auth::Caller;
use crate::coord::inbox::Tenure;
use crate::error::ApiError;
use crate::grpc::validate;
use crate::lease::{LeaseId, LeaseStatus, LeaseView, Mode, Rejection, ResourceView};

/// A validated `Forward`.
#[derive(Debug)]
pub struct ForwardCall {
    pub resource: String,
    pub payload: Vec<u8>,
    pub timeout: Duration,
    pub request_id: String,
}

/// The tenure a `Serve` asks to open an inbox for; `lease_id` may be empty (the holder's lease).
pub fn serve_open(open: &pb::ServeOpen) -> Result<Tenure, ApiError> {
    Ok(Tenure {
        resource: validate::name("resource", &open.resource)?,
        holder: validate::name("holder", &open.holder)?,
        lease_id: validate::key("lease_id", &open.lease_id)?.unwrap_or_default(),
        fencing_token: validate::token(open.fencing_token)?,
    })
}

pub fn forward(request: pb::ForwardRequest) -> Result<ForwardCall, ApiError> {
    let resource = validate::name("resource", &request.resource)?;
    if request.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(ApiError::invalid(
            "payload",
            format!(
                "is {} bytes, over the limit of {MAX_PAYLOAD_BYTES}",
                request.payload.len()
            ),
        ));
    }
    // Absent or zero: the default (a zero Duration is what many clients send for "unset").
    let timeout = match validate::duration_ms("timeout", request.timeout.as_ref())? {
        None | Some(0) => DEFAULT_FORWARD_TIMEOUT,
        Some(ms) if ms > MAX_FORWARD_TIMEOUT.as_millis() as u64 => {
            return Err(ApiError::invalid(
                "timeout",
                format!("is over the limit of {MAX_FORWARD_TIMEOUT:?}"),
            ))
        }
        Some(ms) => Duration::from_millis(ms),
    };
    let request_id = validate::request_id(&request.request_id)?.unwrap_or_default();
    Ok(ForwardCall {
        resource,
        payload: request.payload,
        timeout,
        request_id,
    })
}

/// The tenure `caller` may open an inbox for: the live exclusive lease `wanted` names.
pub fn servable(view: &ResourceView, wanted: &Tenure, caller: &Caller) -> Result<Tenure, ApiError> {
    let wanted_id = LeaseId::parse(&wanted.lease_id);
    let names = |l: &LeaseView| {
        if wanted.lease_id.is_empty() {
            l.lease.holder == wanted.holder
        } else {
            Some(l.lease.lease_id()) == wanted_id
        }
    };
    let Some(view) = view.leases.iter().find(|l| names(l)) else {
        return Err(Rejection::LeaseNotFound(format!(
            ": {} has no live lease {}",
            wanted.resource,
            if wanted.lease_id.is_empty() {
                format!("of holder {}", wanted.holder)
            } else {
                wanted.lease_id.clone()
            }
        ))
        .into());
    };
    let lease = &view.lease;
    if lease.holder != wanted.holder {
        return Err(Rejection::InsufficientPermissions(format!(
            "lease {} is held by another holder",
            lease.lease_id()
        ))
        .into());
    }
    if !caller.admin && lease.principal != caller.principal {
        return Err(Rejection::InsufficientPermissions(format!(
            "only the lease's principal or an admin may serve lease {}",
            lease.lease_id()
        ))
        .into());
    }
    if lease.fencing_token != wanted.fencing_token {
        return Err(Rejection::StaleFencingToken {
            expected: lease.fencing_token,
            got: wanted.fencing_token,
        }
        .into());
    }
    if view.status != LeaseStatus::Active {
        return Err(Rejection::LeaseExpired.into());
    }
    if lease.mode != Mode::Exclusive {
        return Err(ApiError::NoOwner(format!(
            "lease {} is shared ({:?}): only an exclusive holder owns {}",
            lease.lease_id(),
            lease.mode,
            lease.resource
        )));
    }
    Ok(Tenure {
        resource: lease.resource.to_string(),
        holder: lease.holder.to_string(),
        lease_id: lease.lease_id().to_string(),
        fencing_token: lease.fencing_token,
    })
}

/// The owner a forward goes to: the resource's exclusive lease, if it is live and unexpired
/// (past expiry, in the renewal grace, downstream work must stop, as `Validate` says).
pub fn owner(view: &ResourceView) -> Result<Tenure, ApiError> {
    let Some(first) = view.leases.first() else {
        return Err(ApiError::NoOwner(format!("nobody holds {}", view.name)));
    };
    let lease = &first.lease;
    if lease.mode != Mode::Exclusive {
        return Err(ApiError::NoOwner(format!(
            "{} is held in shared mode",
            view.name
        )));
    }
    if first.status != LeaseStatus::Active {
        return Err(ApiError::NoOwner(format!(
            "the lease of {} on {} is past its expiry",
            lease.holder, view.name
        )));
    }
    Ok(Tenure {
        resource: lease.resource.to_string(),
        holder: lease.holder.to_string(),
        lease_id: lease.lease_id().to_string(),
        fencing_token: lease.fencing_token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::testkit;

    fn view(leases: Vec<(Mode, LeaseStatus)>) -> ResourceView {
        let leases: Vec<LeaseView> = leases
            .into_iter()
            .enumerate()
            .map(|(n, (mode, status))| {
                let mut view = testkit::view_of(&format!("h{n}"), mode);
                view.lease.position = n as u32;
                view.lease.principal = "alice".into();
                LeaseView { status, ..view }
            })
            .collect();
        let mut view = crate::lease::State::default().resource_view("r");
        view.lease_count = leases.len();
        view.leases = leases;
        view
    }

    fn wanted(holder: &str, lease_id: &str, fencing_token: u64) -> Tenure {
        Tenure {
            resource: "r".into(),
            holder: holder.into(),
            lease_id: lease_id.into(),
            fencing_token,
        }
    }

    fn caller(principal: &str, admin: bool) -> Caller {
        Caller {
            principal: principal.into(),
            admin,
        }
    }

    fn reason<T: std::fmt::Debug>(result: Result<T, ApiError>) -> &'static str {
        result.expect_err("refused").reason_and_code().0.as_str()
    }

    #[test]
    fn only_the_holder_of_the_live_exclusive_lease_with_its_token_may_serve() {
        let held = view(vec![(Mode::Exclusive, LeaseStatus::Active)]);
        let alice = caller("alice", false);
        let tenure = servable(&held, &wanted("h0", "", 7), &alice).expect("the holder");
        assert_eq!(
            (tenure.lease_id.as_str(), tenure.fencing_token),
            ("lse_7_0", 7)
        );
        assert!(servable(&held, &wanted("h0", "lse_7_0", 7), &caller("root", true)).is_ok());
        let refusals = [
            (wanted("h1", "", 7), &alice, "lease_not_found"),
            (wanted("h0", "lse_9_0", 7), &alice, "lease_not_found"),
            (
                wanted("h1", "lse_7_0", 7),
                &alice,
                "insufficient_permissions",
            ),
            (
                wanted("h0", "", 7),
                &caller("bob", false),
                "insufficient_permissions",
            ),
            (wanted("h0", "", 6), &alice, "stale_fencing_token"),
        ];
        for (wanted, caller, expected) in refusals {
            assert_eq!(
                reason(servable(&held, &wanted, caller)),
                expected,
                "{wanted:?}"
            );
        }
        let grace = view(vec![(Mode::Exclusive, LeaseStatus::Grace)]);
        assert_eq!(
            reason(servable(&grace, &wanted("h0", "", 7), &alice)),
            "lease_expired"
        );
        let shared = view(vec![(Mode::Read, LeaseStatus::Active)]);
        assert_eq!(
            reason(servable(&shared, &wanted("h0", "", 7), &alice)),
            "no_owner"
        );
    }

    #[test]
    fn the_owner_is_the_live_exclusive_holder_or_there_is_none() {
        let held = view(vec![(Mode::Exclusive, LeaseStatus::Active)]);
        assert_eq!(owner(&held).expect("owner").holder, "h0");
        for nobody in [
            view(vec![]),
            view(vec![(Mode::Exclusive, LeaseStatus::Grace)]),
            view(vec![
                (Mode::Read, LeaseStatus::Active),
                (Mode::Read, LeaseStatus::Active),
            ]),
        ] {
            assert_eq!(reason(owner(&nobody)), "no_owner");
        }
    }

    #[test]
    fn forward_arguments_are_checked() {
        let ok = || pb::ForwardRequest {
            resource: "r".into(),
            payload: b"x".to_vec(),
            ..Default::default()
        };
        let call = forward(ok()).expect("valid");
        assert_eq!(call.timeout, DEFAULT_FORWARD_TIMEOUT);
        let duration = |seconds, nanos| Some(prost_types::Duration { seconds, nanos });
        for bad in [
            pb::ForwardRequest {
                resource: "bad name".into(),
                ..ok()
            },
            pb::ForwardRequest {
                payload: vec![0; MAX_PAYLOAD_BYTES + 1],
                ..ok()
            },
            pb::ForwardRequest {
                timeout: duration(-1, 0),
                ..ok()
            },
            pb::ForwardRequest {
                timeout: duration(60, 1_000_000),
                ..ok()
            },
            pb::ForwardRequest {
                request_id: "x".repeat(129),
                ..ok()
            },
        ] {
            assert_eq!(reason(forward(bad)), "invalid_argument");
        }
        let max = forward(pb::ForwardRequest {
            timeout: duration(60, 0),
            payload: vec![0; MAX_PAYLOAD_BYTES],
            ..ok()
        })
        .expect("at the limits");
        assert_eq!(max.timeout, MAX_FORWARD_TIMEOUT);
    }

    #[test]
    fn serve_open_needs_names_and_a_token() {
        let ok = || pb::ServeOpen {
            resource: "r".into(),
            holder: "h".into(),
            lease_id: String::new(),
            fencing_token: 7,
        };
        assert!(serve_open(&ok()).is_ok());
        for bad in [
            pb::ServeOpen {
                resource: String::new(),
                ..ok()
            },
            pb::ServeOpen {
                holder: "a b".into(),
                ..ok()
            },
            pb::ServeOpen {
                fencing_token: 0,
                ..ok()
            },
        ] {
            assert_eq!(reason(serve_open(&bad)), "invalid_argument");
        }
    }
}
