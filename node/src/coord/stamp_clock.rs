//! The clocks a node stamps entries with (docs/design.md §4): the system's monotonic clock
//! since boot, so a restarted node's stamps stay comparable, and the wall clock for advisory
//! times.
//!
//! With the `fault-injection` feature, both clocks can be given an offset and a rate (ppm),
//! at start or at run time, so the fault harness can skew a leader without touching the
//! machine's clock. A production build has no way to change them.

use std::time::{SystemTime, UNIX_EPOCH};

use nix::time::{clock_gettime, ClockId};

use crate::lease::Stamp;

fn raw_mono_ms() -> i128 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as i128 * 1_000 + ts.tv_nsec() as i128 / 1_000_000,
        // CLOCK_MONOTONIC cannot fail on Linux; a zero stamp would only count as no time.
        Err(_) => 0,
    }
}

fn raw_wall_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i128)
}

/// A requested change of both clocks (test-only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockSkew {
    /// Step both clocks by this much now (may be negative).
    pub step_ms: i64,
    /// Run both clocks this many parts per million fast (negative: slow) from now on.
    pub rate_ppm: i64,
}

#[derive(Clone, Copy, Debug)]
struct Anchor {
    raw_ms: i128,
    adjusted_ms: i128,
}

#[derive(Debug)]
struct Skewed {
    rate_ppm: i64,
    mono: Anchor,
    wall: Anchor,
}

impl Skewed {
    fn read(&self, anchor: Anchor, raw_ms: i128) -> i128 {
        anchor.adjusted_ms
            + (raw_ms - anchor.raw_ms) * (1_000_000 + self.rate_ppm as i128) / 1_000_000
    }
}

/// The node's clock source.
#[derive(Debug)]
pub struct NodeClock {
    skew: std::sync::Mutex<Skewed>,
    epoch: u64,
}

/// Which run of CLOCK_MONOTONIC this is: the kernel's boot id, so a node restarted on the same
/// boot keeps comparable stamps and a rebooted one re-anchors (docs/design.md §4).
/// Fault-injection builds use a per-process epoch instead: a skew set at run time dies with the
/// process.
fn clock_epoch() -> u64 {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: String = boot
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    let epoch = u64::from_str_radix(&hex, 16).unwrap_or(1);
    #[cfg(feature = "fault-injection")]
    let epoch = epoch ^ ((std::process::id() as u64) << 32) ^ raw_wall_ms() as u64;
    epoch
}

impl Default for NodeClock {
    fn default() -> Self {
        let (mono, wall) = (raw_mono_ms(), raw_wall_ms());
        NodeClock {
            skew: std::sync::Mutex::new(Skewed {
                rate_ppm: 0,
                mono: Anchor {
                    raw_ms: mono,
                    adjusted_ms: mono,
                },
                wall: Anchor {
                    raw_ms: wall,
                    adjusted_ms: wall,
                },
            }),
            epoch: clock_epoch(),
        }
    }
}

impl NodeClock {
    /// Monotonic milliseconds (since boot, as skewed in fault-injection builds).
    pub fn mono_ms(&self) -> u64 {
        let skew = self.skew.lock().unwrap_or_else(|p| p.into_inner());
        skew.read(skew.mono, raw_mono_ms()).max(0) as u64
    }

    /// Wall-clock Unix milliseconds.
    pub fn wall_ms(&self) -> u64 {
        let skew = self.skew.lock().unwrap_or_else(|p| p.into_inner());
        skew.read(skew.wall, raw_wall_ms()).max(0) as u64
    }

    /// The stamp a leader puts on an entry it proposes.
    pub fn stamp(&self) -> Stamp {
        Stamp {
            mono_ms: self.mono_ms(),
            wall_ms: self.wall_ms(),
            clock_epoch: self.epoch,
        }
    }

    /// Steps both clocks and sets their rate (test-only).
    #[cfg(feature = "fault-injection")]
    pub fn apply_skew(&self, change: ClockSkew) {
        let mut skew = self.skew.lock().unwrap_or_else(|p| p.into_inner());
        let (mono, wall) = (raw_mono_ms(), raw_wall_ms());
        let step = change.step_ms as i128;
        skew.mono = Anchor {
            raw_ms: mono,
            adjusted_ms: skew.read(skew.mono, mono) + step,
        };
        skew.wall = Anchor {
            raw_ms: wall,
            adjusted_ms: skew.read(skew.wall, wall) + step,
        };
        skew.rate_ppm = change.rate_ppm;
    }
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    use super::*;

    #[test]
    fn a_step_moves_both_clocks_and_never_counts_twice() {
        let clock = NodeClock::default();
        let (mono, wall) = (clock.mono_ms(), clock.wall_ms());
        clock.apply_skew(ClockSkew {
            step_ms: 3_600_000,
            rate_ppm: 0,
        });
        assert!(clock.mono_ms() >= mono + 3_600_000);
        assert!(clock.wall_ms() >= wall + 3_600_000);
        assert!(clock.mono_ms() < mono + 3_600_000 + 5_000);
    }
}
