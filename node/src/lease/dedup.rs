//! Exactly-once retries (SPEC §5): a mutation carrying a `request_id` is applied at most once
//! per (principal, request_id) within the dedup window, measured in lease-clock time.
//!
//! Every write a client library sends carries a `request_id`, so the table holds one record
//! per write of the last ten minutes: millions under sustained load. A record is therefore
//! compact (about 150 bytes): digests instead of the key and the request, and the reply in
//! postcard's encoding, decoded only when a retry asks for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::{OrdMap, Vector};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::command::{Op, Reply};
use super::policy::DEDUP_WINDOW_MS;

/// The first 128 bits of a SHA-256: the same on every node and in every release (a snapshot
/// carries them), and no caller can make two keys collide on purpose.
type Digest128 = [u8; 16];

fn digest(parts: &[&[u8]]) -> Digest128 {
    let mut hasher = Sha256::new();
    for part in parts {
        // Length-prefixed, so no two sequences of parts hash the same input.
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    let full = hasher.finalize();
    let mut short = [0; 16];
    short.copy_from_slice(&full[..16]);
    short
}

fn key(principal: &str, request_id: &str) -> Digest128 {
    digest(&[principal.as_bytes(), request_id.as_bytes()])
}

/// What identifies a request's content: its op in postcard's encoding, which is canonical
/// for our types (fields in order, maps sorted). The encoding follows `Op`'s Rust layout:
/// a change to `Op` (or to `Reply`, which records hold encoded) needs a snapshot format
/// bump that re-fingerprints remembered records, as format 2's reader does.
fn fingerprint(op: &Op) -> Digest128 {
    match postcard::to_allocvec(op) {
        Ok(bytes) => digest(&[&bytes]),
        // Every op serializes (plain data); were one not to, the debug form still tells
        // different requests apart.
        Err(_) => digest(&[format!("{op:?}").as_bytes()]),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Remembered {
    op: Digest128,
    /// The reply in postcard's encoding (shared: copying a map node copies no reply).
    reply: Arc<[u8]>,
    at_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dedup {
    /// Persistent, like the resources: a snapshot's copy is O(1).
    entries: OrdMap<Digest128, Remembered>,
    /// Keys in the order they were remembered; lease time never runs backwards.
    order: Vector<(u64, Digest128)>,
}

/// A request seen for the first time: what [`Dedup::remember`] needs to record it.
pub struct Ticket {
    key: Digest128,
    op: Digest128,
}

/// What a retried request gets.
#[allow(clippy::large_enum_variant)] // short-lived, never stored
pub enum Seen {
    New(Ticket),
    /// The same request again: the original reply.
    Retry(Reply),
    /// The same request_id with a different request.
    Conflict,
}

fn encode(reply: &Reply) -> Arc<[u8]> {
    // Replies are plain data and always encode; an empty record would decode as an error
    // below, never as a wrong answer.
    postcard::to_allocvec(reply).unwrap_or_default().into()
}

impl Dedup {
    pub fn check(&self, principal: &str, request_id: &str, op: &Op) -> Seen {
        let ticket = Ticket {
            key: key(principal, request_id),
            op: fingerprint(op),
        };
        match self.entries.get(&ticket.key) {
            None => Seen::New(ticket),
            Some(seen) if seen.op == ticket.op => match postcard::from_bytes(&seen.reply) {
                Ok(reply) => Seen::Retry(reply),
                // Only a record this release cannot read gets here: answer as if it were
                // another request rather than apply the same request twice.
                Err(_) => Seen::Conflict,
            },
            Some(_) => Seen::Conflict,
        }
    }

    pub fn remember(&mut self, ticket: Ticket, reply: &Reply, now_ms: u64) {
        self.order.push_back((now_ms, ticket.key));
        self.entries.insert(
            ticket.key,
            Remembered {
                op: ticket.op,
                reply: encode(reply),
                at_ms: now_ms,
            },
        );
    }

    /// Replaces the remembered reply of a request, if still remembered: a waiting acquire's
    /// reply becomes the wait's outcome once an entry decides it.
    pub fn resolve(&mut self, principal: &str, request_id: &str, reply: &Reply) {
        if let Some(seen) = self.entries.get_mut(&key(principal, request_id)) {
            seen.reply = encode(reply);
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

    /// The table as format 2 snapshots hold it (JSON): keyed by `<principal length>:
    /// <principal><request_id>`, with the whole op and reply.
    pub fn from_format_2(value: serde_json::Value) -> anyhow::Result<Dedup> {
        #[derive(Deserialize)]
        struct Old {
            op: Op,
            reply: Reply,
            at_ms: u64,
        }
        #[derive(Default, Deserialize)]
        struct Table {
            #[serde(default)]
            entries: BTreeMap<String, Old>,
        }
        let table: Table = if value.is_null() {
            Table::default()
        } else {
            serde_json::from_value(value)?
        };
        let mut remembered: Vec<(u64, Digest128, Remembered)> = Vec::new();
        for (text, old) in table.entries {
            let (principal, request_id) = text
                .split_once(':')
                .and_then(|(len, rest)| rest.split_at_checked(len.parse().ok()?))
                .ok_or_else(|| anyhow::anyhow!("unreadable exactly-once key {text:?}"))?;
            let record = Remembered {
                op: fingerprint(&old.op),
                reply: encode(&old.reply),
                at_ms: old.at_ms,
            };
            remembered.push((old.at_ms, key(principal, request_id), record));
        }
        remembered.sort_by_key(|(at_ms, key, _)| (*at_ms, *key));
        let mut dedup = Dedup::default();
        for (at_ms, key, record) in remembered {
            dedup.order.push_back((at_ms, key));
            dedup.entries.insert(key, record);
        }
        Ok(dedup)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::command::ReleaseOp;
    use crate::lease::types::Rejection;

    fn release(holder: &str) -> Op {
        Op::Release(ReleaseOp {
            resource: "r".into(),
            lease_id: "lse_1_0".into(),
            holder: holder.into(),
            fencing_token: 1,
        })
    }

    fn remember(dedup: &mut Dedup, principal: &str, request_id: &str, op: &Op, reply: &Reply) {
        match dedup.check(principal, request_id, op) {
            Seen::New(ticket) => dedup.remember(ticket, reply, 0),
            _ => panic!("{principal}/{request_id} was already remembered"),
        }
    }

    #[test]
    fn a_retry_gets_the_original_reply_and_another_request_a_conflict() {
        let mut dedup = Dedup::default();
        let reply = Reply::Rejected(Rejection::invalid("ttl", "too long"));
        remember(&mut dedup, "alice", "req-1", &release("a"), &reply);
        assert!(
            matches!(dedup.check("alice", "req-1", &release("a")), Seen::Retry(r) if r == reply)
        );
        assert!(matches!(
            dedup.check("alice", "req-1", &release("b")),
            Seen::Conflict
        ));
    }

    #[test]
    fn keys_of_different_principals_or_splits_do_not_meet() {
        let mut dedup = Dedup::default();
        remember(&mut dedup, "ab", "c", &release("a"), &Reply::None);
        // Same concatenation, other split; other principal, same request_id.
        assert!(matches!(
            dedup.check("a", "bc", &release("a")),
            Seen::New(_)
        ));
        assert!(matches!(
            dedup.check("bob", "c", &release("a")),
            Seen::New(_)
        ));
    }

    #[test]
    fn a_resolved_wait_answers_retries_with_its_outcome_and_the_window_forgets() {
        let mut dedup = Dedup::default();
        remember(&mut dedup, "p", "w", &release("a"), &Reply::None);
        let decided = Reply::Cancelled {
            cancelled: true,
            revision: 9,
        };
        dedup.resolve("p", "w", &decided);
        assert!(matches!(dedup.check("p", "w", &release("a")), Seen::Retry(r) if r == decided));
        dedup.prune(DEDUP_WINDOW_MS - 1);
        assert_eq!(dedup.len(), 1);
        dedup.prune(DEDUP_WINDOW_MS);
        assert!(dedup.is_empty());
    }
}
