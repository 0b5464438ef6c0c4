//! Replies a leader hands back to a follower, with what their encoding leaves out.
//!
//! A lease is encoded without its session, and a `lock_delay` refusal without the time the
//! resource opens again (`lease::unencoded`: the state names both again), so a follower that
//! decoded a forwarded reply as it is showed every lease on a session with an empty
//! `session_id`. The leader now sends such a reply as a [`Carried`]: the reply, then the value
//! of each part its encoding leaves out, in [`Unencoded`]'s order.
//!
//! Which a reply is goes by headers, so that nodes of this release and of earlier ones
//! understand each other: a node asks for carried replies on every call it makes
//! ([`CARRIES_HEADER`]), a leader answers with one only to a node that asked, and says so on
//! the response. An earlier follower gets the plain reply it expects; from an earlier leader
//! a follower gets a plain one and shows what it has.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tonic::metadata::MetadataMap;

use crate::lease::unencoded::{Unencoded, Value};

/// On a call: the caller reads carried replies. On a reply: this reply is carried.
pub const CARRIES_HEADER: &str = "tenure-carries";
/// The value of [`CARRIES_HEADER`]: the first shape of [`Carried`].
pub const PARTS: &str = "parts-1";

/// A reply and the parts its encoding leaves out.
#[derive(Serialize, Deserialize)]
pub struct Carried<T> {
    pub reply: T,
    pub parts: Vec<Value>,
}

/// Whether a call's (or a reply's) `metadata` says it carries parts.
pub fn carries(metadata: &MetadataMap) -> bool {
    metadata
        .get(CARRIES_HEADER)
        .is_some_and(|value| value.as_encoded_bytes() == PARTS.as_bytes())
}

impl<T: Unencoded + Serialize> Carried<T> {
    pub fn of(mut reply: T) -> Self {
        let parts = reply.parts();
        Carried { reply, parts }
    }
}

impl<T: Unencoded + DeserializeOwned> Carried<T> {
    /// The reply made whole again; an error if the parts do not match its shape.
    pub fn into_reply(self) -> Result<T, String> {
        let Carried { mut reply, parts } = self;
        match reply.restore(&parts) {
            true => Ok(reply),
            false => Err(format!(
                "a carried reply has {} parts that do not fit its shape",
                parts.len()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::testkit;
    use crate::lease::types::{LeaseView, Mode};
    use crate::lease::{AcquireOutcome, Reply};
    use crate::store::codec;
    use std::num::NonZeroU64;

    fn view(holder: &str, session: Option<u64>) -> LeaseView {
        let mut view = testkit::view_of(holder, Mode::Read);
        view.lease.session = session.and_then(NonZeroU64::new);
        view
    }

    /// A refused acquire whose holders live on sessions, refused for a lock delay, in a batch
    /// beside a grant on a session.
    fn reply() -> Reply {
        let refused = AcquireOutcome {
            granted: false,
            lease: None,
            refusal: Some(crate::lease::Refusal::LockDelay),
            holders: vec![view("a", Some(5)), view("b", None), view("c", Some(9))],
            queue_position: 0,
            wait_id: None,
            closed_until_wall_ms: Some(1_700_000_000_000),
        };
        Reply::Batch(vec![
            Reply::Acquire(refused),
            Reply::Acquire(AcquireOutcome::granted(view("d", Some(11)))),
        ])
    }

    #[test]
    fn a_carried_reply_keeps_what_its_encoding_leaves_out() {
        let sent = reply();
        let plain: (Reply, _) =
            codec::from_bytes(&codec::to_bytes(&sent).expect("encode")).expect("decode");
        assert_ne!(plain.0, sent, "the plain encoding loses the sessions");
        let carried: (Carried<Reply>, _) =
            codec::from_bytes(&codec::to_bytes(&Carried::of(sent.clone())).expect("encode"))
                .expect("decode");
        let received = carried.0.into_reply().expect("the parts fit");
        assert_eq!(received, sent);
        let Reply::Batch(replies) = &received else {
            panic!("a batch");
        };
        let Reply::Acquire(refused) = &replies[0] else {
            panic!("an acquire");
        };
        assert_eq!(refused.closed_until_wall_ms, Some(1_700_000_000_000));
    }

    #[test]
    fn parts_that_do_not_fit_the_reply_are_refused() {
        let mut carried = Carried::of(reply());
        carried.parts.pop();
        assert!(carried.into_reply().is_err());
        let mut carried = Carried::of(reply());
        carried.parts.swap(0, 3);
        assert!(
            carried.into_reply().is_err(),
            "a session where a time belongs"
        );
    }
}
