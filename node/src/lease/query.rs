//! Reads: what a client may ask of the state, answered by a pure function of the state.
//! Linearizable reads run this on the leader after a quorum round; stale reads run it locally.

use serde::{Deserialize, Serialize};

use super::machine::{ResourceView, State, Validation};

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
