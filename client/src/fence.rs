//! The downstream half of fencing (SPEC §1 "fencing token"): a protected system keeps the
//! highest token it has seen from an exclusive writer and from a shared one, refuses a write
//! whose token is below the exclusive one, and an exclusive write below either, so a holder
//! that paused past its lease cannot overwrite the work of the holders after it.
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
//! `Fence` keeps its high-water mark in this process; for data that other processes write
//! too, keep it where the data is: crate `tenure-guard` does that in a PostgreSQL transaction
//! (docs/fencing.md).

use std::sync::atomic::{AtomicU64, Ordering};

/// The highest fencing tokens seen; safe to share between threads.
#[derive(Debug, Default)]
pub struct Fence {
    /// From exclusive writers.
    exclusive: AtomicU64,
    /// From shared-mode writers.
    shared: AtomicU64,
}

/// A write refused because a later tenure has already written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token (highest seen {highest}, got {got})")]
pub struct Stale {
    /// The token that fenced the write out.
    pub highest: u64,
    /// The token of the refused write.
    pub got: u64,
}

impl Fence {
    /// A fence that has seen no token yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An exclusive writer's check: accepts `token` if no higher one was seen from any writer,
    /// and records it.
    pub fn check_and_record(&self, token: u64) -> Result<(), Stale> {
        let shared = self.shared.load(Ordering::Acquire);
        if token < shared {
            return Err(Stale {
                highest: shared,
                got: token,
            });
        }
        let highest = self.exclusive.fetch_max(token, Ordering::AcqRel);
        if token < highest {
            return Err(Stale {
                highest,
                got: token,
            });
        }
        Ok(())
    }

    /// A shared-mode writer's check: refuses a token below the highest exclusive one. Co-holders'
    /// tokens are not ordered against each other, so none refuses another; the highest is
    /// recorded for the exclusive writers after them, whose tokens are all higher.
    pub fn check(&self, token: u64) -> Result<(), Stale> {
        let highest = self.exclusive.load(Ordering::Acquire);
        if token < highest {
            return Err(Stale {
                highest,
                got: token,
            });
        }
        self.shared.fetch_max(token, Ordering::AcqRel);
        Ok(())
    }

    /// The highest token recorded so far from any writer (0 before any): the lowest an
    /// exclusive writer still passes with.
    pub fn highest(&self) -> u64 {
        let exclusive = self.exclusive.load(Ordering::Acquire);
        exclusive.max(self.shared.load(Ordering::Acquire))
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
    fn shared_writers_do_not_refuse_each_other_but_fence_out_an_older_exclusive_one() {
        let fence = Fence::new();
        assert_eq!(fence.check_and_record(10), Ok(()));
        // Co-holders admitted after the exclusive tenure ended, in any order.
        assert_eq!(fence.check(12), Ok(()));
        assert_eq!(fence.check(11), Ok(()));
        assert_eq!(fence.highest(), 12);
        // The exclusive holder of 10 wakes after them: refused by the shared tokens.
        assert_eq!(
            fence.check_and_record(10),
            Err(Stale {
                highest: 12,
                got: 10
            })
        );
        assert_eq!(fence.check_and_record(13), Ok(()));
        assert_eq!(
            fence.check(12),
            Err(Stale {
                highest: 13,
                got: 12
            })
        );
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
