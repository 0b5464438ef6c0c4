//! The moves a frame of the search can try, in order: required ops, unknown ops, then expiry
//! moves (see the module doc).

use super::{Ctx, Frame, Move};
use crate::checker::model::{step, HolderId, State};

impl Ctx<'_> {
    /// The next (move, resulting state) this frame can try, advancing its cursor: required
    /// ops, then unknown ops, then expiry moves.
    pub(super) fn next_candidate(&self, frame: &mut Frame, lin: &[bool]) -> Option<(Move, State)> {
        loop {
            let list = match frame.pass {
                0 => &self.req,
                1 => &self.unk,
                _ => return self.next_expiry(frame),
            };
            let i = match list.get(frame.cursor) {
                // Sorted by invocation: once one is invoked too late, so are the rest.
                Some(&i) if self.ops[i].invoke <= frame.min_return => i,
                _ => {
                    frame.pass += 1;
                    frame.cursor = 0;
                    continue;
                }
            };
            frame.cursor += 1;
            if lin[i] || (frame.pass == 1 && self.has_twin_before(i, lin, frame.min_return)) {
                continue;
            }
            if let Some(next) = step(&self.rules, &frame.state, &self.ops[i].op) {
                // The rules never let the leases exceed the policy (pool, exclusive alone).
                debug_assert!(next.within(&self.rules), "{next:?} breaks {:?}", self.rules);
                return Some((Move::Op(i), next));
            }
        }
    }

    /// The expiry moves open to this frame: in holder order after the one that made the frame,
    /// and never the reclaim of a lease an unknown op has just created (not applying that op
    /// leaves a state at least as permissive).
    fn expiries(&self, frame: &Frame) -> Vec<(HolderId, State)> {
        let after = match frame.via {
            Some(Move::Expire(holder)) => Some(holder),
            _ => None,
        };
        let fresh = match frame.via {
            Some(Move::Op(v)) if !self.ops[v].required => self.ops[v].op.creates(),
            _ => None,
        };
        frame
            .state
            .expiries(&self.rules, frame.min_return)
            .into_iter()
            .filter_map(|(index, reclaimed, next)| {
                let holder = frame.state.leases()[index].holder;
                let skip =
                    after.is_some_and(|h| holder <= h) || (reclaimed && fresh == Some(holder));
                (!skip).then_some((holder, next))
            })
            .collect()
    }

    /// The next expiry move of this frame, on its own.
    fn next_expiry(&self, frame: &mut Frame) -> Option<(Move, State)> {
        let moves = self.expiries(frame);
        let (holder, next) = *moves.get(frame.cursor)?;
        frame.cursor += 1;
        Some((Move::Expire(holder), next))
    }
}
