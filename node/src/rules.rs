//! The cluster's rules version (SPEC §4.26): which commands, fields, rules and formats the
//! members have agreed to use.
//!
//! Each release applies the rules of versions [`RELEASE`]`.min` to `.max`. Every peer call
//! and every answer to one carries the sender's range in [`HEADER`] (`min-max`); a member
//! that sends none (a 0.1.0 node) supports exactly version 1. The version in force is part
//! of the replicated state (`State::rules`), raised by an entry of the leader's own
//! (`Op::RaiseRules`) once every member supports the new one (`coord::rules`). Until then
//! the leader refuses what needs it (`rules_not_reached`), snapshots keep the format every
//! member reads, and any member can go back to the release before.
//!
//! Which version introduced what: `tenure_lease::rules`, re-exported here.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::NodeId;
pub use tenure_lease::rules::{not_reached, FIRST, RAISE, RENEW_METADATA};

/// The header of a member's range, on peer calls and their answers.
pub const HEADER: &str = "tenure-rules";

/// The header of the rules version the sender's state runs, on its Raft calls: a receiver
/// whose range stops below it cannot apply what follows and stops before decoding it.
pub const CLUSTER_HEADER: &str = "tenure-rules-cluster";

/// A range of rules versions, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub min: u32,
    pub max: u32,
}

/// The versions this release applies.
pub const RELEASE: Range = Range { min: 1, max: 4 };

impl Range {
    /// A member that sent no range: 0.1.0.
    pub const UNANNOUNCED: Range = Range {
        min: FIRST,
        max: FIRST,
    };

    pub fn contains(&self, version: u32) -> bool {
        (self.min..=self.max).contains(&version)
    }

    /// `min-max` as [`HEADER`] carries it.
    pub fn parse(text: &str) -> Option<Range> {
        let (min, max) = text.split_once('-')?;
        let range = Range {
            min: min.parse().ok()?,
            max: max.parse().ok()?,
        };
        (range.min <= range.max && range.min >= FIRST).then_some(range)
    }

    /// The range a member announces in `value`: none means [`Range::UNANNOUNCED`]; one it
    /// cannot read counts as none too (it cannot be relied on for more).
    pub fn of_header(value: Option<&[u8]>) -> Range {
        value
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(Range::parse)
            .unwrap_or(Range::UNANNOUNCED)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// This node's range: the release's, its top lowered by `--max-rules` (to keep the way back
/// to an older release open, or to act as one in tests).
pub fn own_range(max_rules: u32) -> Range {
    Range {
        min: RELEASE.min,
        max: max_rules.clamp(RELEASE.min, RELEASE.max),
    }
}

/// How long a member's announced range counts: it answers the leader's heartbeats many times
/// a second, so one heard longer ago is of a member that may have been replaced since. At
/// least ten heartbeats ([`heard_for`]).
pub const HEARD_FOR: Duration = Duration::from_secs(3);

/// [`HEARD_FOR`], or ten heartbeats if that is longer.
pub fn heard_for(heartbeat: Duration) -> Duration {
    HEARD_FOR.max(heartbeat * 10)
}

/// The ranges the members last announced to this node, from the answers to its peer calls.
#[derive(Default)]
pub struct Heard(Mutex<HashMap<NodeId, (Range, Instant)>>);

impl Heard {
    pub fn record(&self, member: NodeId, range: Range) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(member, (range, Instant::now()));
    }

    /// `member`'s range, if it announced one within `within`.
    pub fn of(&self, member: NodeId, within: Duration) -> Option<Range> {
        let heard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        heard
            .get(&member)
            .filter(|(_, at)| at.elapsed() < within)
            .map(|(range, _)| *range)
    }

    /// `member` did not answer: what it announced may be of a process that is gone (a
    /// binary being replaced), so it counts for nothing until it answers again.
    pub fn forget(&self, member: NodeId) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&member);
    }
}

/// What the leader may raise the rules to, given `current` and each member's range (None:
/// not heard from lately).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Raise {
    /// Every member supports `to`, above `current`: propose it.
    To(u32),
    /// The cluster runs the highest version every member supports.
    Current,
    /// What keeps the version where it is, member by member (`tenure cluster status`).
    HeldBack(Vec<String>),
}

/// The raise decision. The target is the highest version every member supports; a member
/// not heard from holds any raise back (it may be an older release).
pub fn raise(current: u32, members: &[(NodeId, Option<Range>)]) -> Raise {
    let mut held = Vec::new();
    let mut target = u32::MAX;
    for (id, range) in members {
        match range {
            None => held.push(format!("node {id} has not announced its rules lately")),
            Some(range) => target = target.min(range.max),
        }
    }
    if !held.is_empty() {
        return Raise::HeldBack(held);
    }
    // A member that no longer applies the target (a later release that dropped it) cannot
    // be raised to it either.
    let too_new: Vec<String> = members
        .iter()
        .filter_map(|(id, range)| {
            let range = (*range)?;
            (range.min > target).then(|| format!("node {id} applies rules from {} only", range.min))
        })
        .collect();
    if !too_new.is_empty() {
        return Raise::HeldBack(too_new);
    }
    if target > current && target != u32::MAX {
        return Raise::To(target);
    }
    // Who stops the next version, if this release knows one.
    let next = current + 1;
    let below: Vec<String> = members
        .iter()
        .filter_map(|(id, range)| {
            let range = (*range)?;
            (range.max < next).then(|| format!("node {id} supports rules up to {}", range.max))
        })
        .collect();
    if below.is_empty() || members.iter().all(|(_, r)| r.is_some_and(|r| r.max < next)) {
        // Nobody knows a later version: nothing holds anything back.
        Raise::Current
    } else {
        Raise::HeldBack(below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(min: u32, max: u32) -> Option<Range> {
        Some(Range { min, max })
    }

    #[test]
    fn a_range_reads_as_it_is_written_and_none_is_0_1_0() {
        assert_eq!(Range::parse(&RELEASE.to_string()), Some(RELEASE));
        for bad in ["", "2", "2-1", "0-1", "a-b", "1-2-3"] {
            assert_eq!(Range::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Range::of_header(None), Range::UNANNOUNCED);
        assert_eq!(Range::of_header(Some(b"junk")), Range::UNANNOUNCED);
        assert_eq!(Some(Range::of_header(Some(b"1-2"))), r(1, 2));
        assert_eq!(Some(own_range(1)), r(1, 1));
        assert_eq!(own_range(99), RELEASE);
    }

    #[test]
    fn the_raise_waits_for_every_member() {
        // One member of 0.1.0 (no range): nothing to raise to, and it is named.
        assert_eq!(
            raise(1, &[(1, r(1, 2)), (2, r(1, 2)), (3, r(1, 1))]),
            Raise::HeldBack(vec!["node 3 supports rules up to 1".into()])
        );
        // One not heard from: held back, whatever the others say.
        assert_eq!(
            raise(1, &[(1, r(1, 2)), (2, None), (3, r(1, 2))]),
            Raise::HeldBack(vec!["node 2 has not announced its rules lately".into()])
        );
        assert_eq!(raise(1, &[(1, r(1, 2)), (2, r(1, 2))]), Raise::To(2));
        // The highest all support, not the highest any supports.
        assert_eq!(raise(1, &[(1, r(1, 3)), (2, r(1, 2))]), Raise::To(2));
        assert_eq!(raise(2, &[(1, r(1, 2)), (2, r(1, 2))]), Raise::Current);
        // An old cluster of old members holds nothing back.
        assert_eq!(raise(1, &[(1, r(1, 1)), (2, r(1, 1))]), Raise::Current);
        // Never down.
        assert_eq!(raise(2, &[(1, r(1, 2)), (2, r(1, 1))]), Raise::Current);
        // A member past the target's range holds it back too.
        assert_eq!(
            raise(1, &[(1, r(1, 2)), (2, r(3, 4))]),
            Raise::HeldBack(vec!["node 2 applies rules from 3 only".into()])
        );
    }
}
