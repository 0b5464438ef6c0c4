//! The rules version of the applied state (`crate::rules`, SPEC §4.26) as `Shared` keeps it:
//! read on every write without the state's lock, watched by `coord::rules`, and the halt of
//! a node that meets data above its own rules.

use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::Shared;
use crate::lease::State;

impl Shared {
    /// The rules version of the applied state.
    pub fn rules(&self) -> u32 {
        self.rules.load(Ordering::Acquire)
    }

    /// Fires when the applied state's rules version changes.
    pub fn subscribe_rules(&self) -> watch::Receiver<u32> {
        self.rules_changed.subscribe()
    }

    pub(super) fn set_rules(&self, rules: u32) {
        self.rules.store(rules, Ordering::Release);
        self.rules_changed.send_if_modified(|was| {
            let changed = *was != rules;
            *was = rules;
            changed
        });
    }

    /// The highest rules version this node applies.
    pub fn max_rules(&self) -> u32 {
        self.max_rules
    }

    /// Why this node stopped applying, if it did (health and `Cluster.Status` say so).
    pub fn halted(&self) -> Option<String> {
        self.halted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops this node's applying for `why`: logged, remembered, and returned as the error
    /// that stops openraft (it never applies past what it cannot read).
    pub fn halt(&self, why: String) -> std::io::Error {
        tracing::error!("{why}");
        *self.halted.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        std::io::Error::other(why)
    }

    /// A state (from a snapshot) whose rules are above this node's: why it cannot use it.
    pub(super) fn above_own_rules(&self, state: &State, what: &str) -> Option<String> {
        (state.rules() > self.max_rules).then(|| above_rules(what, state.rules(), self.max_rules))
    }
}

/// Why a node of rules up to `max` does not apply `what`, written under rules `rules`.
pub fn above_rules(what: &str, rules: u32, max: u32) -> String {
    format!(
        "{what} is of rules version {rules}, and this node applies rules up to {max} ({}): run a release that supports rules {rules} (the data cannot go back to an older one)",
        if max < crate::rules::RELEASE.max {
            format!("--max-rules {max}")
        } else {
            format!("release {}", env!("CARGO_PKG_VERSION"))
        }
    )
}
