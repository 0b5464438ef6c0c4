//! Reads: what a client may ask of the state, answered by a pure function of the state.
//! Linearizable reads run this on the leader after a quorum round; stale reads run it locally.

use serde::{Deserialize, Serialize};

use super::machine::State;
use super::policy::Policy;
use super::types::{Lease, LeaseStatus, LeaseView, Rejection};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    Resource {
        name: String,
    },
    Validate {
        resource: String,
        lease_id: String,
        fencing_token: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    Resource(ResourceView),
    Validate(Validation),
}

pub fn answer(state: &State, query: &Query) -> Answer {
    match query {
        Query::Resource { name } => Answer::Resource(state.resource_view(name)),
        Query::Validate {
            resource,
            lease_id,
            fencing_token,
        } => Answer::Validate(state.validate(resource, lease_id, *fencing_token)),
    }
}

/// A resource as reads show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceView {
    pub name: String,
    pub policy: Policy,
    pub leases: Vec<LeaseView>,
    pub revision: u64,
    pub ad_hoc: bool,
}

/// The answer of `Validate` (SPEC §4.10).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    pub valid: bool,
    pub reason: String,
    pub lease: Option<LeaseView>,
}

impl State {
    pub fn resource_view(&self, name: &str) -> ResourceView {
        let rs = self.resources.get(name);
        ResourceView {
            name: name.to_string(),
            policy: self.policy_of(name).clone(),
            leases: rs
                .and_then(|rs| rs.lease.as_ref())
                .map(|l| self.live_view(l))
                .into_iter()
                .collect(),
            revision: rs.map_or(0, |rs| rs.revision),
            ad_hoc: true,
        }
    }

    /// Judges a (lease, token) pair by the committed lease clock (SPEC §4.10).
    pub fn validate(&self, resource: &str, lease_id: &str, fencing_token: u64) -> Validation {
        let answer = |valid: bool, reason: String, lease: Option<LeaseView>| Validation {
            valid,
            reason,
            lease,
        };
        let rs = self.resources.get(resource);
        let current = rs.and_then(|rs| rs.lease.as_ref());
        let names = |l: &Lease| {
            if lease_id.is_empty() {
                l.fencing_token == fencing_token
            } else {
                l.lease_id == lease_id
            }
        };
        if let Some(lease) = current.filter(|l| names(l)) {
            let view = self.live_view(lease);
            return if fencing_token != 0 && fencing_token != lease.fencing_token {
                let reason = Rejection::StaleFencingToken {
                    expected: lease.fencing_token,
                    got: fencing_token,
                };
                answer(false, reason.to_string(), Some(view))
            } else if self.clock.now_ms() >= lease.expires_at_ms {
                answer(false, "lease expired".into(), Some(view))
            } else {
                answer(true, "ok".into(), Some(view))
            };
        }
        if let Some(ended) = rs
            .and_then(|rs| rs.ended.as_ref())
            .filter(|e| names(&e.lease))
        {
            let reason = match ended.status {
                LeaseStatus::Released => "lease released",
                _ => "lease expired",
            };
            return answer(false, reason.into(), Some(self.ended_view(ended)));
        }
        if let Some(lease) =
            current.filter(|l| fencing_token != 0 && fencing_token < l.fencing_token)
        {
            let reason = Rejection::StaleFencingToken {
                expected: lease.fencing_token,
                got: fencing_token,
            };
            return answer(false, reason.to_string(), None);
        }
        answer(false, "lease not found".into(), None)
    }
}
