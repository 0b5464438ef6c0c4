//! The machine's answers in the model's terms, and the model's requests as commands.

use std::collections::BTreeMap;

use super::{Answer, Request, Shown};
use crate::command::{AcquireOp, Op, ReleaseOp, RenewOp, Reply};
use crate::policy::Policy;
use crate::types::{LeaseStatus, LeaseView, Mode, Rejection};

pub(super) fn shown(view: &LeaseView) -> Shown {
    let lease = &view.lease;
    Shown {
        lease_id: lease.lease_id().to_string(),
        resource: lease.resource.clone().to_string(),
        holder: lease.holder.clone().to_string(),
        principal: lease.principal.clone().to_string(),
        token: lease.fencing_token,
        acquired_at_ms: lease.acquired_at_ms,
        expires_at_ms: lease.expires_at_ms,
        ttl_ms: lease.ttl_ms,
        status: view.status,
        remaining_ms: view.remaining_ms,
    }
}

pub(super) fn answer_of(reply: &Reply) -> Answer {
    match reply {
        Reply::Acquire(outcome) if outcome.granted => Answer::Granted(shown(
            outcome
                .lease
                .as_ref()
                .expect("a granted acquire carries its lease"),
        )),
        Reply::Acquire(outcome) => Answer::Refused {
            reason: outcome
                .refusal
                .expect("a refused acquire carries its refusal")
                .reason()
                .as_str(),
            holders: outcome
                .holders
                .iter()
                .map(|v| (v.lease.holder.to_string(), v.lease.fencing_token))
                .collect(),
        },
        Reply::Lease(view) => Answer::Lease(shown(view)),
        Reply::Rejected(rejection) => Answer::Rejected {
            reason: rejection.reason().as_str(),
            stale: match rejection {
                Rejection::StaleFencingToken { expected, got } => Some((*expected, *got)),
                _ => None,
            },
        },
        Reply::Reclaimed(views) => {
            let mut reclaimed: Vec<_> = views
                .iter()
                .map(|v| {
                    assert_eq!(v.status, LeaseStatus::Reclaimed, "{v:?}");
                    (v.lease.resource.to_string(), v.lease.fencing_token)
                })
                .collect();
            reclaimed.sort();
            Answer::Reclaimed(reclaimed)
        }
        Reply::None => panic!("a command entry answered Reply::None"),
        Reply::Batch(_) => panic!("the model proposes one command per entry"),
        Reply::Resource(view) => panic!("the model registers nothing, yet got {view:?}"),
        Reply::Cancelled { .. } | Reply::Booking(_) => panic!("the model never waits or books"),
        Reply::Quota(_) => panic!("the model sets no quotas"),
        Reply::Session(_) => panic!("the model makes no sessions"),
        Reply::Many(_) => panic!("the model acquires one resource at a time"),
    }
}

pub(super) fn op_of(request: &Request) -> Op {
    match request.clone() {
        Request::Acquire {
            resource,
            holder,
            ttl_ms,
        } => Op::Acquire(AcquireOp {
            resource,
            holder,
            ttl_ms,
            mode: Mode::Exclusive,
            units: 1,
            metadata: BTreeMap::new(),
            idempotency_key: None,
            wait_ms: None,
        }),
        Request::Renew {
            resource,
            lease_id,
            holder,
            fencing_token,
            ttl_ms,
        } => Op::Renew(RenewOp {
            resource,
            lease_id,
            holder,
            fencing_token,
            ttl_ms,
        }),
        Request::Release {
            resource,
            lease_id,
            holder,
            fencing_token,
        } => Op::Release(ReleaseOp {
            resource,
            lease_id,
            holder,
            fencing_token,
        }),
        Request::Tick => Op::Tick,
    }
}

pub(super) fn policy_with_grace(renewal_grace_ms: u64) -> Policy {
    Policy {
        renewal_grace_ms,
        ..Policy::ad_hoc()
    }
}
