//! The applied state's lock, waited for without stalling the async runtime.
//!
//! Apply holds the write lock for a batch of entries, longer when the batch finds the state
//! just copied for a snapshot and copies the buckets and resources it changes. A runtime
//! worker blocked on the lock meanwhile would also hold up the tasks queued on it — Raft's
//! heartbeats among them, and followers would then elect a new leader for nothing.
//!
//! A task that reads on every call (a leader's check of each write before it is proposed, a
//! linearizable read) waits with [`Guarded::read_parked`]: it is parked until apply lets go,
//! and its worker runs other tasks meanwhile. Other readers ([`Guarded::read`]) are rare and
//! hand their worker's tasks to another thread (`block_in_place`) once a short spin has not
//! found the lock free. That hand-off is what the parked wait avoids on the hot path: under a
//! leader's full load it moved the runtime's work onto a new thread many times a second, and
//! each thread that served a while kept pages of its own in the allocator (a leader at a
//! million leases held tens of MiB more than its followers).

use std::sync::{LockResult, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

use tokio::sync::Notify;

/// Yields before a blocked lock wait leaves the runtime (see [`lock_without_stalling`]).
const SPINS_BEFORE_BLOCKING: usize = 50;

/// A value behind a read-write lock whose writers tell parked readers when they let go.
pub(super) struct Guarded<T> {
    lock: RwLock<T>,
    released: Notify,
}

/// Write access; letting go wakes the readers parked meanwhile.
pub(super) struct WriteGuard<'a, T> {
    guard: Option<RwLockWriteGuard<'a, T>>,
    released: &'a Notify,
}

impl<T> Guarded<T> {
    pub(super) fn new(value: T) -> Guarded<T> {
        Guarded {
            lock: RwLock::new(value),
            released: Notify::new(),
        }
    }

    /// Read access from code that cannot await (see the module's documentation).
    pub(super) fn read(&self) -> RwLockReadGuard<'_, T> {
        lock_without_stalling(|| self.lock.try_read(), || self.lock.read())
    }

    /// Read access, the task parked while a writer holds the lock.
    pub(super) async fn read_parked(&self) -> RwLockReadGuard<'_, T> {
        // Mostly free: taken without registering (which locks the `Notify`'s list twice).
        if let Some(guard) = self.try_read() {
            return guard;
        }
        loop {
            // Registered before the attempt: a writer that lets go after a failed attempt
            // wakes this wait.
            let released = self.released.notified();
            let mut released = std::pin::pin!(released);
            released.as_mut().enable();
            if let Some(guard) = self.try_read() {
                return guard;
            }
            released.await;
        }
    }

    fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        match self.lock.try_read() {
            Ok(guard) => Some(guard),
            // A panic while holding the lock leaves the state as the last apply left it.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Write access (apply, install).
    pub(super) fn write(&self) -> WriteGuard<'_, T> {
        WriteGuard {
            guard: Some(lock_without_stalling(
                || self.lock.try_write(),
                || self.lock.write(),
            )),
            released: &self.released,
        }
    }
}

impl<T> std::ops::Deref for WriteGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.guard.as_deref().expect("held until dropped")
    }
}

impl<T> std::ops::DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard.as_deref_mut().expect("held until dropped")
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.released.notify_waiters();
    }
}

/// Waits for a lock without stalling the async runtime: `attempt` is retried, yielding the
/// thread, for a short while (apply holds the lock for microseconds, and the hand-off costs
/// more), then `wait` blocks, on a multi-thread runtime's worker inside `block_in_place`.
fn lock_without_stalling<G>(
    attempt: impl Fn() -> Result<G, TryLockError<G>>,
    wait: impl FnOnce() -> LockResult<G>,
) -> G {
    for _ in 0..SPINS_BEFORE_BLOCKING {
        match attempt() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    let wait = || wait().unwrap_or_else(|poisoned| poisoned.into_inner());
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_parked_reader_leaves_its_thread_and_reads_once_the_writer_lets_go() {
        // One thread: a reader that blocked it would never let this task write and let go.
        let guarded = std::sync::Arc::new(Guarded::new(String::new()));
        let mut writing = guarded.write();
        let reader = {
            let guarded = guarded.clone();
            tokio::spawn(async move { guarded.read_parked().await.clone() })
        };
        tokio::task::yield_now().await;
        assert!(!reader.is_finished(), "the reader waits for the writer");
        writing.push_str("applied");
        drop(writing);
        assert_eq!(reader.await.expect("the reader ran"), "applied");
        assert_eq!(
            *guarded.read_parked().await,
            "applied",
            "a free lock at once"
        );
    }
}
