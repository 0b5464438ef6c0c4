//! Snapshot files: the serialized lease `State` at an applied index, with its openraft meta.
//!
//! Written to a temporary file, fsynced, renamed into place, then the directory is fsynced;
//! older snapshots are removed. The body carries a format version so a later release can read
//! an older snapshot. Since format 4 the file ends with the SHA-256 of all that precedes it
//! (the meta line and the body), checked when a node loads the file, when a follower installs
//! it ([`ChunkCheck`], before openraft sees the last chunk) and by `tenured restore`: a flipped
//! byte is refused, never applied.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::{LogId, StoredMembership, TypeConfig};
use crate::lease::encoding::CHECKSUM_SINCE;
pub use crate::lease::encoding::{
    decode_state, decode_state_in, decode_state_in_owned, encode_state, encode_state_into,
    encode_state_whole,
};
use crate::lease::State;

/// A snapshot's meta as files hold it (openraft 0.9's layout: with a snapshot id, which names
/// the file), also the meta of the chunked snapshot transfer between nodes.
pub type SnapshotMeta = openraft_legacy::network_v1::SnapshotMeta<TypeConfig>;

/// openraft's meta of a snapshot, without the id.
pub type RaftSnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;

/// The meta of a snapshot of the state applied through `last_log_id`, named after its term
/// and index.
pub fn meta_at(last_log_id: Option<LogId>, last_membership: StoredMembership) -> SnapshotMeta {
    let index = last_log_id.map_or(0, |id| id.index);
    let term = last_log_id.map_or(0, |id| id.leader_id.term);
    SnapshotMeta {
        last_log_id,
        last_membership,
        snapshot_id: format!("{term}-{index}"),
    }
}

/// The checksum's length at the end of a format-4 or later file.
const CHECKSUM_BYTES: usize = 32;
const PREFIX: &str = "snapshot-";

/// Writes a snapshot file: a line of JSON with openraft's meta, then the body. The body is
/// encoded straight into the file, so no copy of the state and no buffer as large as the
/// snapshot (300 bytes per lease) is ever held in memory.
pub struct Writer {
    meta: SnapshotMeta,
    tmp_path: PathBuf,
    file: Hashed<BufWriter<File>>,
}

/// A writer that hashes what goes through it.
struct Hashed<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for Hashed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Large writes: a snapshot body is written while apply waits (see `build_snapshot`).
const WRITE_BUFFER: usize = 1 << 20;

impl Writer {
    pub fn create(dir: &Path, meta: SnapshotMeta) -> anyhow::Result<Writer> {
        crate::store::create_dir_durably(dir)?;
        let tmp_path = dir.join(format!(".{}.tmp", file_name(&meta, None)));
        let mut file = Hashed {
            inner: BufWriter::with_capacity(WRITE_BUFFER, File::create(&tmp_path)?),
            hasher: Sha256::new(),
        };
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

    /// Encodes what the node keeps of `state` as the body ([`crate::lease::encoding::encode_state_own`]):
    /// from rules version 3 its live section alone. Returns whether the body reads the
    /// node's archive (then the file names its generation: [`Written::generation`]).
    pub fn own_state(&mut self, state: &State) -> anyhow::Result<bool> {
        let (_, reads_archive) = crate::lease::encoding::encode_state_own(state, &mut self.file)?;
        self.file.flush()?;
        Ok(reads_archive)
    }

    /// Appends the checksum and makes the file durable under its temporary name.
    pub fn finish(self) -> anyhow::Result<Written> {
        let Hashed { mut inner, hasher } = self.file;
        inner.write_all(&hasher.finalize())?;
        let file = inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let bytes = file.metadata()?.len();
        Ok(Written {
            meta: self.meta,
            tmp_path: self.tmp_path,
            bytes,
            generation: None,
        })
    }
}

/// The whole body of a node's own snapshot (`body`, its entries read from `archive`) as a
/// snapshot file in `file` (its meta line, the body, the checksum), read back from its start:
/// what is sent to another node, or kept as a backup.
pub(crate) fn whole_copy(
    file: File,
    meta: &SnapshotMeta,
    body: &[u8],
    wanted: &crate::lease::machine::Wanted,
    archive: &dyn crate::lease::archive::Archive,
) -> anyhow::Result<File> {
    let mut file = Hashed {
        inner: BufWriter::with_capacity(WRITE_BUFFER, file),
        hasher: Sha256::new(),
    };
    serde_json::to_writer(&mut file, meta)?;
    file.write_all(b"\n")?;
    let Hashed { mut inner, hasher } = encode_state_whole(body, wanted, archive, file)?;
    inner.write_all(&hasher.finalize())?;
    let mut file = inner.into_inner().map_err(|e| e.into_error())?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
    Ok(file)
}

/// A backup file: the whole snapshot through `meta`'s index, in `dir` (created), written
/// and fsynced under a temporary name, then named; older backups there are removed.
/// Returns its path and size.
pub(crate) fn write_backup(
    dir: &Path,
    meta: &SnapshotMeta,
    write: impl FnOnce(File) -> anyhow::Result<File>,
) -> anyhow::Result<(PathBuf, u64)> {
    crate::store::create_dir_durably(dir)?;
    let name = file_name(meta, None);
    let tmp_path = dir.join(format!(".{name}.tmp"));
    let file = write(
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp_path)?,
    )?;
    file.sync_all()?;
    let bytes = file.metadata()?.len();
    let written = Written {
        meta: meta.clone(),
        tmp_path,
        bytes,
        generation: None,
    };
    let path = dir.join(name);
    written.keep(dir)?;
    Ok((path, bytes))
}

/// A durable snapshot file not yet in place.
pub struct Written {
    pub meta: SnapshotMeta,
    tmp_path: PathBuf,
    pub bytes: u64,
    /// The archive generation the body reads (its entries are there, not in the file);
    /// named in the file's name. None: the file holds the whole state.
    pub generation: Option<u64>,
}

impl Written {
    /// Opens it for reading (still readable after `keep` renames or `discard` removes it).
    pub fn open(&self) -> std::io::Result<File> {
        File::open(&self.tmp_path)
    }

    /// Renames it into place and removes older snapshots. Callers serialize keeps.
    pub fn keep(self, dir: &Path) -> anyhow::Result<()> {
        let final_path = dir.join(file_name(&self.meta, self.generation));
        fs::rename(&self.tmp_path, &final_path)?;
        crate::store::sync_dir(dir)?;
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

/// What follows a file's name when its body reads the node's archive: the generation.
const READS_ARCHIVE: &str = ".archive-";

fn file_name(meta: &SnapshotMeta, generation: Option<u64>) -> String {
    let index = meta.last_log_id.map_or(0, |id| id.index);
    let reads = generation.map_or(String::new(), |g| format!("{READS_ARCHIVE}{g}"));
    format!("{PREFIX}{index:020}-{}{reads}", meta.snapshot_id)
}

/// The archive generation the snapshot file at `path` reads, if its body does not hold the
/// whole state.
pub(crate) fn generation(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let (_, number) = name.rsplit_once(READS_ARCHIVE)?;
    number.parse().ok()
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

/// Whether `body` (what follows the meta line) ends with a checksum: format 4 and later.
fn has_checksum(body: &[u8]) -> bool {
    body.first()
        .is_some_and(|version| u32::from(*version) >= CHECKSUM_SINCE && *version != b'{')
}

/// [`split`], after checking the checksum of a format that has one: the meta and the body
/// without it.
pub fn checked(data: &[u8]) -> anyhow::Result<(SnapshotMeta, &[u8])> {
    let (meta, body) = checked_range(data)?;
    Ok((meta, &data[body]))
}

/// [`checked`], the body given by where it is in `data`.
fn checked_range(data: &[u8]) -> anyhow::Result<(SnapshotMeta, std::ops::Range<usize>)> {
    let (meta, body) = split(data)?;
    let start = data.len() - body.len();
    if !has_checksum(body) {
        return Ok((meta, start..data.len()));
    }
    anyhow::ensure!(
        body.len() > CHECKSUM_BYTES,
        "the snapshot is cut short: no room for its checksum"
    );
    let (covered, checksum) = data.split_at(data.len() - CHECKSUM_BYTES);
    anyhow::ensure!(
        Sha256::digest(covered).as_slice() == checksum,
        "the snapshot's checksum does not match its contents: the file is damaged"
    );
    Ok((meta, start..data.len() - CHECKSUM_BYTES))
}

/// The body of a snapshot received from the leader, checked. A leader of this release sends
/// its whole file, meta line first; one of the release before (format 2) sent the bare JSON
/// body, so a node upgraded ahead of its leader still installs what that leader sends. (The
/// other way round does not work: upgrade the leader last.)
pub fn received_body(data: &[u8]) -> anyhow::Result<&[u8]> {
    if data.starts_with(br#"{"format_version""#) {
        return Ok(data);
    }
    Ok(checked(data)?.1)
}

/// Reads, checks and decodes a snapshot file that holds the whole state (a backup).
pub fn load(path: &Path) -> anyhow::Result<(SnapshotMeta, State)> {
    anyhow::ensure!(
        generation(path).is_none(),
        "{} is a node's own snapshot, whose history and exactly-once records stay in that node's archive: back up the file `tenure cluster snapshot --backup` writes",
        path.display()
    );
    let data = fs::read(path)?;
    let (meta, body) = checked(&data).with_context(|| format!("snapshot {}", path.display()))?;
    Ok((meta, decode_state(body)?))
}

/// Reads, checks and decodes a node's own newest snapshot file: its state reads what it
/// archives from `generation` (the file's, or a fresh one that the file's entries fill).
pub(crate) fn load_own(
    path: &Path,
    archive: std::sync::Arc<dyn crate::lease::archive::Archive>,
) -> anyhow::Result<(SnapshotMeta, State)> {
    let started = std::time::Instant::now();
    let data = fs::read(path)?;
    let read_ms = started.elapsed().as_millis();
    let (meta, body) =
        checked_range(&data).with_context(|| format!("snapshot {}", path.display()))?;
    // The file goes once its body is read (`decode_state_in_owned`).
    let bytes = data.len();
    let own = generation(path).is_some();
    let state = decode_state_in_owned(data, body, archive, own)?;
    tracing::info!(
        snapshot = %path.display(),
        bytes,
        read_ms,
        decoded_ms = started.elapsed().as_millis() - read_ms,
        "loaded the newest snapshot"
    );
    Ok((meta, state))
}

/// Checks a snapshot as it arrives in chunks, hashing each chunk as it comes, so that a
/// damaged file is refused before openraft installs it (an install that fails stops a node's
/// Raft). Only the hash and the last 32 bytes are kept, never the file.
#[derive(Default)]
pub struct ChunkCheck {
    snapshot_id: String,
    received: u64,
    hasher: Sha256,
    /// The last bytes seen, not yet hashed: the checksum, once the last chunk is in.
    held: Vec<u8>,
    /// The file's first byte after its meta line (the format version), once seen.
    format: Option<u8>,
    meta_line_done: bool,
    /// What the last chunk was found to be, for a resent last chunk.
    verdict: Option<Result<(), String>>,
}

impl ChunkCheck {
    /// Takes the chunk at `offset` of snapshot `snapshot_id`; for the last (`done`), whether
    /// the file's checksum matches. A chunk already seen (a resend) is not hashed again.
    pub fn chunk(
        &mut self,
        snapshot_id: &str,
        offset: u64,
        data: &[u8],
        done: bool,
    ) -> Result<(), String> {
        if offset == 0 || snapshot_id != self.snapshot_id {
            *self = ChunkCheck {
                snapshot_id: snapshot_id.to_string(),
                ..ChunkCheck::default()
            };
        }
        let end = offset + data.len() as u64;
        if end <= self.received {
            return match (done, &self.verdict) {
                (true, Some(verdict)) if end == self.received => verdict.clone(),
                _ => Ok(()),
            };
        }
        if offset != self.received {
            // Not the chunk that follows: openraft refuses it itself (the leader then starts
            // again from offset 0), so it is not this check's to refuse.
            *self = ChunkCheck::default();
            return Ok(());
        }
        self.received = end;
        if offset == 0 && data.starts_with(br#"{"format_version""#) {
            // A bare JSON body (format 2): no meta line, no checksum.
            self.format = Some(b'{');
        }
        for byte in data {
            if self.format.is_some() {
                break;
            }
            if self.meta_line_done {
                self.format = Some(*byte);
            } else if *byte == b'\n' {
                self.meta_line_done = true;
            }
        }
        self.held.extend_from_slice(data);
        if self.held.len() > CHECKSUM_BYTES {
            let cut = self.held.len() - CHECKSUM_BYTES;
            self.hasher.update(&self.held[..cut]);
            self.held.drain(..cut);
        }
        if !done {
            return Ok(());
        }
        let checksummed = self.format.is_some_and(|f| has_checksum(&[f]));
        let verdict = if !checksummed || self.hasher.clone().finalize().as_slice() == self.held {
            Ok(())
        } else {
            Err("the snapshot's checksum does not match its contents: refused".to_string())
        };
        self.verdict = Some(verdict.clone());
        verdict
    }
}

#[cfg(test)]
mod tests;
