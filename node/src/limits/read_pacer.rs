//! Each principal's reads, paced ([`ReadPacer`]).

use super::*;

/// Each principal's reads on this node, paced to `--read-rate-per-principal` items per
/// second, with a burst of one second's worth (GCRA, `governor`).
pub struct ReadPacer {
    limiter: governor::DefaultKeyedRateLimiter<String>,
    clock: governor::clock::DefaultClock,
    /// Reads that had to wait (`tenure_reads_paced_total`).
    pub paced: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for ReadPacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPacer").finish_non_exhaustive()
    }
}

impl ReadPacer {
    pub fn new(per_second: u32) -> ReadPacer {
        let rate = NonZeroU32::new(per_second.max(MAX_PAGE)).unwrap_or(NonZeroU32::MIN);
        ReadPacer {
            limiter: governor::RateLimiter::keyed(governor::Quota::per_second(rate)),
            clock: governor::clock::DefaultClock::default(),
            paced: Default::default(),
        }
    }

    /// `None` when `principal` may read `items` more now (and they are counted); else how
    /// long to wait before asking again.
    pub(super) fn wait(&self, principal: &str, items: u32) -> Option<Duration> {
        use governor::clock::Clock;
        let items = NonZeroU32::new(items.clamp(1, MAX_PAGE)).unwrap_or(NonZeroU32::MIN);
        match self.limiter.check_key_n(&principal.to_string(), items) {
            Ok(Ok(())) | Err(_) => None,
            Ok(Err(not_until)) => Some(not_until.wait_time_from(self.clock.now())),
        }
    }

    /// Waits until `principal` may read `items` more (at most the burst).
    pub async fn admit(&self, principal: &str, items: u32) {
        let mut waited = false;
        while let Some(wait) = self.wait(principal, items) {
            if !waited {
                self.paced.inc();
                waited = true;
            }
            tokio::time::sleep(wait).await;
        }
    }
}
