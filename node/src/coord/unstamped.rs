//! A [`Proposal`] as a follower hands it to the leader (`Raft.Propose`): every field but the
//! stamp, which the leader takes when it forms the entry (`coord::batch`). Encoded as releases
//! before proposals were one type encoded their `ProposeRequest`, so that nodes of both
//! releases still hand writes to each other.

use serde::{Deserialize, Serialize};

use crate::lease::{Op, Proposal, Stamp};

/// `S` is a string: borrowed to send, owned once received.
#[derive(Debug, Serialize, Deserialize)]
pub struct Unstamped<S, O> {
    principal: S,
    admin: bool,
    request_id: Option<S>,
    /// The receiving node's `--require-registration`.
    #[serde(default)]
    require_registration: bool,
    op: O,
}

impl<'a> Unstamped<&'a str, &'a Op> {
    /// What is sent of `proposal`.
    pub fn of(proposal: &'a Proposal) -> Self {
        Unstamped {
            principal: &proposal.principal,
            admin: proposal.admin,
            request_id: proposal.request_id.as_deref(),
            require_registration: proposal.require_registration,
            op: &proposal.op,
        }
    }
}

impl Unstamped<String, Op> {
    /// The proposal received, to be stamped by this leader's batcher.
    pub fn into_proposal(self) -> Proposal {
        Proposal {
            stamp: Stamp::default(),
            principal: self.principal,
            admin: self.admin,
            request_id: self.request_id,
            require_registration: self.require_registration,
            op: self.op,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::ReleaseOp;
    use crate::store::codec::{from_bytes, to_bytes_as, Wire};

    /// The type a follower sent before proposals were one type.
    #[derive(Serialize)]
    struct ProposeRequest {
        principal: String,
        admin: bool,
        request_id: Option<String>,
        require_registration: bool,
        op: Op,
    }

    fn proposal() -> Proposal {
        Proposal {
            stamp: Stamp {
                mono_ms: 7,
                wall_ms: 8,
                clock_epoch: 9,
            },
            principal: "p".into(),
            admin: true,
            request_id: Some("r-1".into()),
            require_registration: true,
            op: Op::Release(ReleaseOp {
                resource: "a".into(),
                lease_id: "l".into(),
                holder: "h".into(),
                fencing_token: 3,
            }),
        }
    }

    #[test]
    fn a_handed_over_proposal_is_encoded_as_before_and_arrives_unstamped() {
        let sent = proposal();
        let before = ProposeRequest {
            principal: sent.principal.clone(),
            admin: sent.admin,
            request_id: sent.request_id.clone(),
            require_registration: sent.require_registration,
            op: sent.op.clone(),
        };
        for wire in [Wire::Binary, Wire::Json] {
            let bytes = to_bytes_as(wire, &Unstamped::of(&sent)).expect("encodes");
            assert_eq!(bytes, to_bytes_as(wire, &before).expect("encodes"));
            let (received, _): (Unstamped<String, Op>, _) = from_bytes(&bytes).expect("decodes");
            let received = received.into_proposal();
            assert_eq!(received.stamp, Stamp::default());
            assert_eq!(
                received,
                Proposal {
                    stamp: Stamp::default(),
                    ..sent.clone()
                }
            );
        }
    }
}
