//! What a reply or an answer shows that its encoding leaves out, visited in one fixed order
//! ([`Unencoded`]).
//!
//! Replies are encoded in a fixed shape (remembered replies sit in snapshots, and nodes of
//! several releases exchange them), and some of what they show is left out of it because the
//! state names it again: the session of each lease (the session keeps its leases, so a
//! snapshot or a retry names it again) and the reopening time of a `lock_delay` refusal (a
//! retry reads it from the resource). A reply that travels to another node has no state to be
//! made whole from, so these travel beside it, in this order (`network::carried`). Every match
//! here is exhaustive: a new reply or answer that shows such a part does not build until it
//! says where it is.

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};

use super::command::Reply;
use super::many::{ClaimOutcome, ManyOutcome};
use super::query::{Answer, ResourceView, Validation};
use super::session::SessionView;
use super::types::{AcquireOutcome, LeaseView};

/// One part a reply shows and its encoding leaves out, in place.
pub enum Part<'a> {
    /// The session a lease lives on.
    Session(&'a mut Option<NonZeroU64>),
    /// When a resource closed by a lock delay opens again (wall-clock estimate).
    ClosedUntil(&'a mut Option<u64>),
}

/// The value of a [`Part`], as it travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    Session(Option<NonZeroU64>),
    ClosedUntil(Option<u64>),
}

/// A value that shows parts its encoding leaves out.
pub trait Unencoded {
    /// Calls `f` on each part, always in the same order for the same shape of value.
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>));

    /// The value of each part, in [`Unencoded::each_part`]'s order.
    fn parts(&mut self) -> Vec<Value> {
        let mut values = Vec::new();
        self.each_part(&mut |part| {
            values.push(match part {
                Part::Session(session) => Value::Session(*session),
                Part::ClosedUntil(at) => Value::ClosedUntil(*at),
            })
        });
        values
    }

    /// Puts `values` (as [`Unencoded::parts`] gave them) back in place. False, and nothing
    /// changed, when they do not match the parts one to one.
    fn restore(&mut self, values: &[Value]) -> bool {
        let mut kinds = Vec::new();
        self.each_part(&mut |part| kinds.push(matches!(part, Part::Session(_))));
        let matching = kinds.len() == values.len()
            && kinds
                .iter()
                .zip(values)
                .all(|(session, value)| *session == matches!(value, Value::Session(_)));
        if !matching {
            return false;
        }
        let mut next = values.iter();
        self.each_part(&mut |part| match (part, next.next()) {
            (Part::Session(session), Some(Value::Session(value))) => *session = *value,
            (Part::ClosedUntil(at), Some(Value::ClosedUntil(value))) => *at = *value,
            _ => {}
        });
        true
    }
}

impl Unencoded for LeaseView {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        f(Part::Session(&mut self.lease.session))
    }
}

impl<T: Unencoded> Unencoded for Vec<T> {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        for item in self {
            item.each_part(f);
        }
    }
}

impl<T: Unencoded> Unencoded for Option<T> {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        if let Some(item) = self {
            item.each_part(f);
        }
    }
}

impl<T: Unencoded> Unencoded for Box<T> {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        (**self).each_part(f)
    }
}

impl<T: Unencoded, E> Unencoded for Result<T, E> {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        if let Ok(value) = self {
            value.each_part(f);
        }
    }
}

/// An answer and the index it was read at.
impl<T: Unencoded> Unencoded for (T, u64) {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.0.each_part(f)
    }
}

impl Unencoded for AcquireOutcome {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.lease.each_part(f);
        self.holders.each_part(f);
        f(Part::ClosedUntil(&mut self.closed_until_wall_ms));
    }
}

impl Unencoded for ClaimOutcome {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.holders.each_part(f);
        f(Part::ClosedUntil(&mut self.closed_until_wall_ms));
    }
}

impl Unencoded for ManyOutcome {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.leases.each_part(f);
        self.claims.each_part(f);
    }
}

impl Unencoded for ResourceView {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.leases.each_part(f)
    }
}

impl Unencoded for SessionView {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.leases.each_part(f)
    }
}

impl Unencoded for Validation {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        self.lease.each_part(f)
    }
}

impl Unencoded for Reply {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        match self {
            Reply::Acquire(outcome) => outcome.each_part(f),
            Reply::Lease(view) => view.each_part(f),
            Reply::Resource(view) => view.each_part(f),
            Reply::Reclaimed(views) => views.each_part(f),
            Reply::Batch(replies) => replies.each_part(f),
            Reply::Session(view) => view.each_part(f),
            Reply::Many(outcome) => outcome.each_part(f),
            Reply::Rejected(_)
            | Reply::Cancelled { .. }
            | Reply::Booking(_)
            | Reply::None
            | Reply::Quota(_) => {}
        }
    }
}

impl Unencoded for Answer {
    fn each_part(&mut self, f: &mut dyn FnMut(Part<'_>)) {
        match self {
            Answer::Resource(view) => view.each_part(f),
            Answer::Resources { resources, .. } => resources.each_part(f),
            Answer::Leases { leases, .. } => leases.each_part(f),
            Answer::Validate(validation) => validation.each_part(f),
            Answer::Session(view) => view.each_part(f),
            Answer::Sessions { sessions, .. } => sessions.each_part(f),
            Answer::History { .. } | Answer::Rejected(_) => {}
        }
    }
}
