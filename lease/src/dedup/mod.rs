//! Exactly-once retries (SPEC §5): a mutation carrying a `request_id` is applied at most once
//! per (principal, request_id) within the dedup window, measured in lease-clock time.
//!
//! Renews are not remembered ([`Op::exactly_once`]): a renew applied twice with the same
//! token extends the same lease from a later instant, which the caller asked for either way.
//! Every other write a client library sends carries a `request_id`, so the table holds one
//! record per write of the last ten minutes: millions under sustained load. A record is
//! therefore small and bounded, whatever the reply was: digests instead of the key and the
//! request, and the reply without what a retry can get again ([`Kept`]: no metadata, no list
//! of holders, a registered resource by name), rebuilt when a retry asks for it. The table is
//! bounded by bytes per principal (a quota) and in all ([`EXACTLY_ONCE_TOTAL_BYTES`]): past
//! either, writes with a new request id are refused, and retries of remembered ones still
//! get their answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::command::{Op, Reply};
use super::quota::EXACTLY_ONCE_TOTAL_BYTES;
use super::types::{Metadata, Name, Rejection};

/// What a record costs beyond its kept reply: the key and request digests, the time, the
/// principal, the order queue's entry and the maps' share of a node.
pub const RECORD_BYTES: u64 = 128;

/// The first 128 bits of a SHA-256: the same on every node and in every release (a snapshot
/// carries them), and no caller can make two keys collide on purpose.
pub(crate) type Digest128 = [u8; 16];

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
/// a change to `Op` (or to [`Kept`], which records hold encoded) needs a snapshot format
/// bump that converts remembered records, as format 5's reader does for format 4's.
fn fingerprint(op: &Op) -> Digest128 {
    match postcard::to_allocvec(op) {
        Ok(bytes) => digest(&[&bytes]),
        // Every op serializes (plain data); were one not to, the debug form still tells
        // different requests apart.
        Err(_) => digest(&[format!("{op:?}").as_bytes()]),
    }
}

/// A remembered reply, without what a retry can get again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)] // short-lived: decoded for a retry, then rebuilt
pub enum Kept {
    /// The reply with lease metadata emptied (an acquire's is the request's own; another
    /// lease's is read from the lease when retried) and without the list of holders of a
    /// refused acquire (the current holders when retried).
    Reply(Reply),
    /// A registered resource: its view as it is when retried.
    Resource(String),
}

impl Kept {
    pub fn of(reply: &Reply) -> Kept {
        let mut reply = match reply {
            Reply::Resource(view) => return Kept::Resource(view.name.clone()),
            reply => reply.clone(),
        };
        match &mut reply {
            Reply::Acquire(outcome) => {
                outcome.holders = Vec::new();
                if let Some(view) = &mut outcome.lease {
                    view.lease.metadata = Metadata::default();
                }
            }
            Reply::Lease(view) => view.lease.metadata = Metadata::default(),
            Reply::Many(outcome) => {
                for claim in &mut outcome.claims {
                    claim.holders = Vec::new();
                }
                for view in &mut outcome.leases {
                    view.lease.metadata = Metadata::default();
                }
            }
            _ => {}
        }
        Kept::Reply(reply)
    }

    fn encode(&self) -> Box<[u8]> {
        match self {
            Kept::Reply(reply) => KeptRef::Reply(reply).encode(),
            Kept::Resource(name) => KeptRef::Resource(name).encode(),
        }
    }

    /// `Kept::of(reply).encode()`, copying the reply only when it holds what a record leaves
    /// out: most replies are kept whole and encode from where they are.
    fn encode_of(reply: &Reply) -> Box<[u8]> {
        let whole = match reply {
            Reply::Resource(view) => return KeptRef::Resource(&view.name).encode(),
            Reply::Acquire(outcome) => {
                outcome.holders.is_empty()
                    && outcome
                        .lease
                        .as_ref()
                        .is_none_or(|view| view.lease.metadata.is_empty())
            }
            Reply::Lease(view) => view.lease.metadata.is_empty(),
            Reply::Many(outcome) => {
                outcome.claims.iter().all(|c| c.holders.is_empty())
                    && outcome.leases.iter().all(|v| v.lease.metadata.is_empty())
            }
            _ => true,
        };
        if whole {
            KeptRef::Reply(reply).encode()
        } else {
            Kept::of(reply).encode()
        }
    }
}

/// [`Kept`] borrowed: the same encoding (postcard encodes a variant by its position).
#[derive(Serialize)]
enum KeptRef<'a> {
    Reply(&'a Reply),
    Resource(&'a str),
}

impl KeptRef<'_> {
    fn encode(&self) -> Box<[u8]> {
        // Replies are plain data and always encode; an empty record would decode as an
        // error below, never as a wrong answer.
        let encoded = postcard::to_allocvec(self).unwrap_or_default();
        // Copied into a block of its own size: shrinking the encoder's buffer in place
        // would leave a typical record (≈ 85 bytes) in a 128-byte block, among the state's
        // lasting ones of that size, and a page of them is not given back when the records
        // are forgotten (at a million leases, ≈ 100 bytes a lease stayed resident).
        Box::from(encoded.as_slice())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remembered {
    /// Whose record: its bytes count against this principal's quota. Empty for records
    /// converted from a format that did not keep it.
    principal: Name,
    op: Digest128,
    /// The [`Kept`] reply in postcard's encoding.
    kept: Box<[u8]>,
    at_ms: u64,
}

impl Remembered {
    fn cost(&self) -> u64 {
        Remembered::cost_of(self.kept.len())
    }

    /// What a record whose outcome takes `kept` bytes costs.
    fn cost_of(kept: usize) -> u64 {
        RECORD_BYTES + kept as u64
    }
}

/// A request seen for the first time: what [`Dedup::remember`] needs to record it.
pub struct Ticket {
    key: Digest128,
    op: Digest128,
    /// The live key of the same index prefix, and its chunk, if there is one (`table`).
    sharing: Option<(Digest128, u32)>,
}

/// What a retried request gets.
#[allow(clippy::large_enum_variant)] // short-lived, never stored
pub enum Seen {
    New(Ticket),
    /// The same request again: the original reply, to rebuild.
    Retry(Kept),
    /// The same request_id with a different request.
    Conflict,
}

impl Dedup {
    pub fn check(&self, principal: &str, request_id: &str, op: &Op) -> Seen {
        let key = key(principal, request_id);
        let op = fingerprint(op);
        match self.record(&key) {
            None => Seen::New(Ticket {
                key,
                op,
                sharing: self.sharing(&key),
            }),
            Some(seen) if seen.op == op => match postcard::from_bytes(&seen.kept) {
                Ok(kept) => Seen::Retry(kept),
                // A record of the release before sessions (a SetQuota's nine quotas).
                Err(_) => match postcard::from_bytes::<format5::KeptV5>(&seen.kept) {
                    Ok(kept) => Seen::Retry(kept.into()),
                    // Only a record this release cannot read gets here: answer as if it were
                    // another request rather than apply the same request twice.
                    Err(_) => Seen::Conflict,
                },
            },
            Some(_) => Seen::Conflict,
        }
    }

    /// Whether (principal, request_id) is remembered: None for a new one, `Some(true)` for the
    /// same request again, `Some(false)` for another request under the same id. What
    /// [`Dedup::check`] decides, without reading the kept reply.
    pub fn remembers(&self, principal: &str, request_id: &str, op: &Op) -> Option<bool> {
        let seen = self.record(&key(principal, request_id))?;
        Some(seen.op == fingerprint(op))
    }

    /// Whether the table may take another record: refused past [`EXACTLY_ONCE_TOTAL_BYTES`].
    /// (The principal's own budget is its `exactly_once_bytes` quota.)
    pub fn room(&self) -> Result<(), Rejection> {
        if self.bytes() >= EXACTLY_ONCE_TOTAL_BYTES {
            return Err(Rejection::QuotaExceeded {
                quota: "exactly_once_bytes".into(),
                limit: EXACTLY_ONCE_TOTAL_BYTES,
                principal: "(all principals)".into(),
            });
        }
        Ok(())
    }

    /// Records the reply of a new request; returns what it costs the principal.
    pub fn remember(&mut self, principal: &str, ticket: Ticket, reply: &Reply, now_ms: u64) -> i64 {
        let record = Remembered {
            principal: Name::from(principal),
            op: ticket.op,
            kept: Kept::encode_of(reply),
            at_ms: now_ms,
        };
        self.add(ticket, record)
    }

    /// Replaces the remembered reply of a request, if still remembered: a waiting acquire's
    /// reply becomes the wait's outcome once an entry decides it. Returns whose record it is
    /// (as the record says: empty for one converted from format 4) and the change of cost.
    pub fn resolve(&mut self, principal: &str, request_id: &str, reply: &Reply) -> (Name, i64) {
        let key = key(principal, request_id);
        let Some(mut record) = self.record(&key) else {
            return (Name::default(), 0);
        };
        let before = record.clone();
        record.kept = Kept::encode_of(reply);
        let whose = record.principal.clone();
        let change = self.replace(&key, &before, record);
        (whose, change)
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
                principal: Name::from(principal),
                op: fingerprint(&old.op),
                kept: Kept::of(&old.reply).encode(),
                at_ms: old.at_ms,
            };
            remembered.push((old.at_ms, key(principal, request_id), record));
        }
        Ok(Dedup::of_records(remembered))
    }

    /// A table of `(at_ms, key, record)`, remembered in that order (formats before 5).
    fn of_records(mut remembered: Vec<(u64, Digest128, Remembered)>) -> Dedup {
        remembered.sort_by_key(|(at_ms, key, _)| (*at_ms, *key));
        let order = remembered
            .iter()
            .map(|(at_ms, key, _)| (*at_ms, *key))
            .collect();
        let entries = remembered
            .into_iter()
            .map(|(_, key, record)| (key, record))
            .collect();
        Dedup::of_table(entries, order)
    }
}

// The formats of older snapshots, kept with the other old formats (`lease::legacy`).
mod encoding;
#[path = "../legacy/dedup_format4.rs"]
mod format4;
#[path = "../legacy/dedup_format5.rs"]
mod format5;
mod index;
mod retry;
mod table;

#[cfg(test)]
use table::CHUNK;
pub use table::{Charge, Dedup};
pub(crate) use table::{DedupLoaded, DedupWriting};

#[cfg(feature = "testkit")]
pub use format4::format_4_table;
pub use format4::Format4;

#[cfg(test)]
mod tests;
