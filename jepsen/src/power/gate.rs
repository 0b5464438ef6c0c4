//! A sync held in flight, so a power cut can land between a write and the fsync that would
//! have made it durable: the moment a process is waiting on its disk and nothing it wrote
//! since the last sync has reached it. Cuts at random moments mostly land between syncs, when
//! a log that syncs every append has nothing unsynced to lose.
//!
//! Armed, the gate stops the next sync that has something to make durable; the FUSE thread
//! waits in it (the process stays in its fsync, uninterruptible) until the nemesis has sent
//! SIGKILL and fails it: the sync returns an error the dead process never sees, and nothing
//! it would have made durable is.

use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// Syncs pass.
    #[default]
    Open,
    /// The next sync with something to make durable stops here.
    Armed,
    /// A sync waits here.
    Held,
    /// The held sync is to fail without making anything durable.
    Failed,
}

#[derive(Debug, Default)]
pub struct SyncGate {
    state: Mutex<State>,
    changed: Condvar,
}

impl SyncGate {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next sync with something to make durable will wait in the gate.
    pub fn arm(&self) {
        let mut state = self.state();
        if *state == State::Open {
            *state = State::Armed;
        }
    }

    /// Whether a sync waits in the gate.
    pub fn holds(&self) -> bool {
        *self.state() == State::Held
    }

    /// Fails the sync that waits in the gate, if one does, and opens it: a sync that has not
    /// come yet passes. Call it once the process is sent SIGKILL.
    pub fn fail_and_open(&self) {
        let mut state = self.state();
        *state = match *state {
            State::Held => State::Failed,
            _ => State::Open,
        };
        self.changed.notify_all();
    }

    /// Called by the filesystem before a sync with something to make durable: false when the
    /// sync is to fail and make nothing durable. Waits while the gate holds it.
    pub fn pass(&self) -> bool {
        let mut state = self.state();
        if *state != State::Armed {
            return true;
        }
        *state = State::Held;
        self.changed.notify_all();
        let mut state = self
            .changed
            .wait_while(state, |s| *s == State::Held)
            .unwrap_or_else(|p| p.into_inner());
        let failed = *state == State::Failed;
        *state = State::Open;
        !failed
    }
}
