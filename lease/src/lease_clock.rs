//! The lease clock: time as the log tells it (docs/design.md §4).
//!
//! Each entry carries its leader's monotonic stamp. Under one leader, `lease_now` advances by
//! the stamp difference (never backwards, no interval counted twice); across a change of
//! leader it advances by zero and re-anchors on the new leader's clock. So a leader whose
//! clock is ahead, a wall-clock step, or a reboot can only make leases last longer.

use serde::{Deserialize, Serialize};

use super::command::Stamp;

/// Who wrote an entry: openraft's committed leader id (term and node id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderKey {
    pub term: u64,
    pub node_id: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseClock {
    /// Committed lease time in milliseconds: the only "now" any rule looks at.
    now_ms: u64,
    /// The leader (and its clock's epoch) whose monotonic clock anchors `now_ms`, and its
    /// newest stamp seen.
    anchor: Option<(LeaderKey, u64, u64)>,
    /// The wall clock of the newest stamp, for advisory `expires_at` in replies.
    wall_ms: u64,
}

impl LeaseClock {
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }

    /// The leader, its clock epoch and its newest monotonic stamp, so the leader can estimate
    /// the clock ahead of the log (timers only; rules never use estimates).
    pub fn anchor(&self) -> Option<(LeaderKey, u64, u64)> {
        self.anchor
    }

    /// Advances the clock by the stamp of an entry written by `leader`. A new leader, or the
    /// same leader on another run of its clock (a reboot), re-anchors without advancing.
    pub fn observe(&mut self, leader: LeaderKey, stamp: &Stamp) {
        match &mut self.anchor {
            Some((anchored, epoch, last_mono_ms))
                if *anchored == leader && *epoch == stamp.clock_epoch =>
            {
                if stamp.mono_ms > *last_mono_ms {
                    self.now_ms = self.now_ms.saturating_add(stamp.mono_ms - *last_mono_ms);
                    *last_mono_ms = stamp.mono_ms;
                }
            }
            _ => self.anchor = Some((leader, stamp.clock_epoch, stamp.mono_ms)),
        }
        self.wall_ms = stamp.wall_ms;
    }

    /// Wall-clock estimate of a lease-clock instant: advisory, deterministic on every node.
    pub fn wall_of(&self, lease_ms: u64) -> u64 {
        if lease_ms >= self.now_ms {
            self.wall_ms.saturating_add(lease_ms - self.now_ms)
        } else {
            self.wall_ms.saturating_sub(self.now_ms - lease_ms)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: LeaderKey = LeaderKey {
        term: 1,
        node_id: 1,
    };
    const B: LeaderKey = LeaderKey {
        term: 2,
        node_id: 2,
    };

    fn stamp(mono_ms: u64) -> Stamp {
        Stamp {
            clock_epoch: 0,
            mono_ms,
            wall_ms: 1_000_000 + mono_ms,
        }
    }

    #[test]
    fn same_leader_advances_by_stamp_difference() {
        let mut clock = LeaseClock::default();
        clock.observe(A, &stamp(100));
        assert_eq!(clock.now_ms(), 0);
        clock.observe(A, &stamp(350));
        assert_eq!(clock.now_ms(), 250);
    }

    #[test]
    fn out_of_order_stamps_count_no_interval_twice() {
        let mut clock = LeaseClock::default();
        clock.observe(A, &stamp(100));
        clock.observe(A, &stamp(300));
        clock.observe(A, &stamp(200));
        assert_eq!(clock.now_ms(), 200);
        clock.observe(A, &stamp(400));
        assert_eq!(clock.now_ms(), 300);
    }

    #[test]
    fn leader_change_advances_by_zero_even_when_new_clock_is_hours_ahead() {
        let mut clock = LeaseClock::default();
        clock.observe(A, &stamp(1_000));
        clock.observe(A, &stamp(2_000));
        clock.observe(B, &stamp(3_600_000 + 5_000));
        assert_eq!(clock.now_ms(), 1_000);
        clock.observe(B, &stamp(3_600_000 + 5_500));
        assert_eq!(clock.now_ms(), 1_500);
    }

    #[test]
    fn a_reboot_of_the_same_leader_re_anchors_instead_of_freezing() {
        let mut clock = LeaseClock::default();
        clock.observe(A, &stamp(50_000_000));
        clock.observe(A, &stamp(50_001_000));
        let rebooted = |mono_ms| Stamp {
            clock_epoch: 2,
            ..stamp(mono_ms)
        };
        clock.observe(A, &rebooted(3_000));
        assert_eq!(clock.now_ms(), 1_000);
        clock.observe(A, &rebooted(3_500));
        assert_eq!(
            clock.now_ms(),
            1_500,
            "time runs again at once after the reboot"
        );
    }

    #[test]
    fn a_clock_going_backwards_counts_as_zero() {
        let mut clock = LeaseClock::default();
        clock.observe(A, &stamp(10_000));
        clock.observe(A, &stamp(5));
        assert_eq!(clock.now_ms(), 0);
    }
}
