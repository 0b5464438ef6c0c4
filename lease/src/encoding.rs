//! The state's encoding in snapshot bodies (what follows a snapshot file's meta line), in
//! every format a release may meet: this one's, written by the cluster's rules version, and
//! the older ones, read (their readers: `legacy`). The file around it (meta, checksum, names)
//! is the node's.

use std::io::Write;
use std::sync::Arc;

use crate::archive::{Archive, Bytes, MemArchive, Space};
use crate::dedup::Dedup;
use crate::machine::{MissingEntry, State, VisitEntry, Wanted};

/// 2: resources hold several leases, their registration and their history, JSON.
/// 3: postcard's binary encoding; exactly-once records hold digests.
/// 4: format 3, the file followed by its SHA-256.
/// 5: exactly-once records keep their principal and a slim reply; quotas; policies with
/// `bookable` and `max_holders`, bookings that need not deny earlier leases.
/// 6: sessions; events name the session of their lease; the `sessions` quota.
/// 7: multi-waits (`AcquireMany` with `WAIT`).
/// 8: the rules version (SPEC §4.26) before the state; written only once the cluster runs
/// rules 2, so that a snapshot sent to a member of 0.1.0 (format 7) is one it reads.
/// 9: the live state (what the heap holds: hot resources with where their events are, cold
/// resources' stubs, the event log's and the exactly-once table's own fields), then each
/// archive entry it reads as the archive holds it, then an end mark; written once the cluster
/// runs rules 3 (`machine::live`).
/// 10: format 9 with the open chunk of idle resources' values (its slots, as bytes) after the
/// live section; written once the cluster runs rules 4 (`rules::COLD_CHUNKS`).
/// Formats 2 to 9 are still read (2 and 3 without a checksum to check), so a node upgrades in
/// place.
const FORMAT_VERSION: u32 = 10;
/// The live state without the open chunk: what a cluster on rules 3 writes.
const FORMAT_LIVE: u32 = 9;
/// The format before the live state: what a cluster on rules 2 writes.
const FORMAT_BEFORE_LIVE: u32 = 8;
/// The format before the rules version: what a cluster still on rules 1 writes.
const FORMAT_BEFORE_RULES: u32 = 7;
/// The format before multi-waits.
const FORMAT_BEFORE_GROUPS: u32 = 6;
/// The format before sessions.
const FORMAT_BEFORE_SESSIONS: u32 = 5;
/// The first format with a checksum.
pub const CHECKSUM_SINCE: u32 = 4;
/// The format before the checksum, read as it is.
pub const UNCHECKED_FORMAT: u32 = 3;

/// The last format written as JSON; its body is `{"format_version": 2, "state": {..}}`.
const JSON_FORMAT: u32 = 2;

/// Writes a snapshot's body (what follows the meta line): the format version, then (format
/// 8) the rules version, then the state, in postcard's encoding. The format is the newest the
/// cluster's rules allow: every member reads it. Only the state's own fields are written;
/// the derived indexes are rebuilt on load.
pub fn encode_state_into<W: Write>(state: &State, out: W) -> anyhow::Result<W> {
    Ok(match state.rules() {
        crate::rules::FIRST => postcard::to_io(&(FORMAT_BEFORE_RULES, state), out)?,
        rules if rules < crate::rules::LIVE_SNAPSHOTS => {
            postcard::to_io(&(FORMAT_BEFORE_LIVE, rules, state), out)?
        }
        rules => encode_live(state, rules, out)?,
    })
}

/// An archive entry in a body of format 9 or 10: its space's tag, its key, its value.
type Entry<'a> = (u8, Bytes<'a>, Bytes<'a>);

/// The live format the cluster's `rules` write: 10 from rules 4, else 9.
fn live_format(rules: u32) -> u32 {
    match rules >= crate::rules::COLD_CHUNKS {
        true => FORMAT_VERSION,
        false => FORMAT_LIVE,
    }
}

/// Whether a body of format `version` is the live state (9 or 10).
fn is_live(version: u32) -> bool {
    version == FORMAT_LIVE || version == FORMAT_VERSION
}

/// The head of a body of format 9 or 10 (as `rules` write): the format and rules versions,
/// the live section, and in format 10 the open chunk of cold values.
fn write_live_head<W: Write>(state: &State, rules: u32, out: W) -> anyhow::Result<W> {
    let format = live_format(rules);
    let out = postcard::to_io(&(format, rules, state.live()), out)?;
    if format == FORMAT_LIVE {
        return Ok(out);
    }
    let open: Vec<Bytes<'_>> = state.open_cold_chunk().iter().map(|s| Bytes(s)).collect();
    Ok(postcard::to_io(&open, out)?)
}

/// Format 9 or 10: the live state, each archive entry it reads (`Some`), then `None`.
fn encode_live<W: Write>(state: &State, rules: u32, out: W) -> anyhow::Result<W> {
    let out = write_live_head(state, rules, out)?;
    let out = write_entries(out, |visit| state.each_archived(visit))?;
    Ok(postcard::to_io(&None::<Entry<'_>>, out)?)
}

/// Writes each archive entry `each` visits as an entry of format 9 or 10 (`Some`).
fn write_entries<W: Write>(
    mut out: W,
    each: impl FnOnce(VisitEntry<'_>) -> Result<(), MissingEntry>,
) -> anyhow::Result<W> {
    let mut failed = None;
    let archived = each(&mut |space, key, value| {
        let entry: Entry<'_> = (space.tag(), Bytes(key), Bytes(value));
        failed = postcard::to_io(&Some(entry), &mut out).err();
        failed.is_none()
    });
    if let Some(error) = failed {
        return Err(error.into());
    }
    // A state whose archive lost an entry it reads cannot be written whole.
    archived?;
    Ok(out)
}

/// Reads a body of format `version`, 9 or 10 (after its version): the archive entries it
/// carries go to `archive`, where the state reads them (with a node's own body,
/// [`encode_state_own`], they are there already: `own`).
fn decode_live(
    version: u32,
    body: &[u8],
    archive: Arc<dyn Archive>,
    own: bool,
) -> anyhow::Result<State> {
    let (rules, live, open) = read_live(version, body, archive.as_ref())?;
    State::from_live(live, open, rules, archive, own)
}

/// What a body of format 9 or 10 carries on the heap: the rules, the live section and the
/// open chunk's slots (none in format 9).
type LiveBody = (u32, crate::machine::LiveLoaded, Vec<Vec<u8>>);

/// The rules, the live section and the open chunk of a body of format `version` (after its
/// version), its archive entries put in `archive`: what [`decode_live`] indexes.
fn read_live(version: u32, body: &[u8], archive: &dyn Archive) -> anyhow::Result<LiveBody> {
    let (rules, body) = postcard::take_from_bytes::<u32>(body)?;
    anyhow::ensure!(
        version == live_format(rules),
        "snapshot format {version} at rules version {rules}, which writes format {}",
        live_format(rules)
    );
    let (live, mut rest) = postcard::take_from_bytes::<crate::machine::LiveLoaded>(body)?;
    let mut open = Vec::new();
    if version == FORMAT_VERSION {
        let (slots, after) = postcard::take_from_bytes::<Vec<Bytes<'_>>>(rest)?;
        open = slots.iter().map(|s| s.0.to_vec()).collect();
        rest = after;
    }
    loop {
        let (entry, after) = postcard::take_from_bytes::<Option<Entry<'_>>>(rest)?;
        rest = after;
        let Some((tag, key, value)) = entry else {
            break;
        };
        let space = Space::of_tag(tag)
            .ok_or_else(|| anyhow::anyhow!("snapshot entry of unknown space {tag}"))?;
        archive.insert(space, key.0, value.0);
    }
    anyhow::ensure!(
        rest.is_empty(),
        "{} bytes after the snapshot's end",
        rest.len()
    );
    Ok((rules, live, open))
}

/// [`decode_state_in`] of the bytes `body` of `data`, which go before the state read is
/// indexed: at a million leases that frees the file's ≈ 100 MB for the indexes' ≈ 100 MB,
/// where both would otherwise be fresh memory a restart faults in.
pub fn decode_state_in_owned(
    data: Vec<u8>,
    body: std::ops::Range<usize>,
    archive: Arc<dyn Archive>,
    own: bool,
) -> anyhow::Result<State> {
    let bytes = (data.get(body)).ok_or_else(|| anyhow::anyhow!("the body is not in the file"))?;
    let Some((version, rest)) = live_body(bytes) else {
        return decode_state_in(bytes, archive, own);
    };
    let (rules, live, open) = read_live(version, rest, archive.as_ref())?;
    drop(data);
    State::from_live(live, open, rules, archive, own)
}

/// Writes what a node keeps of `state` as its own snapshot. From rules version 3 that is the
/// live section of format 9 (10 from rules 4) alone, its entries left in the node's archive, where the state
/// reads them (returns true): the node keeps that archive durable with the body. Before, the
/// whole body of the format the rules write (false).
pub fn encode_state_own<W: Write>(state: &State, out: W) -> anyhow::Result<(W, bool)> {
    if state.rules() < crate::rules::LIVE_SNAPSHOTS {
        return Ok((encode_state_into(state, out)?, false));
    }
    let out = write_live_head(state, state.rules(), out)?;
    Ok((postcard::to_io(&None::<Entry<'_>>, out)?, true))
}

/// The whole body of a node's own snapshot `body` ([`encode_state_own`] from rules version 3:
/// the live section, then the end mark), the entries `wanted` names read from `archive`:
/// what is sent to another node.
pub fn encode_state_whole<W: Write>(
    body: &[u8],
    wanted: &Wanted,
    archive: &dyn Archive,
    out: W,
) -> anyhow::Result<W> {
    let own = live_body(body).is_some();
    let Some((&0, live)) = body.split_last().filter(|_| own) else {
        anyhow::bail!("not a node's own snapshot of format {FORMAT_LIVE} or {FORMAT_VERSION}");
    };
    let mut out = out;
    out.write_all(live)?;
    let mut out = write_entries(out, |visit| wanted.each(archive, visit))?;
    out.write_all(&[0])?;
    Ok(out)
}

/// The format version of a body of the live state (9 or 10), and what follows it.
fn live_body(data: &[u8]) -> Option<(u32, &[u8])> {
    postcard::take_from_bytes::<u32>(data)
        .ok()
        .filter(|(version, _)| is_live(*version))
}

/// [`decode_state`], the state reading what it archives from `archive` (empty, or holding
/// the entries of a node's own body: `own`).
pub fn decode_state_in(data: &[u8], archive: Arc<dyn Archive>, own: bool) -> anyhow::Result<State> {
    if let Some((version, body)) = live_body(data) {
        return decode_live(version, body, archive, own);
    }
    let mut state = decode_state(data)?;
    state.move_into_archive(archive);
    Ok(state)
}

/// The body in format 9 or 10 whatever the state's rules (tests, which check every state
/// they snapshot both ways).
#[cfg(any(test, feature = "testkit"))]
pub(crate) fn encode_state_live(state: &State) -> anyhow::Result<Vec<u8>> {
    encode_live(state, state.rules(), Vec::new())
}

/// The body in memory (tests and tools; a node writes it to the file directly).
pub fn encode_state(state: &State) -> anyhow::Result<Vec<u8>> {
    encode_state_into(state, Vec::new())
}

fn unreadable(version: u64) -> anyhow::Error {
    anyhow::anyhow!("snapshot format {version} is not readable by this release (reads {UNCHECKED_FORMAT} to {FORMAT_VERSION}, and {JSON_FORMAT})")
}

pub fn decode_state(data: &[u8]) -> anyhow::Result<State> {
    // A JSON body starts with `{`; a postcard body with the version, which is not 123.
    if data.first() == Some(&b'{') {
        return decode_json(data);
    }
    let (version, body) = postcard::take_from_bytes::<u32>(data)?;
    if is_live(version) {
        return decode_live(version, body, Arc::new(MemArchive::default()), false);
    }
    let (state, loaded) = crate::machine::decoding(|| -> anyhow::Result<State> {
        Ok(match version {
            FORMAT_BEFORE_LIVE => {
                let (rules, body) = postcard::take_from_bytes::<u32>(body)?;
                postcard::from_bytes::<State>(body)?.with_rules(rules)
            }
            FORMAT_BEFORE_RULES => postcard::from_bytes(body)?,
            FORMAT_BEFORE_GROUPS => State::from_format_6(body)?,
            FORMAT_BEFORE_SESSIONS => State::from_format_5(body)?,
            UNCHECKED_FORMAT | CHECKSUM_SINCE => State::from_format_4(body)?,
            _ => return Err(unreadable(version.into())),
        })
    });
    Ok(state?.restored_with(loaded))
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
    let (state, loaded) = crate::machine::decoding(|| serde_json::from_value::<State>(state));
    let mut state = state?;
    state.dedup = Dedup::from_format_2(dedup)?;
    Ok(state.restored_with(loaded))
}
