//! How log entries and peer messages are encoded: postcard's binary encoding behind a tag
//! byte. Releases before it wrote JSON, which is still read, so a node upgrades in place over
//! its old log, and a node answers a peer in the encoding the peer used (see `grpc::raft`).
//!
//! JSON was 2–3× larger and was encoded or decoded five times per entry on its way through
//! the cluster (leader log, wire, follower decode, follower log, apply reads). A smaller log
//! also means snapshots come less often for the same writes (`compaction`).

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The first byte of a binary body. JSON bodies start with `{`, `[`, `"` or whitespace.
const BINARY: u8 = 0x01;

/// Which encoding a body used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Binary,
    /// What releases before the binary encoding wrote and sent.
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("binary body: {0}")]
    Binary(#[from] postcard::Error),
    #[error("json body: {0}")]
    Json(#[from] serde_json::Error),
}

/// `value` in the binary encoding.
pub fn to_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    to_bytes_as(Wire::Binary, value)
}

pub fn to_bytes_as<T: Serialize>(wire: Wire, value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(match wire {
        Wire::Binary => postcard::to_extend(value, vec![BINARY])?,
        Wire::Json => serde_json::to_vec(value)?,
    })
}

/// Decodes a body in either encoding, and says which it was.
pub fn from_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, Wire), CodecError> {
    match bytes.split_first() {
        Some((&BINARY, body)) => match postcard::take_from_bytes(body)? {
            (value, []) => Ok((value, Wire::Binary)),
            // Like JSON's trailing characters: not a body this release wrote.
            (_, _) => Err(CodecError::Binary(postcard::Error::DeserializeBadEncoding)),
        },
        _ => Ok((serde_json::from_slice(bytes)?, Wire::Json)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lease::{Command, Op, Proposal, RenewOp, Stamp};
    use crate::store::{Entry, LogId};
    use crate::store::{EntryPayload, LeaderId, Membership};
    use openraft::BasicNode;
    use std::collections::{BTreeMap, BTreeSet};

    fn entries() -> Vec<Entry> {
        let log_id = |index| {
            LogId::new(
                LeaderId {
                    term: 123,
                    node_id: 2,
                },
                index,
            )
        };
        let renew = Command::V1(Proposal {
            stamp: Stamp {
                mono_ms: 5,
                wall_ms: 1_700_000_000_000,
                clock_epoch: 9,
            },
            principal: "alice".into(),
            admin: false,
            request_id: Some("req-1".into()),
            require_registration: true,
            op: Op::Renew(RenewOp {
                resource: "db".into(),
                lease_id: "lse_7_0".into(),
                holder: "alice-1".into(),
                fencing_token: 7,
                ttl_ms: Some(10_000),
            }),
        });
        let members = BTreeMap::from([
            (1, BasicNode::new("127.0.0.1:1")),
            (2, BasicNode::new("127.0.0.1:2")),
        ]);
        vec![
            Entry {
                log_id: log_id(1),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: log_id(2),
                payload: EntryPayload::Membership(
                    Membership::new(vec![BTreeSet::from([1, 2])], members)
                        .expect("valid membership"),
                ),
            },
            Entry {
                log_id: log_id(3),
                payload: EntryPayload::Normal(renew.clone()),
            },
            Entry {
                log_id: log_id(4),
                payload: EntryPayload::Normal(Command::Batch(vec![])),
            },
        ]
    }

    #[test]
    fn entries_round_trip_in_both_encodings_and_binary_is_smaller() {
        for entry in entries() {
            let binary = to_bytes(&entry).expect("binary");
            let json = to_bytes_as(Wire::Json, &entry).expect("json");
            let (back, wire): (Entry, Wire) = from_bytes(&binary).expect("decode binary");
            assert_eq!((back, wire), (entry.clone(), Wire::Binary));
            let (back, wire): (Entry, Wire) = from_bytes(&json).expect("decode json");
            assert_eq!((back, wire), (entry.clone(), Wire::Json));
            assert!(
                binary.len() < json.len(),
                "{} vs {}",
                binary.len(),
                json.len()
            );
        }
    }

    /// `entries()` as the release on openraft 0.9.25 encoded them, in its log and to its peers.
    pub(crate) const OPENRAFT_0_9_ENTRIES: [&str; 4] = [
        "017b020100",
        "017b0202020102010202010b3132372e302e302e313a31020b3132372e302e302e313a32",
        "017b020301000580d095ffbc310905616c6963650001057265712d310102026462076c73655f375f3007616c6963652d310701904e",
        "017b0204010100",
    ];

    pub(crate) fn unhex(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn entries_written_under_openraft_0_9_read_back_the_same_and_encode_alike() {
        for (hex, entry) in OPENRAFT_0_9_ENTRIES.iter().zip(entries()) {
            let bytes = unhex(hex);
            let (back, wire): (Entry, Wire) = from_bytes(&bytes).expect("decodes");
            assert_eq!((back, wire), (entry.clone(), Wire::Binary));
            assert_eq!(to_bytes(&entry).expect("encodes"), bytes);
        }
    }

    #[test]
    fn a_body_that_is_neither_is_an_error() {
        assert!(from_bytes::<Entry>(&[BINARY, 0xff, 0xff]).is_err());
        assert!(from_bytes::<Entry>(b"not json").is_err());
        assert!(from_bytes::<Entry>(&[]).is_err());
        let mut trailing = to_bytes(&entries()[0]).expect("binary");
        trailing.push(0);
        assert!(from_bytes::<Entry>(&trailing).is_err());
    }
}
