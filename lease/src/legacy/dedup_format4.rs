//! The exactly-once table as snapshot formats 3 and 4 held it (whole replies, no principal),
//! read into the current form.

use std::sync::Arc;

use imbl::{OrdMap, Vector};
use serde::Deserialize;

use super::{Dedup, Digest128, Kept, Remembered};
use crate::command::Reply;
use crate::types::Name;

/// The table as formats 3 and 4 hold it: whole replies, no principal.
#[derive(Deserialize)]
pub struct Format4 {
    entries: OrdMap<Digest128, Format4Record>,
    order: Vector<(u64, Digest128)>,
}

#[derive(Clone, Deserialize)]
struct Format4Record {
    op: Digest128,
    reply: Arc<[u8]>,
    at_ms: u64,
}

/// A table as formats 3 and 4 held it, of (principal, request_id, op, reply, at_ms) records
/// (tests of the reader).
#[cfg(feature = "testkit")]
pub fn format_4_table(
    records: &[(&str, &str, &crate::command::Op, &Reply, u64)],
) -> impl serde::Serialize {
    use super::{fingerprint, key};
    use serde::Serialize;

    #[derive(Clone, Serialize)]
    struct Record {
        op: Digest128,
        reply: Vec<u8>,
        at_ms: u64,
    }
    #[derive(Serialize)]
    struct Table {
        entries: OrdMap<Digest128, Record>,
        order: Vector<(u64, Digest128)>,
    }
    let mut table = Table {
        entries: OrdMap::new(),
        order: Vector::new(),
    };
    for (principal, request_id, op, reply, at_ms) in records {
        let key = key(principal, request_id);
        let record = Record {
            op: fingerprint(op),
            reply: postcard::to_allocvec(reply).expect("plain data encodes"),
            at_ms: *at_ms,
        };
        table.entries.insert(key, record);
        table.order.push_back((*at_ms, key));
    }
    table
}

impl From<Format4> for Dedup {
    /// Each reply slimmed to what is kept now; the records count against no principal.
    fn from(old: Format4) -> Dedup {
        let entries = old
            .entries
            .into_iter()
            .map(|(key, record)| {
                let kept = match postcard::from_bytes::<Reply>(&record.reply) {
                    Ok(reply) => Kept::of(&reply).encode(),
                    // Unreadable stays unreadable: a retry gets a conflict, as before.
                    Err(_) => Box::default(),
                };
                let record = Remembered {
                    principal: Name::default(),
                    op: record.op,
                    kept,
                    at_ms: record.at_ms,
                };
                (key, record)
            })
            .collect();
        Dedup::of_table(entries, old.order.into_iter().collect())
    }
}
