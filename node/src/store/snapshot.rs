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

const FORMAT_VERSION: u32 = 1;
const PREFIX: &str = "snapshot-";

/// What a snapshot's data (and what openraft streams to a follower) holds.
#[derive(Serialize, Deserialize)]
struct Body {
    format_version: u32,
    state: State,
}

pub fn encode_state(state: &State) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Body {
        format_version: FORMAT_VERSION,
        state: state.clone(),
    })
}

pub fn decode_state(data: &[u8]) -> anyhow::Result<State> {
    let body: Body = serde_json::from_slice(data)?;
    anyhow::ensure!(
        body.format_version == FORMAT_VERSION,
        "snapshot format {} is not readable by this release (reads {FORMAT_VERSION})",
        body.format_version
    );
    Ok(body.state.restored())
}

/// A snapshot as kept on disk and in memory.
#[derive(Clone)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub data: std::sync::Arc<Vec<u8>>,
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
    Ok(Some(StoredSnapshot {
        meta,
        data: std::sync::Arc::new(data),
    }))
}
