//! How long the client waits before trying again: exponential backoff with jitter (backon).
//! Each delay is the schedule's, doubled from the first up to the cap, and stretched by up to
//! itself at random, so that the clients a leader change failed together do not all come
//! back in the same instant.
//!
//! What is retried, and where, is each caller's: only `unavailable` answers and transport
//! failures, with the same `request_id`, before the caller's deadline.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// A unary call's retries on the next endpoint: from 10 ms, at most 200 ms (before jitter).
pub(crate) const CALL: ExponentialBuilder =
    schedule(Duration::from_millis(10), Duration::from_millis(200));

/// The longest delay of [`RECONNECT`], before jitter.
const RECONNECT_CAP: Duration = Duration::from_secs(1);

/// Reopening a broken stream (a watch, an observer) or queueing a campaign again after a
/// failure: from 20 ms, at most 1 s (before jitter).
pub(crate) const RECONNECT: ExponentialBuilder = schedule(Duration::from_millis(20), RECONNECT_CAP);

const fn schedule(first: Duration, cap: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay(cap)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// The delays of a stream that reconnects for as long as it lives, started afresh (by
/// [`Reconnects::reset`]) once it delivers again.
pub(crate) struct Reconnects(ExponentialBackoff);

impl Reconnects {
    pub(crate) fn new() -> Self {
        Reconnects(RECONNECT.build())
    }

    /// Back to the first delay.
    pub(crate) fn reset(&mut self) {
        *self = Reconnects::new();
    }

    /// Sleeps for the next delay.
    pub(crate) async fn wait(&mut self) {
        // The schedule has no limit of attempts; the cap is a fallback that is never taken.
        let delay = self.0.next().unwrap_or(RECONNECT_CAP);
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_the_first_to_the_cap_with_up_to_as_much_again_of_jitter() {
        let floors = [10, 20, 40, 80, 160, 200, 200].map(Duration::from_millis);
        let mut delays = CALL.build();
        for floor in floors {
            let delay = delays.next().expect("no limit of attempts");
            assert!(
                floor <= delay && delay <= floor * 2,
                "{delay:?} outside {floor:?}..={:?}",
                floor * 2
            );
        }
    }
}
