//! A delivery's [`Outcome`] on the internal `Deliver` RPC.

use tenure_proto::raft::v1::{deliver_response, DeliverResponse};

use crate::coord::inbox::Outcome;

impl From<Outcome> for DeliverResponse {
    fn from(outcome: Outcome) -> Self {
        use deliver_response::Outcome as Wire;
        let outcome = match outcome {
            Outcome::Replied(payload) => Wire::Reply(payload),
            Outcome::TooLarge(bytes) => Wire::ReplyTooLarge(bytes),
            Outcome::Rejected(reason) => Wire::Rejected(reason),
            Outcome::NotDelivered(why) => Wire::NotDelivered(why),
            Outcome::Unanswered(why) => Wire::Unanswered(why),
        };
        DeliverResponse {
            outcome: Some(outcome),
        }
    }
}

impl From<DeliverResponse> for Outcome {
    fn from(response: DeliverResponse) -> Self {
        use deliver_response::Outcome as Wire;
        match response.outcome {
            Some(Wire::Reply(payload)) => Outcome::Replied(payload),
            Some(Wire::ReplyTooLarge(bytes)) => Outcome::TooLarge(bytes),
            Some(Wire::Rejected(reason)) => Outcome::Rejected(reason),
            Some(Wire::NotDelivered(why)) => Outcome::NotDelivered(why),
            Some(Wire::Unanswered(why)) => Outcome::Unanswered(why),
            // Nothing says it was not processed, so it may have been.
            None => Outcome::Unanswered("the inbox's node named no outcome".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_survives_the_wire_and_a_missing_one_is_unanswered() {
        for outcome in [
            Outcome::Replied(b"pong".to_vec()),
            Outcome::TooLarge(2 << 20),
            Outcome::Rejected("newer tenure".into()),
            Outcome::NotDelivered("no inbox".into()),
            Outcome::Unanswered("closed".into()),
        ] {
            assert_eq!(
                Outcome::from(DeliverResponse::from(outcome.clone())),
                outcome
            );
        }
        assert!(matches!(
            Outcome::from(DeliverResponse { outcome: None }),
            Outcome::Unanswered(_)
        ));
    }
}
