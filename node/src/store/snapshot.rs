//! Snapshot files: the serialized lease `State` at an applied index, with its openraft meta.
//!
//! Written to a temporary file, fsynced, renamed into place, then the directory is fsynced;
//! older snapshots are removed. The body carries a format version so a later release can read
//! an older snapshot.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::NodeId;
use crate::lease::dedup::Dedup;
use crate::lease::State;

pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

/// 2: resources hold several leases, their registration and their history (issue 4), JSON.
/// 3: postcard's binary encoding; exactly-once records hold digests (issue 6). Format 2 is
/// still read, so a node upgrades in place.
const FORMAT_VERSION: u32 = 3;
const PREFIX: &str = "snapshot-";

/// The last format written as JSON; its body is `{"format_version": 2, "state": {..}}`.
const JSON_FORMAT: u32 = 2;

/// Writes a snapshot's body (what follows the meta line): the format version, then the
/// state, both in postcard's encoding. Only the state's own fields are written; the derived
/// indexes are rebuilt on load.
pub fn encode_state_into<W: Write>(state: &State, out: W) -> postcard::Result<W> {
    postcard::to_io(&(FORMAT_VERSION, state), out)
}

/// The body in memory (tests and tools; a node writes it to the file directly).
pub fn encode_state(state: &State) -> postcard::Result<Vec<u8>> {
    encode_state_into(state, Vec::new())
}

fn unreadable(version: u64) -> anyhow::Error {
    anyhow::anyhow!("snapshot format {version} is not readable by this release (reads {FORMAT_VERSION} and {JSON_FORMAT})")
}

pub fn decode_state(data: &[u8]) -> anyhow::Result<State> {
    // A JSON body starts with `{`; a postcard body with the version, which is not 123.
    if data.first() == Some(&b'{') {
        return decode_json(data);
    }
    let (version, body) = postcard::take_from_bytes::<u32>(data)?;
    if version != FORMAT_VERSION {
        return Err(unreadable(version.into()));
    }
    let state: State = postcard::from_bytes(body)?;
    Ok(state.restored())
}

/// Format 2: the same state in JSON, with exactly-once records keyed by their text.
fn decode_json(data: &[u8]) -> anyhow::Result<State> {
    let mut body: serde_json::Value = serde_json::from_slice(data)?;
    let version = body["format_version"].as_u64().unwrap_or(0);
    if version != u64::from(JSON_FORMAT) {
        return Err(unreadable(version));
    }
    let mut state = body["state"].take();
    let dedup = state
        .get_mut("dedup")
        .map(serde_json::Value::take)
        .unwrap_or_default();
    state["dedup"] = serde_json::to_value(Dedup::default())?;
    let mut state: State = serde_json::from_value(state)?;
    state.dedup = Dedup::from_format_2(dedup)?;
    Ok(state.restored())
}

/// Writes a snapshot file: a line of JSON with openraft's meta, then the body. The body is
/// encoded straight into the file, so no copy of the state and no buffer as large as the
/// snapshot (300 bytes per lease) is ever held in memory.
pub struct Writer {
    meta: SnapshotMeta,
    tmp_path: PathBuf,
    file: BufWriter<File>,
}

/// Large writes: a snapshot body is written while apply waits (see `build_snapshot`).
const WRITE_BUFFER: usize = 1 << 20;

impl Writer {
    pub fn create(dir: &Path, meta: SnapshotMeta) -> anyhow::Result<Writer> {
        fs::create_dir_all(dir)?;
        let tmp_path = dir.join(format!(".{}.tmp", file_name(&meta)));
        let mut file = BufWriter::with_capacity(WRITE_BUFFER, File::create(&tmp_path)?);
        serde_json::to_writer(&mut file, &meta)?;
        file.write_all(b"\n")?;
        Ok(Writer {
            meta,
            tmp_path,
            file,
        })
    }

    /// Encodes `state` as the body, through to the OS (not yet to the disk).
    pub fn state(&mut self, state: &State) -> anyhow::Result<()> {
        encode_state_into(state, &mut self.file)?;
        self.file.flush()?;
        Ok(())
    }

    /// Copies a body received from the leader.
    pub fn body(&mut self, body: &[u8]) -> anyhow::Result<()> {
        self.file.write_all(body)?;
        Ok(())
    }

    /// Makes the file durable under its temporary name.
    pub fn finish(self) -> anyhow::Result<Written> {
        let file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let bytes = file.metadata()?.len();
        Ok(Written {
            meta: self.meta,
            tmp_path: self.tmp_path,
            bytes,
        })
    }
}

/// A durable snapshot file not yet in place.
pub struct Written {
    pub meta: SnapshotMeta,
    tmp_path: PathBuf,
    pub bytes: u64,
}

impl Written {
    /// Opens it for reading (still readable after `keep` renames or `discard` removes it).
    pub fn open(&self) -> std::io::Result<File> {
        File::open(&self.tmp_path)
    }

    /// Renames it into place and removes older snapshots. Callers serialize keeps.
    pub fn keep(self, dir: &Path) -> anyhow::Result<()> {
        let final_path = dir.join(file_name(&self.meta));
        fs::rename(&self.tmp_path, &final_path)?;
        File::open(dir)?.sync_all()?;
        // Names sort by index: remove only older snapshots, never a newer one saved meanwhile.
        for old in list(dir)? {
            if old < final_path {
                fs::remove_file(old)?;
            }
        }
        Ok(())
    }

    pub fn discard(self) -> std::io::Result<()> {
        fs::remove_file(&self.tmp_path)
    }
}

fn file_name(meta: &SnapshotMeta) -> String {
    let index = meta.last_log_id.map_or(0, |id| id.index);
    format!("{PREFIX}{index:020}-{}", meta.snapshot_id)
}

/// Removes what an interrupted write left: temporary files are never read.
pub fn remove_unfinished(dir: &Path) -> anyhow::Result<()> {
    for path in named(dir, |n| n.starts_with('.') && n.ends_with(".tmp"))? {
        fs::remove_file(path)?;
    }
    Ok(())
}

/// The snapshot files in `dir`, oldest first.
fn list(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    named(dir, |n| n.starts_with(PREFIX))
}

/// The files in `dir` whose names `wanted` picks, sorted by name; none if `dir` is missing.
fn named(dir: &Path, wanted: impl Fn(&str) -> bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    if !dir.exists() {
        return Ok(paths);
    }
    for item in fs::read_dir(dir)? {
        let path = item?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(&wanted)
        {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// The newest snapshot in `dir`: its meta, its path and its size. Reads only the meta line.
pub fn newest(dir: &Path) -> anyhow::Result<Option<(SnapshotMeta, PathBuf, u64)>> {
    let Some(path) = list(dir)?.pop() else {
        return Ok(None);
    };
    let file = File::open(&path)?;
    let bytes = file.metadata()?.len();
    let mut header = String::new();
    BufReader::new(file).read_line(&mut header)?;
    let meta: SnapshotMeta = serde_json::from_str(header.trim_end())?;
    Ok(Some((meta, path, bytes)))
}

/// Splits a whole snapshot file (as read, or as received from the leader) into its meta and
/// its body.
pub fn split(data: &[u8]) -> anyhow::Result<(SnapshotMeta, &[u8])> {
    let end = data
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| anyhow::anyhow!("a snapshot file without its meta line"))?;
    Ok((serde_json::from_slice(&data[..end])?, &data[end + 1..]))
}

/// The body of a snapshot received from the leader. A leader of this release sends its whole
/// file, meta line first; one of the release before (format 2) sent the bare JSON body, so
/// a node upgraded ahead of its leader still installs what that leader sends. (The other
/// way round does not work: upgrade the leader last.)
pub fn received_body(data: &[u8]) -> anyhow::Result<&[u8]> {
    if data.starts_with(br#"{"format_version""#) {
        return Ok(data);
    }
    Ok(split(data)?.1)
}

/// Reads and decodes a snapshot file.
pub fn load(path: &Path) -> anyhow::Result<(SnapshotMeta, State)> {
    let data = fs::read(path)?;
    let (meta, body) = split(&data)?;
    Ok((meta, decode_state(body)?))
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
        let error = decode_state(&postcard::to_allocvec(&(4u32, 0u8)).expect("encode"))
            .expect_err("refused");
        assert!(error.to_string().contains("snapshot format 4"), "{error}");
    }

    /// A node upgraded in place loads the JSON snapshot the release before wrote, and still
    /// answers a retry of a request that snapshot remembers with the original reply.
    #[test]
    fn a_format_2_snapshot_loads_with_its_exactly_once_records() {
        let mut state = State::default();
        let op = AcquireOp {
            resource: "r".into(),
            holder: "h".into(),
            ttl_ms: Some(30_000),
            mode: Mode::Exclusive,
            units: 0,
            metadata: Default::default(),
            idempotency_key: None,
            wait_ms: None,
        };
        entry(&mut state, 1, Op::Acquire(op.clone()));
        let mut json = serde_json::to_value(&state).expect("json");
        let reply = crate::lease::Reply::Cancelled {
            cancelled: true,
            revision: 1,
        };
        // The format-2 key: the principal's length, a colon, the principal, the request_id.
        json["dedup"] = serde_json::json!({
            "entries": {"2:ppreq-1": {"op": Op::Acquire(op.clone()), "reply": reply, "at_ms": 1}},
            "order": [[1, "2:ppreq-1"]],
        });
        let data = serde_json::to_vec(&serde_json::json!({"format_version": 2, "state": json}))
            .expect("encode");
        // What a leader of the release before sends: the bare body, no meta line.
        let body = received_body(&data).expect("a bare format 2 body");
        let restored = decode_state(body).expect("decode");
        assert_eq!(restored.live_leases(), 1);
        let seen = restored
            .dedup
            .check("pp", "req-1", &Op::Acquire(op.clone()));
        assert!(matches!(seen, crate::lease::dedup::Seen::Retry(r) if r == reply));
        let other = Op::Acquire(AcquireOp {
            holder: "other".into(),
            ..op
        });
        let seen = restored.dedup.check("pp", "req-1", &other);
        assert!(matches!(seen, crate::lease::dedup::Seen::Conflict));
    }
}
