//! Exactly-once retries (SPEC §5): a mutation carrying a `request_id` is applied at most once
//! per (principal, request_id) within the dedup window, measured in lease-clock time.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::command::{Op, Reply};
use super::policy::DEDUP_WINDOW_MS;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Remembered {
    op: Op,
    reply: Reply,
    at_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dedup {
    /// Keyed by `key(principal, request_id)`.
    entries: BTreeMap<String, Remembered>,
    /// Keys in the order they were remembered; lease time never runs backwards.
    order: VecDeque<(u64, String)>,
}

/// What a retried request gets.
#[allow(clippy::large_enum_variant)] // short-lived, never stored
pub enum Seen {
    New,
    /// The same request again: the original reply.
    Retry(Reply),
    /// The same request_id with a different request.
    Conflict,
}

fn key(principal: &str, request_id: &str) -> String {
    // Length-prefixed, so no two (principal, request_id) pairs share a key.
    format!("{}:{principal}{request_id}", principal.len())
}

impl Dedup {
    pub fn check(&self, principal: &str, request_id: &str, op: &Op) -> Seen {
        match self.entries.get(&key(principal, request_id)) {
            None => Seen::New,
            Some(seen) if seen.op == *op => Seen::Retry(seen.reply.clone()),
            Some(_) => Seen::Conflict,
        }
    }

    pub fn remember(
        &mut self,
        principal: &str,
        request_id: &str,
        op: Op,
        reply: Reply,
        now_ms: u64,
    ) {
        let key = key(principal, request_id);
        self.order.push_back((now_ms, key.clone()));
        self.entries.insert(
            key,
            Remembered {
                op,
                reply,
                at_ms: now_ms,
            },
        );
    }

    /// Replaces the remembered reply of a request, if still remembered: a waiting acquire's
    /// reply becomes the wait's outcome once an entry decides it.
    pub fn resolve(&mut self, principal: &str, request_id: &str, reply: Reply) {
        if let Some(seen) = self.entries.get_mut(&key(principal, request_id)) {
            seen.reply = reply;
        }
    }

    /// Forgets what is older than the window.
    pub fn prune(&mut self, now_ms: u64) {
        while let Some((at_ms, _)) = self.order.front() {
            if at_ms.saturating_add(DEDUP_WINDOW_MS) > now_ms {
                break;
            }
            if let Some((at_ms, key)) = self.order.pop_front() {
                if self.entries.get(&key).is_some_and(|e| e.at_ms == at_ms) {
                    self.entries.remove(&key);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
