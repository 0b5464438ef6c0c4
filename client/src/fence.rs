//! The downstream half of fencing (SPEC §1 "fencing token"): a protected system keeps the
//! highest token it has seen from an exclusive writer and refuses any write with a lower one,
//! so a holder that paused past its lease cannot overwrite the work of the holder after it.
//!
//! ```
//! let fence = tenure_client::Fence::new();
//! assert!(fence.check_and_record(7).is_ok());
//! assert!(fence.check_and_record(7).is_ok()); // the same tenure writes again
//! assert!(fence.check_and_record(9).is_ok()); // a later tenure
//! let stale = fence.check_and_record(7).unwrap_err();
//! assert_eq!((stale.highest, stale.got), (9, 7));
//! ```
//!
//! The check and the write must be one step: call it under the lock (or in the transaction)
//! that makes the write, or a stale writer can pass the check just before a newer one.

use std::sync::atomic::{AtomicU64, Ordering};

/// The highest fencing token seen; safe to share between threads.
#[derive(Debug, Default)]
pub struct Fence {
    highest: AtomicU64,
}

/// A write refused because a later tenure has already written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token (highest seen {highest}, got {got})")]
pub struct Stale {
    /// The highest token the fence has seen.
    pub highest: u64,
    /// The token of the refused write.
    pub got: u64,
}

impl Fence {
    /// A fence that has seen no token yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An exclusive writer's check: accepts `token` if no higher one was seen, and records it.
    pub fn check_and_record(&self, token: u64) -> Result<(), Stale> {
        let highest = self.highest.fetch_max(token, Ordering::AcqRel);
        if token < highest {
            return Err(Stale {
                highest,
                got: token,
            });
        }
        Ok(())
    }

    /// A shared-mode writer's check: refuses a token below the highest, records nothing
    /// (co-holders' tokens are not ordered against each other).
    pub fn check(&self, token: u64) -> Result<(), Stale> {
        let highest = self.highest();
        if token < highest {
            return Err(Stale {
                highest,
                got: token,
            });
        }
        Ok(())
    }

    /// The highest token recorded so far (0 before any).
    pub fn highest(&self) -> u64 {
        self.highest.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lower_token_is_refused_after_a_higher_one_and_changes_nothing() {
        let fence = Fence::new();
        assert_eq!(fence.check_and_record(5), Ok(()));
        assert_eq!(fence.check_and_record(8), Ok(()));
        assert_eq!(fence.check_and_record(5), Err(Stale { highest: 8, got: 5 }));
        assert_eq!(fence.highest(), 8);
        assert_eq!(fence.check(8), Ok(()));
        assert_eq!(fence.check(6), Err(Stale { highest: 8, got: 6 }));
    }

    #[test]
    fn concurrent_writers_end_at_the_highest_token_and_each_refusal_names_a_higher_one() {
        let fence = Arc::new(Fence::new());
        let threads: Vec<_> = (1..=8u64)
            .map(|t| {
                let fence = fence.clone();
                std::thread::spawn(move || {
                    (0..1000u64)
                        .map(|i| i * 8 + t)
                        .filter_map(|token| fence.check_and_record(token).err())
                        .all(|stale| stale.highest > stale.got)
                })
            })
            .collect();
        for thread in threads {
            assert!(thread.join().expect("thread"));
        }
        assert_eq!(fence.highest(), 999 * 8 + 8);
    }
}
