//! Coalesced ReadIndex rounds: concurrent linearizable reads on the leader share one quorum
//! round instead of paying one each.
//!
//! The rule that keeps this linearizable: a read may only be answered by a round that *started
//! after the read arrived*. A round that was already in flight may have taken its read index
//! before a write that committed before the read arrived, so it could miss that write.
//!
//! So a read registers in the "next" batch. If no driver is running, it starts one. The driver
//! takes the whole batch, starts one round, hands that round's result (success or error, cloned)
//! to every member of the batch, and repeats while reads queued up meanwhile. A read that
//! arrives while a round is in flight lands in the next batch, whose round starts only after the
//! current one ends, so it never sees a round that began before it arrived.
//!
//! The barrier is generic over the round so tests can drive rounds by hand; in the node the round
//! is `Raft::ensure_linearizable` (see `coord::forward::read_barrier`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

type RoundFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type RoundFn<T> = dyn Fn() -> RoundFuture<T> + Send + Sync;

/// The barrier's driver stopped before this read's round finished (the runtime is shutting down,
/// or a round panicked). The read was not confirmed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the read barrier stopped before the read's quorum round finished")]
pub struct BarrierStopped;

/// Shares each round among all the reads that arrived before it started. One per node.
pub struct ReadBarrier<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    round: Box<RoundFn<T>>,
    state: Mutex<State<T>>,
}

struct State<T> {
    /// The reads waiting for the next round to start.
    next: Vec<oneshot::Sender<T>>,
    /// A driver task is running (a round may be in flight).
    driving: bool,
}

impl<T> Inner<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while holding the lock; if something did, the state is still a
        // consistent queue and flag.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Clone + Send + 'static> ReadBarrier<T> {
    /// A barrier whose rounds are `round()`. A round starts when its future is first polled.
    pub fn new<F, Fut>(round: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let round: Box<RoundFn<T>> = Box::new(move || Box::pin(round()));
        ReadBarrier {
            inner: Arc::new(Inner {
                round,
                state: Mutex::new(State {
                    next: Vec::new(),
                    driving: false,
                }),
            }),
        }
    }

    /// Registers a read now (at the call, not at the first poll) and returns the result of the
    /// first round that starts after this call. Dropping the returned future abandons the read
    /// without affecting anyone else's.
    pub fn read(&self) -> impl Future<Output = Result<T, BarrierStopped>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self.inner.state();
            state.next.push(tx);
            !std::mem::replace(&mut state.driving, true)
        };
        if start {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(drive(self.inner.clone()));
                }
                Err(_) => {
                    // No runtime to run rounds on: fail the queued reads instead of hanging.
                    let mut state = self.inner.state();
                    state.driving = false;
                    state.next.clear();
                }
            }
        }
        async move { rx.await.map_err(|_| BarrierStopped) }
    }
}

/// Runs rounds while reads are queued; each round serves exactly the reads queued before it
/// started.
async fn drive<T: Clone>(inner: Arc<Inner<T>>) {
    let mut guard = DriverGuard {
        inner: &inner,
        finished: false,
    };
    loop {
        let batch = {
            let mut state = inner.state();
            // Readers that went away need no round.
            state.next.retain(|reader| !reader.is_closed());
            if state.next.is_empty() {
                state.driving = false;
                guard.finished = true;
                return;
            }
            std::mem::take(&mut state.next)
        };
        // The round starts here, after every member of `batch` registered.
        let result = (inner.round)().await;
        for reader in batch {
            // A reader whose caller was dropped just misses its answer.
            let _ = reader.send(result.clone());
        }
    }
}

/// If the driver ends abnormally (its task is dropped at runtime shutdown, or a round panics),
/// lets the next read start a new driver and fails the queued reads rather than leave them
/// waiting forever. The in-flight batch fails by itself: its senders are dropped with the task.
struct DriverGuard<'a, T> {
    inner: &'a Inner<T>,
    finished: bool,
}

impl<T> Drop for DriverGuard<'_, T> {
    fn drop(&mut self) {
        if !self.finished {
            let mut state = self.inner.state();
            state.driving = false;
            state.next.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use futures::FutureExt;
    use tokio::sync::mpsc;

    use super::*;

    type Answer = Result<u32, String>;

    /// A round the test controls: its number (1, 2, …) and how to finish it.
    struct Round {
        number: u32,
        finish: oneshot::Sender<Answer>,
    }

    /// A barrier whose rounds announce themselves on the returned channel when they start and
    /// then wait for the test to finish them.
    fn manual() -> (ReadBarrier<Answer>, mpsc::UnboundedReceiver<Round>) {
        let (started, rounds) = mpsc::unbounded_channel();
        let count = Arc::new(AtomicU32::new(0));
        let barrier = ReadBarrier::new(move || {
            let started = started.clone();
            let count = count.clone();
            async move {
                let number = count.fetch_add(1, Ordering::SeqCst) + 1;
                let (finish, finished) = oneshot::channel();
                started
                    .send(Round { number, finish })
                    .map_err(|_| "test gone".to_string())?;
                finished.await.map_err(|_| "round abandoned".to_string())?
            }
        });
        (barrier, rounds)
    }

    async fn next_round(rounds: &mut mpsc::UnboundedReceiver<Round>) -> Round {
        rounds.recv().await.expect("the barrier started a round")
    }

    /// Answers every further round with `answer(its number)`. Tests hand the rest of their
    /// rounds to this so that a barrier that runs more rounds than it should produces wrong
    /// answers rather than a hang.
    fn answer_rest(
        mut rounds: mpsc::UnboundedReceiver<Round>,
        answer: impl Fn(u32) -> Answer + Send + 'static,
    ) {
        tokio::spawn(async move {
            while let Some(round) = rounds.recv().await {
                let _ = round.finish.send(answer(round.number));
            }
        });
    }

    #[tokio::test]
    async fn a_read_arriving_mid_round_waits_for_the_next_round() {
        let (barrier, mut rounds) = manual();
        let first = barrier.read();
        let round1 = next_round(&mut rounds).await;
        assert_eq!(round1.number, 1);

        // Round 1 is in flight: this read must not be answered by it.
        let mut late = Box::pin(barrier.read());
        round1.finish.send(Ok(1)).expect("round 1 waits");
        assert_eq!(first.await, Ok(Ok(1)));

        // `late` can only complete before round 2 starts if round 1 answered it.
        let round2 = tokio::select! {
            biased;
            answer = late.as_mut() => {
                panic!("answered by the round in flight when the read arrived: {answer:?}")
            }
            round = next_round(&mut rounds) => round,
        };
        assert_eq!(round2.number, 2);
        assert_eq!(
            late.as_mut().now_or_never(),
            None,
            "answered before its round ended"
        );
        round2.finish.send(Ok(2)).expect("round 2 waits");
        assert_eq!(late.await, Ok(Ok(2)));
    }

    #[tokio::test]
    async fn reads_arriving_together_share_one_round() {
        let (barrier, mut rounds) = manual();
        let first = barrier.read();
        let round1 = next_round(&mut rounds).await;

        let batch: Vec<_> = (0..16).map(|_| barrier.read()).collect();
        round1.finish.send(Ok(1)).expect("round 1 waits");
        assert_eq!(first.await, Ok(Ok(1)));

        // Every later round answers with its own number: a batch split over several rounds
        // would see different numbers.
        answer_rest(rounds, Ok);
        for read in batch {
            assert_eq!(read.await, Ok(Ok(2)));
        }
        // The batch cost exactly one round: the next read gets round 3.
        assert_eq!(barrier.read().await, Ok(Ok(3)));
    }

    #[tokio::test]
    async fn a_round_error_reaches_every_reader_of_its_batch() {
        let (barrier, mut rounds) = manual();
        let first = barrier.read();
        let round1 = next_round(&mut rounds).await;
        let batch: Vec<_> = (0..8).map(|_| barrier.read()).collect();
        round1.finish.send(Ok(1)).expect("round 1 waits");
        assert_eq!(first.await, Ok(Ok(1)));

        answer_rest(rounds, |number| match number {
            2 => Err("quorum not enough".into()),
            _ => Ok(number),
        });
        for read in batch {
            assert_eq!(read.await, Ok(Err("quorum not enough".to_string())));
        }
        // The error does not stick: the next round serves normally.
        assert_eq!(barrier.read().await, Ok(Ok(3)));
    }

    #[tokio::test]
    async fn a_dropped_reader_does_not_stop_the_others() {
        let (barrier, mut rounds) = manual();
        // Dropped while its own round is in flight.
        let gone_in_flight = barrier.read();
        let round1 = next_round(&mut rounds).await;
        drop(gone_in_flight);

        // Dropped while queued for the next round, between two readers that stay.
        let stays_a = barrier.read();
        let gone_queued = barrier.read();
        let stays_b = barrier.read();
        drop(gone_queued);

        round1.finish.send(Ok(1)).expect("round 1 waits");
        answer_rest(rounds, Ok);
        assert_eq!(stays_a.await, Ok(Ok(2)));
        assert_eq!(stays_b.await, Ok(Ok(2)));
    }

    #[tokio::test]
    async fn a_batch_whose_readers_all_left_costs_no_round() {
        let (barrier, mut rounds) = manual();
        let first = barrier.read();
        let round1 = next_round(&mut rounds).await;
        drop(barrier.read());
        round1.finish.send(Ok(1)).expect("round 1 waits");
        assert_eq!(first.await, Ok(Ok(1)));

        answer_rest(rounds, Ok);
        assert_eq!(barrier.read().await, Ok(Ok(2)));
    }

    #[tokio::test]
    async fn a_driver_that_dies_fails_its_reads_and_a_new_one_takes_over() {
        // The round panics: its reader gets BarrierStopped, and the next read still works.
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let barrier = ReadBarrier::new(move || {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if call == 0 {
                    panic!("round failed");
                }
                call
            }
        });
        assert_eq!(barrier.read().await, Err(BarrierStopped));
        assert_eq!(barrier.read().await, Ok(1));
    }

    /// Many readers on several threads: each is answered by a round that started after it
    /// registered (a necessary condition of the rule, checked without any timing).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_readers_are_answered_by_rounds_started_after_them() {
        let started = Arc::new(AtomicU32::new(0));
        let counter = started.clone();
        let barrier = Arc::new(ReadBarrier::new(move || {
            let counter = counter.clone();
            async move {
                let number = counter.fetch_add(1, Ordering::SeqCst) + 1;
                // Let readers arrive while the round is in flight.
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
                number
            }
        }));
        let readers: Vec<_> = (0..64)
            .map(|_| {
                let barrier = barrier.clone();
                let started = started.clone();
                tokio::spawn(async move {
                    let mut answered = Vec::new();
                    for _ in 0..20 {
                        let before = started.load(Ordering::SeqCst);
                        let round = barrier.read().await.expect("the driver runs");
                        assert!(round > before, "round {round} started before the read");
                        answered.push(round);
                    }
                    answered
                })
            })
            .collect();
        let mut reads = 0;
        for reader in readers {
            reads += reader.await.expect("reader ran").len();
        }
        let rounds = started.load(Ordering::SeqCst) as usize;
        assert!(rounds <= reads, "{rounds} rounds for {reads} reads");
    }
}
