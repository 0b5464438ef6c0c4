//! Snapshot files: the serialized lease `State` at an applied index, with its openraft meta.
//!
//! Written to a temporary file, fsynced, renamed into place, then the directory is fsynced;
//! older snapshots are removed. The body carries a format version so a later release can read
//! an older snapshot.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::NodeId;
use crate::lease::State;

pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

/// 2: resources hold several leases, their registration and their history (issue 4).
const FORMAT_VERSION: u32 = 2;
const PREFIX: &str = "snapshot-";

/// What a snapshot's data (and what openraft streams to a follower) holds.
#[derive(Serialize, Deserialize)]
struct Body<S> {
    format_version: u32,
    state: S,
}

/// Just the version, to name the format of a snapshot this release cannot read.
#[derive(Deserialize)]
struct Version {
    format_version: u32,
}

pub fn encode_state(state: &State) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Body {
        format_version: FORMAT_VERSION,
        state,
    })
}

pub fn decode_state(data: &[u8]) -> anyhow::Result<State> {
    let unreadable = |version: u32| {
        anyhow::anyhow!(
            "snapshot format {version} is not readable by this release (reads {FORMAT_VERSION})"
        )
    };
    // One parse when the snapshot is readable; the version is read on its own only to name
    // the format of one that is not.
    let body: Body<State> = serde_json::from_slice(data).map_err(|error| {
        match serde_json::from_slice::<Version>(data) {
            Ok(Version { format_version }) if format_version != FORMAT_VERSION => {
                unreadable(format_version)
            }
            _ => error.into(),
        }
    })?;
    if body.format_version != FORMAT_VERSION {
        return Err(unreadable(body.format_version));
    }
    Ok(body.state.restored())
}

/// A snapshot as kept on disk. In memory only while it is built, installed or sent: its
/// bytes are as large as the state (1.4 KB per lease), so nothing holds on to them.
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub data: Vec<u8>,
}

fn file_name(meta: &SnapshotMeta) -> String {
    let index = meta.last_log_id.map_or(0, |id| id.index);
    format!("{PREFIX}{index:020}-{}", meta.snapshot_id)
}

/// Writes the snapshot durably and removes older ones. Callers serialize saves.
pub fn save(dir: &Path, snapshot: &StoredSnapshot) -> anyhow::Result<()> {
    fs::create_dir_all(dir)?;
    let final_path = dir.join(file_name(&snapshot.meta));
    let tmp_path = dir.join(format!(".{}.tmp", file_name(&snapshot.meta)));
    {
        let mut file = File::create(&tmp_path)?;
        serde_json::to_writer(&mut file, &snapshot.meta)?;
        file.write_all(b"\n")?;
        file.write_all(&snapshot.data)?;
        file.sync_all()?;
    }
    fs::rename(&tmp_path, &final_path)?;
    File::open(dir)?.sync_all()?;
    // Names sort by index: remove only older snapshots, never a newer one saved meanwhile.
    for old in list(dir)? {
        if old < final_path {
            fs::remove_file(old)?;
        }
    }
    Ok(())
}

fn list(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    if !dir.exists() {
        return Ok(paths);
    }
    for item in fs::read_dir(dir)? {
        let path = item?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PREFIX))
        {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Loads the newest snapshot in `dir`, if any.
pub fn load_newest(dir: &Path) -> anyhow::Result<Option<StoredSnapshot>> {
    let Some(path) = list(dir)?.pop() else {
        return Ok(None);
    };
    let mut reader = BufReader::new(File::open(&path)?);
    let mut header = String::new();
    reader.read_line(&mut header)?;
    let meta: SnapshotMeta = serde_json::from_str(header.trim_end())?;
    let mut data = Vec::new();
    reader.read_to_end(&mut data)?;
    Ok(Some(StoredSnapshot { meta, data }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{
        apply, AcquireOp, Command, CreateOp, EntryMeta, LeaderKey, Mode, Op, Policy, Proposal,
        Stamp,
    };

    fn entry(state: &mut State, index: u64, op: Op) {
        let command = Command::V1(Proposal {
            stamp: Stamp {
                mono_ms: 1_000 + index,
                wall_ms: 1_700_000_000_000,
                clock_epoch: 0,
            },
            principal: "p".into(),
            admin: true,
            request_id: None,
            require_registration: false,
            op,
        });
        let leader = LeaderKey {
            term: 1,
            node_id: 1,
        };
        apply(state, EntryMeta { index, leader }, &command);
    }

    #[test]
    fn a_snapshot_restores_leases_expiry_index_and_history() {
        let mut state = State::default();
        let policy = Policy {
            shared_modes: vec![Mode::Read],
            total_units: 4,
            ..Policy::registered()
        };
        entry(
            &mut state,
            1,
            Op::CreateResource(CreateOp {
                name: Some("seats".into()),
                policy,
            }),
        );
        for (index, holder) in [(2, "a"), (3, "b")] {
            let op = AcquireOp {
                resource: "seats".into(),
                holder: holder.into(),
                ttl_ms: Some(30_000),
                mode: Mode::Read,
                units: 2,
                metadata: Default::default(),
                idempotency_key: None,
                wait_ms: None,
            };
            entry(&mut state, index, Op::Acquire(op));
        }
        assert_eq!(state.live_leases(), 2);
        assert_eq!(state.retained_events(), 3);
        let restored = decode_state(&encode_state(&state).expect("encode")).expect("decode");
        assert_eq!(restored, state);
        assert_eq!(restored.live_leases(), 2);
        assert_eq!(restored.next_due_ms(), state.next_due_ms());
        assert_eq!(restored.retained_events(), 3);
    }

    #[test]
    fn an_older_format_is_refused_by_name() {
        let error = decode_state(br#"{"format_version":1,"state":{}}"#).expect_err("refused");
        assert!(error.to_string().contains("snapshot format 1"), "{error}");
    }
}
