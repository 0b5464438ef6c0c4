//! The log's journal: what makes an append durable without a sled flush.
//!
//! sled 0.34's `flush` hands every write-out to its IO thread pool, whose queue wakes all of
//! its idle threads (seven) for each job: with a flush per append, that was ≈ 20 context
//! switches per append on every node and a third of a loaded 2-core machine's CPU. So an
//! append goes into sled's memory as before, and its encoded entries are written to the end
//! of a journal segment here and fdatasynced; sled is flushed only at a checkpoint, after
//! which the segments it covers are removed. Opening the log replays what the journal holds
//! beyond sled's durable state, in order, before anything reads it.
//!
//! A segment is a file `wal/<sequence>` of records: `[length u32][crc32 u32][payload]`, the
//! payload a kind byte, an index (u64), and for an entry its encoded bytes. A record that is
//! short or fails its checksum ends the newest segment (a write a power cut tore, never
//! acknowledged); anywhere else it is damage, and the log refuses to open.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A segment is closed (and a checkpoint begun) once it holds this much: ≈ a thousand
/// entries, so a checkpoint's sled flush is rare and a restart replays little.
#[cfg(not(feature = "fault-injection"))]
pub const SEGMENT_BYTES: u64 = 256 * 1024;
/// In the fault harness's builds, ≈ a hundred entries: its power cuts then land in every step
/// of checkpoints too, not only between them.
#[cfg(feature = "fault-injection")]
pub const SEGMENT_BYTES: u64 = 16 * 1024;

const HEADER: usize = 8;
const ENTRY: u8 = 1;
const TRUNCATE: u8 = 2;

/// One journaled change to the log, as replayed.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// The entry at `index`, in the log's encoding.
    Entry { index: u64, bytes: Vec<u8> },
    /// Every entry from `index` on was removed.
    TruncateFrom { index: u64 },
}

/// Appends the record of an entry at `index` to `out`.
pub fn encode_entry(out: &mut Vec<u8>, index: u64, bytes: &[u8]) {
    encode(out, ENTRY, index, bytes);
}

/// Appends the record of a truncation from `index` to `out`.
pub fn encode_truncate(out: &mut Vec<u8>, index: u64) {
    encode(out, TRUNCATE, index, &[]);
}

fn encode(out: &mut Vec<u8>, kind: u8, index: u64, bytes: &[u8]) {
    let index = index.to_le_bytes();
    // An entry is far below 4 GiB (a peer message is at most 256 MiB); one that was not would
    // read back as damaged, never as another entry.
    let length = u32::try_from(1 + index.len() + bytes.len()).unwrap_or(u32::MAX);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind]);
    crc.update(&index);
    crc.update(bytes);
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&index);
    out.extend_from_slice(bytes);
}

/// The records in `data` up to the first one that is short or damaged, and how many bytes
/// they take (all of `data` when none is).
fn decode(data: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let Some(header) = data.get(at..at + HEADER) else {
            return (records, at);
        };
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let Some(payload) = data.get(at + HEADER..at + HEADER + length) else {
            return (records, at);
        };
        if length < 9 || crc32fast::hash(payload) != crc {
            return (records, at);
        }
        let mut index = [0u8; 8];
        index.copy_from_slice(&payload[1..9]);
        let index = u64::from_le_bytes(index);
        records.push(match payload[0] {
            ENTRY => Record::Entry {
                index,
                bytes: payload[9..].to_vec(),
            },
            TRUNCATE => Record::TruncateFrom { index },
            _ => return (records, at),
        });
        at += HEADER + length;
    }
    (records, at)
}

/// The journal's open segment.
pub struct Wal {
    dir: PathBuf,
    sequence: u64,
    /// Shared with the log's flusher thread, which fdatasyncs it while appends go on.
    file: Arc<File>,
    bytes: u64,
    /// A write or sync failed: what follows could land after a torn record, so nothing more
    /// is taken (openraft stops the node on the error anyway).
    failed: bool,
}

/// What opening the journal found.
pub struct Opened {
    pub wal: Wal,
    /// The records of every segment, oldest first, for the caller to replay into sled.
    pub records: Vec<Record>,
    /// The segments they came from: removable once sled holds them durably.
    pub replayed_through: Option<u64>,
}

fn segment_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}"))
}

/// The sequence numbers of the segments in `dir`, oldest first.
fn segments(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        // Only names this module gave: 20 digits.
        let sequence = name
            .to_str()
            .filter(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(sequence) = sequence {
            found.push(sequence);
        }
    }
    found.sort_unstable();
    Ok(found)
}

impl Wal {
    /// Opens the journal under `dir` (created durably if missing): the records to replay,
    /// and a new, empty segment after them for what comes next.
    pub fn open(dir: &Path) -> anyhow::Result<Opened> {
        crate::store::create_dir_durably(dir)?;
        let found = segments(dir)?;
        let mut records = Vec::new();
        for (n, sequence) in found.iter().enumerate() {
            let path = segment_path(dir, *sequence);
            let mut data = Vec::new();
            File::open(&path)?.read_to_end(&mut data)?;
            let (read, whole) = decode(&data);
            records.extend(read);
            if whole == data.len() {
                continue;
            }
            // Only the newest segment may end torn: older ones were synced whole before the
            // next was begun. Its torn tail (never acknowledged) is cut off, so that it is
            // whole when a segment after it exists.
            anyhow::ensure!(
                n + 1 == found.len(),
                "the log's journal segment {} is damaged before its end",
                path.display()
            );
            let file = OpenOptions::new().write(true).open(&path)?;
            file.set_len(whole as u64)?;
            file.sync_all()?;
        }
        let replayed_through = found.last().copied();
        let wal = Wal::begin(dir, replayed_through.map_or(0, |s| s + 1))?;
        Ok(Opened {
            wal,
            records,
            replayed_through,
        })
    }

    /// Creates segment `sequence`, durably named.
    fn begin(dir: &Path, sequence: u64) -> std::io::Result<Wal> {
        // Truncated if there: a rotation that failed after creating it wrote nothing in it.
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(segment_path(dir, sequence))?;
        file.sync_all()?;
        crate::store::sync_dir(dir)?;
        Ok(Wal {
            dir: dir.to_path_buf(),
            sequence,
            file: Arc::new(file),
            bytes: 0,
            failed: false,
        })
    }

    /// Writes `records` (encoded) at the end of the open segment, to the OS.
    pub fn write(&mut self, records: &[u8]) -> std::io::Result<()> {
        self.healthy()?;
        self.failed = true;
        (&*self.file).write_all(records)?;
        self.bytes += records.len() as u64;
        self.failed = false;
        Ok(())
    }

    /// Makes what was written durable.
    pub fn sync(&mut self) -> std::io::Result<()> {
        self.healthy()?;
        self.failed = true;
        self.file.sync_data()?;
        self.failed = false;
        Ok(())
    }

    /// The open segment's file, for a thread to fdatasync without holding the journal (appends
    /// go on meanwhile). Records written before this call are in it or in a closed segment,
    /// which [`Wal::rotate`] synced whole. Refused once a write or sync failed: Linux reports a
    /// failed writeback to one fsync only, so a later one could succeed over lost pages.
    pub fn file(&self) -> std::io::Result<Arc<File>> {
        self.healthy()?;
        Ok(self.file.clone())
    }

    /// Whether every write and sync so far succeeded: a sync of [`Wal::file`] made by another
    /// thread counts only if this still holds after it.
    pub fn healthy(&self) -> std::io::Result<()> {
        if self.failed {
            return Err(std::io::Error::other("the log's journal failed earlier"));
        }
        Ok(())
    }

    /// A sync of [`Wal::file`] failed: nothing more is taken.
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// Whether the open segment is full: time to begin another and checkpoint.
    pub fn full(&self) -> bool {
        self.bytes >= SEGMENT_BYTES
    }

    /// Begins the next segment; the sequence of the one closed (synced whole).
    pub fn rotate(&mut self) -> std::io::Result<u64> {
        self.sync()?;
        let next = Wal::begin(&self.dir, self.sequence + 1)?;
        let closed = self.sequence;
        *self = next;
        Ok(closed)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Removes the segments up to `sequence` (sled holds what they journaled), oldest first and
/// each durably before the next: whatever a power cut leaves is the newest segments, never an
/// older one without those after it (whose replay could undo theirs).
pub fn remove_through(dir: &Path, sequence: u64) -> std::io::Result<()> {
    for old in segments(dir)?.into_iter().filter(|s| *s <= sequence) {
        std::fs::remove_file(segment_path(dir, old))?;
        crate::store::sync_dir(dir)?;
    }
    Ok(())
}

/// The newest segment's path (tests write into it as a crash would leave it).
#[cfg(test)]
pub fn segments_for_tests(dir: &Path) -> PathBuf {
    let newest = segments(dir).expect("list").pop().expect("a segment");
    segment_path(dir, newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a failed sync nothing more is taken, and no other thread gets the file to sync:
    /// a later fsync could succeed over the pages whose writeback failed.
    #[test]
    fn a_failed_journal_refuses_writes_syncs_and_its_file() {
        let dir = tempfile::tempdir().expect("dir");
        let mut wal = Wal::open(&dir.path().join("wal")).expect("open").wal;
        wal.write(b"x").expect("write");
        assert!(wal.file().is_ok() && wal.healthy().is_ok());
        wal.fail();
        assert!(wal.healthy().is_err());
        assert!(wal.file().is_err());
        assert!(wal.write(b"y").is_err());
        assert!(wal.sync().is_err());
    }

    #[test]
    fn records_read_back_and_a_torn_tail_ends_them() {
        let mut data = Vec::new();
        encode_entry(&mut data, 7, b"seven");
        encode_truncate(&mut data, 5);
        encode_entry(&mut data, 5, b"");
        let whole = decode(&data);
        assert_eq!(
            (whole.0, whole.1 == data.len()),
            (
                vec![
                    Record::Entry {
                        index: 7,
                        bytes: b"seven".to_vec()
                    },
                    Record::TruncateFrom { index: 5 },
                    Record::Entry {
                        index: 5,
                        bytes: Vec::new()
                    },
                ],
                true
            )
        );
        // Every cut short of the end keeps the records before it and reports the tear.
        for cut in 0..data.len() {
            let (records, whole) = decode(&data[..cut]);
            assert!(whole <= cut, "cut at {cut}");
            assert!(records.len() < 3);
            assert_eq!(decode(&data[..whole]).0, records, "cut at {cut}");
        }
        // A flipped byte in a payload fails its checksum.
        let mut flipped = data.clone();
        flipped[HEADER + 2] ^= 1;
        assert_eq!(decode(&flipped), (Vec::new(), 0));
    }

    #[test]
    fn a_reopened_journal_replays_every_segment_and_refuses_damage_before_the_newest() {
        let dir = tempfile::tempdir().expect("dir");
        let wal_dir = dir.path().join("wal");
        let opened = Wal::open(&wal_dir).expect("open");
        assert!(opened.records.is_empty());
        let mut wal = opened.wal;
        let mut one = Vec::new();
        encode_entry(&mut one, 1, b"a");
        wal.write(&one).expect("write");
        let closed = wal.rotate().expect("rotate");
        let mut two = Vec::new();
        encode_entry(&mut two, 2, b"b");
        wal.write(&two).expect("write");
        // A torn record at the end of the newest segment.
        wal.write(&two[..5]).expect("torn");
        wal.sync().expect("sync");
        // A name the journal never gives is not a segment.
        std::fs::write(wal_dir.join("5"), b"not a segment").expect("stray");
        drop(wal);
        let opened = Wal::open(&wal_dir).expect("reopen");
        assert_eq!(opened.records.len(), 2);
        assert_eq!(opened.replayed_through, Some(closed + 1));
        drop(opened);
        // The torn tail was cut off: with a newer segment after it, it opens again.
        assert_eq!(Wal::open(&wal_dir).expect("again").records.len(), 2);
        // Damage in a segment that is not the newest is refused.
        let first = segment_path(&wal_dir, closed);
        let mut data = std::fs::read(&first).expect("read");
        let last = data.len() - 1;
        data[last] ^= 1;
        std::fs::write(&first, data).expect("damage");
        assert!(Wal::open(&wal_dir).is_err());
        // Once sled holds them, the segments go.
        remove_through(&wal_dir, u64::MAX).expect("remove");
        assert!(Wal::open(&wal_dir).expect("empty").records.is_empty());
    }
}
