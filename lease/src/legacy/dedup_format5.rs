//! A remembered reply as releases before sessions encoded it: the same, except that a
//! `SetQuota` reply listed nine quotas (there are ten since `sessions`). Read when the current
//! form does not decode, so a `SetQuota` retried across the upgrade still gets its answer.

use serde::Deserialize;

use super::Kept;
use crate::bookings::Booking;
use crate::command::Reply;
use crate::query::ResourceView;
use crate::quota::QuotaViewV5;
use crate::types::{AcquireOutcome, LeaseView, Rejection};

/// [`Kept`] of before sessions.
#[derive(Deserialize)]
#[allow(clippy::large_enum_variant)] // short-lived, as `Kept` is
pub(super) enum KeptV5 {
    Reply(ReplyV5),
    Resource(String),
}

/// [`Reply`] of before sessions: every variant in its place, `Quota` with nine quotas.
#[derive(Deserialize)]
#[allow(clippy::large_enum_variant)] // as `Reply`
pub(super) enum ReplyV5 {
    Acquire(AcquireOutcome),
    Lease(LeaseView),
    Resource(Box<ResourceView>),
    Rejected(Rejection),
    Cancelled { cancelled: bool, revision: u64 },
    Booking(Booking),
    Reclaimed(Vec<LeaseView>),
    None,
    Batch(Vec<ReplyV5>),
    Quota(Box<QuotaViewV5>),
}

impl From<ReplyV5> for Reply {
    fn from(old: ReplyV5) -> Reply {
        match old {
            ReplyV5::Acquire(outcome) => Reply::Acquire(outcome),
            ReplyV5::Lease(view) => Reply::Lease(view),
            ReplyV5::Resource(view) => Reply::Resource(view),
            ReplyV5::Rejected(rejection) => Reply::Rejected(rejection),
            ReplyV5::Cancelled {
                cancelled,
                revision,
            } => Reply::Cancelled {
                cancelled,
                revision,
            },
            ReplyV5::Booking(booking) => Reply::Booking(booking),
            ReplyV5::Reclaimed(views) => Reply::Reclaimed(views),
            ReplyV5::None => Reply::None,
            ReplyV5::Batch(replies) => Reply::Batch(replies.into_iter().map(Reply::from).collect()),
            ReplyV5::Quota(view) => Reply::Quota(Box::new((*view).into())),
        }
    }
}

impl From<KeptV5> for Kept {
    fn from(old: KeptV5) -> Kept {
        match old {
            KeptV5::Reply(reply) => Kept::Reply(reply.into()),
            KeptV5::Resource(name) => Kept::Resource(name),
        }
    }
}
