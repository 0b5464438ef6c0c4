//! SPEC §4.26 (rules versions) and the renew that replaces metadata they brought (§4.3): a
//! command of a version the state has not reached is refused by apply, the raise never goes
//! down, a snapshot carries the version in the format the cluster's rules allow, and the
//! metadata a renew sets is bounded, counted and shown.

use super::quotas::{over_quota, recount_agrees, set, usage};
use super::*;
use crate::command::RenewMetadataOp;
use crate::encoding::{decode_state, encode_state};
use crate::history::EventKind;
use crate::quota::{Quota, METADATA_ENTRY_BYTES};
use std::collections::BTreeMap;

fn renew_setting(view: &LeaseView, metadata: &[(&str, &str)]) -> Op {
    Op::RenewWithMetadata(RenewMetadataOp {
        renew: renew_of(view, None),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    })
}

/// The leader's own principal: only its entries raise the rules.
const LEADER_ITSELF: Caller = Caller {
    principal: crate::command::SYSTEM,
    admin: true,
};

pub(super) fn raise(log: &mut Log, to: u32) {
    let reply = log.propose(LEADER_ITSELF, Op::RaiseRules { to });
    assert!(matches!(reply, Reply::Reclaimed(_)), "{reply:?}");
}

#[test]
fn s4_26_a_command_of_rules_not_reached_is_refused_by_apply_and_taken_after_the_raise() {
    let mut log = Log::new();
    assert_eq!(log.state.rules(), crate::rules::FIRST);
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    let refused = log.propose(ALICE, renew_setting(&a, &[("k", "v")]));
    assert_eq!(invalid_field(&refused), "op");
    assert!(a.lease.metadata.is_empty(), "nothing changed");
    // Not even an admin raises the rules: only the leader's own entry does.
    let by_admin = log.propose(ROOT, Op::RaiseRules { to: 2 });
    assert!(
        matches!(rejection(&by_admin), Rejection::InsufficientPermissions(_)),
        "{by_admin:?}"
    );
    assert_eq!(log.state.rules(), 1);
    raise(&mut log, 2);
    assert_eq!(log.state.rules(), 2);
    raise(&mut log, 1);
    assert_eq!(log.state.rules(), 2, "never down");
    let renewed = lease(&log.propose(ALICE, renew_setting(&a, &[("k", "v")])));
    assert_eq!(
        renewed.lease.metadata.get("k").map(String::as_str),
        Some("v")
    );
}

#[test]
fn s4_26_a_snapshot_is_written_in_the_format_the_rules_allow_and_keeps_them() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq("r", "a")));
    // Rules 1: format 7, which a 0.1.0 node reads (its reader is the plain state after it).
    let body = encode_state(&log.state.snapshot_copy()).expect("encode");
    let (format, rest) = postcard::take_from_bytes::<u32>(&body).expect("format");
    assert_eq!(format, 7);
    let as_0_1_0: State = postcard::from_bytes(rest).expect("0.1.0 reads format 7");
    assert_eq!(as_0_1_0.restored().live_leases(), 1);
    assert_eq!(decode_state(&body).expect("decode").rules(), 1);
    raise(&mut log, 2);
    let (format, restored) = written(&log);
    assert_eq!(format, 8);
    assert_eq!(restored.rules(), 2);
    assert_eq!(restored.live_leases(), 1);
    // Rules 3: format 9, the live state and the archive's entries as they are.
    raise(&mut log, 3);
    let (format, restored) = written(&log);
    assert_eq!(format, 9);
    assert_eq!(restored.rules(), 3);
    assert_eq!(restored, log.state);
    // Rules 4: format 10, which carries the open chunk of idle resources' values.
    raise(&mut log, 4);
    let (format, restored) = written(&log);
    assert_eq!(format, 10);
    assert_eq!(restored.rules(), 4);
    assert_eq!(restored, log.state);
}

/// The format of the snapshot `log`'s state is written in, and the state read back.
fn written(log: &Log) -> (u32, State) {
    let body = encode_state(&log.state.snapshot_copy()).expect("encode");
    let (format, _) = postcard::take_from_bytes::<u32>(&body).expect("format");
    (format, decode_state(&body).expect("decode"))
}

#[test]
fn s4_3_a_renew_replaces_metadata_within_bounds_and_its_principals_quota() {
    let mut log = Log::new();
    raise(&mut log, 2);
    let mut op = acq("r", "a");
    op.metadata = BTreeMap::from([("old".to_string(), "x".repeat(100))]);
    let a = granted(&log.acquire(ALICE, op));
    let before = usage(&log, "alice", Quota::MetadataBytes);
    assert_eq!(before, 3 + 100 + METADATA_ENTRY_BYTES);
    let renewed = lease(&log.propose(ALICE, renew_setting(&a, &[("addr", "10.0.0.7:80")])));
    assert_eq!(renewed.lease.fencing_token, a.lease.fencing_token);
    assert_eq!(
        renewed.lease.metadata.iter().collect::<Vec<_>>(),
        vec![(&"addr".to_string(), &"10.0.0.7:80".to_string())]
    );
    assert_eq!(
        usage(&log, "alice", Quota::MetadataBytes),
        4 + 11 + METADATA_ENTRY_BYTES
    );
    let event = log.events("r").pop().expect("an event");
    assert_eq!(event.kind, EventKind::Renewed);
    assert_eq!(
        event.metadata.get("addr").map(String::as_str),
        Some("10.0.0.7:80")
    );
    // The same metadata again: a plain renewed event, no bytes of metadata in the history.
    lease(&log.propose(ALICE, renew_setting(&a, &[("addr", "10.0.0.7:80")])));
    let event = log.events("r").pop().expect("an event");
    assert_eq!(event.kind, EventKind::Renewed);
    assert!(event.metadata.is_empty());
    // Over the quota: refused, nothing changed.
    set(&mut log, Some("alice"), Quota::MetadataBytes, Some(200));
    let big = "y".repeat(300);
    over_quota(
        &log.propose(ALICE, renew_setting(&a, &[("big", &big)])),
        Quota::MetadataBytes,
    );
    // Over the policy's bound: invalid, before the lease is looked up.
    let huge = "z".repeat(17 * 1024);
    assert_eq!(
        invalid_field(&log.propose(ALICE, renew_setting(&a, &[("huge", &huge)]))),
        "metadata"
    );
    // Empty clears it, and frees the quota.
    let cleared = lease(&log.propose(ALICE, renew_setting(&a, &[])));
    assert!(cleared.lease.metadata.is_empty());
    assert_eq!(usage(&log, "alice", Quota::MetadataBytes), 0);
    recount_agrees(&log);
    // A plain renew keeps what is there.
    let set_again = lease(&log.propose(ALICE, renew_setting(&a, &[("k", "v")])));
    let plain = lease(&log.renew(ALICE, renew_of(&set_again, None)));
    assert_eq!(plain.lease.metadata.get("k").map(String::as_str), Some("v"));
    recount_agrees(&log);
}

/// An archive entry in a format-9 or 10 body: its space's tag, key and value.
type Entry = (u8, Vec<u8>, Vec<u8>);

/// A format-9 or 10 body: where its live section (and in 10 the open chunk after it) ends,
/// and each archive entry after it.
fn entries_of(body: &[u8]) -> (usize, Vec<Entry>) {
    let ((format, _), rest) = postcard::take_from_bytes::<(u32, u32)>(body).expect("header");
    let (_, mut rest) =
        postcard::take_from_bytes::<crate::machine::LiveLoaded>(rest).expect("live section");
    if format == 10 {
        rest = postcard::take_from_bytes::<Vec<&[u8]>>(rest)
            .expect("open chunk")
            .1;
    }
    let live_end = body.len() - rest.len();
    let mut entries = Vec::new();
    loop {
        let (entry, after) =
            postcard::take_from_bytes::<Option<(u8, &[u8], &[u8])>>(rest).expect("an entry");
        rest = after;
        match entry {
            Some((tag, key, value)) => entries.push((tag, key.to_vec(), value.to_vec())),
            None => return (live_end, entries),
        }
    }
}

fn body_of(live: &[u8], entries: &[Entry]) -> Vec<u8> {
    let mut body = live.to_vec();
    for (tag, key, value) in entries {
        let entry = (*tag, key.as_slice(), value.as_slice());
        body.extend(postcard::to_allocvec(&Some(entry)).expect("encode"));
    }
    body.extend(postcard::to_allocvec(&None::<(u8, &[u8], &[u8])>).expect("encode"));
    body
}

#[test]
fn s4_26_format_9_carries_the_archive_as_it_is_and_the_restored_state_goes_on_the_same() {
    carries_the_archive_as_it_is(3, [1, 3, 4]);
}

/// The same in format 10 (rules version 4): idle resources' values in chunks (space 5).
#[test]
fn s4_26_format_10_carries_the_archive_as_it_is_and_the_restored_state_goes_on_the_same() {
    carries_the_archive_as_it_is(4, [1, 3, 5]);
}

/// A snapshot at `rules` (3 or 4) carries entries of the spaces `tags`, read back whole and
/// refused when one is missing, damaged or followed by more bytes.
fn carries_the_archive_as_it_is(rules: u32, tags: [u8; 3]) {
    let mut log = Log::new();
    raise(&mut log, rules);
    // Lock cycles on fresh names, each with a request id: exactly-once chunks, event chunks
    // and idle resources gone cold, all in the archive.
    let mut first = None;
    for n in 0..200 {
        let op = Op::Acquire(acq(&format!("job/{n}"), "a"));
        let reply = log.propose_with(ALICE, Some(format!("acq-{n}")), op.clone());
        let view = granted(&reply);
        first.get_or_insert((op, reply));
        let release = Op::Release(release_of(&view));
        lease(&log.propose_with(ALICE, Some(format!("rel-{n}")), release));
    }
    granted(&log.acquire(BOB, acq("held", "b")));
    let body = encode_state(&log.state.snapshot_copy()).expect("encode");
    let (live_end, entries) = entries_of(&body);
    for tag in tags {
        assert!(
            entries.iter().any(|(t, ..)| *t == tag),
            "entries of space {tag}: {:?}",
            entries.iter().map(|e| e.0).collect::<Vec<_>>()
        );
    }
    assert_eq!(decode_state(&body).expect("decode"), log.state);

    // The restored state (the harness restores through format 9) answers and applies as the
    // original would: a retry of the first request (its record in a written chunk, found
    // through the index built again), a cold resource used again with its history.
    log.restore_from_snapshot();
    let (op, reply) = first.expect("a first acquire");
    assert_eq!(log.propose_with(ALICE, Some("acq-0".into()), op), reply);
    let again =
        granted(&log.propose_with(ALICE, Some("again".into()), Op::Acquire(acq("job/3", "c"))));
    assert_eq!(again.lease.fencing_token, log.index);
    let kinds: Vec<EventKind> = log.events("job/3").iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Acquired,
            EventKind::Released,
            EventKind::Acquired
        ]
    );
    log.restore_from_snapshot();

    // A body that lost an entry its state reads, or has bytes after its end, is refused.
    let live = &body[..live_end];
    let without = body_of(live, &entries[1..]);
    let error = decode_state(&without).expect_err("an entry is missing");
    assert!(
        error.to_string().contains("is not in the snapshot"),
        "{error}"
    );
    // Or one whose entry of any space does not decode as what it stands for.
    for tag in tags {
        let mut damaged = entries.clone();
        let at = damaged.iter().position(|e| e.0 == tag).expect("an entry");
        damaged[at].2 = vec![0xff; 3];
        let error = decode_state(&body_of(live, &damaged)).expect_err("does not decode");
        assert!(error.to_string().contains("does not decode"), "{error}");
    }
    if rules >= crate::rules::COLD_CHUNKS {
        // A chunk whose slot a stub names is empty; a body whose rules do not write its format.
        let mut emptied = entries.clone();
        let at = emptied.iter().position(|e| e.0 == 5).expect("a chunk");
        let slots: Vec<&[u8]> = postcard::from_bytes(&emptied[at].2).expect("slots");
        let mut slots: Vec<Vec<u8>> = slots.iter().map(|s| s.to_vec()).collect();
        slots[0].clear();
        emptied[at].2 = postcard::to_allocvec(&slots).expect("encode");
        let error = decode_state(&body_of(live, &emptied)).expect_err("a named slot empty");
        assert!(error.to_string().contains("does not decode"), "{error}");
        let mut at_3 = body.clone();
        assert_eq!(at_3[..2], [10, 4], "format 10 at rules 4");
        at_3[1] = 3;
        let error = decode_state(&at_3).expect_err("format 10 at rules 3");
        assert!(
            error.to_string().contains("which writes format 9"),
            "{error}"
        );
    }
    let mut longer = body_of(live, &entries);
    assert_eq!(longer, body);
    longer.push(0);
    let error = decode_state(&longer).expect_err("trailing bytes");
    assert!(
        error.to_string().contains("after the snapshot's end"),
        "{error}"
    );
}

/// §4.26: a node whose snapshot is the live state over its own archive may stop before it
/// removed what older states forgot; at its next start those strays (below the state's next
/// numbers, read by nothing) leave the archive, and nothing the state reads does, nor what
/// apply writes again from those numbers on.
#[test]
fn s4_26_strays_leave_the_archive_and_nothing_the_state_reads_does() {
    use crate::archive::{chunk_key, Space};
    let mut log = Log::new();
    raise(&mut log, 3);
    for n in 0..100 {
        let op = Op::Acquire(acq(&format!("job/{n}"), "a"));
        let view = granted(&log.propose_with(ALICE, Some(format!("acq-{n}")), op));
        let release = Op::Release(release_of(&view));
        lease(&log.propose_with(ALICE, Some(format!("rel-{n}")), release));
    }
    // A cold resource used again (its old value forgotten), and the window passed (every
    // exactly-once chunk forgotten); nothing removes what was forgotten here.
    granted(&log.acquire(BOB, acq("job/3", "b")));
    log.elapse(11 * 60 * 1000);
    log.tick();
    let archive = log.state.dedup().archive_shared();
    let spaces = [Space::ExactlyOnce, Space::Events, Space::Cold];
    let count = |space| {
        let mut n = 0;
        let all = std::ops::Bound::Unbounded;
        archive.scan(space, all, all, false, &mut |_, _| {
            n += 1;
            true
        });
        n
    };
    let held = spaces.map(count);
    let mut read = [0; 3];
    log.state
        .each_archived(&mut |space, _, _| {
            read[spaces.iter().position(|s| *s == space).expect("a space")] += 1;
            true
        })
        .expect("all there");
    assert!(held[0] > read[0] && held[2] > read[2], "{held:?} {read:?}");
    for space in spaces {
        archive.insert(space, &chunk_key(u64::MAX), b"written again by apply");
    }
    let strays: usize = (0..3).map(|i| held[i] - read[i]).sum();
    assert_eq!(log.state.remove_strays().expect("none lost"), strays);
    for (i, space) in spaces.into_iter().enumerate() {
        assert_eq!(count(space), read[i] + 1, "{space:?}");
        assert!(archive.get(space, &chunk_key(u64::MAX)).is_some());
        archive.remove(space, &chunk_key(u64::MAX));
    }
    assert_eq!(log.state.remove_strays().expect("none lost"), 0);
    // An entry the state reads that the archive lost is found.
    let mut first = None;
    log.state
        .each_archived(&mut |space, key, _| {
            first = Some((space, key.to_vec()));
            false
        })
        .expect("all there");
    let (space, key) = first.expect("an entry");
    let value = archive.get(space, &key).expect("there");
    archive.remove(space, &key);
    let lost = log.state.remove_strays().expect_err("lost").to_string();
    assert!(lost.contains("is not in the snapshot"), "{lost}");
    archive.insert(space, &key, &value);
    let body = encode_state(&log.state.snapshot_copy()).expect("every entry still there");
    assert_eq!(decode_state(&body).expect("decode"), log.state);
}

/// The archive entries of `space` in the archive `log`'s state keeps its idle resources in.
fn held(log: &Log, space: crate::archive::Space) -> Vec<u64> {
    let mut keys = Vec::new();
    let all = std::ops::Bound::Unbounded;
    let archive = log.state.cold.archive_shared();
    archive.scan(space, all, all, false, &mut |key, _| {
        keys.push(u64::from_be_bytes(key.try_into().expect("a number")));
        true
    });
    keys
}

/// An acquire and a release of `name`: it goes cold (and, if it was, comes back first).
fn cycle(log: &mut Log, name: &str) {
    let view = granted(&log.acquire(ALICE, acq(name, "a")));
    lease(&log.release(ALICE, release_of(&view)));
}

/// §4.26, rules version 4: idle resources' values go into chunks of 16 slots once the cluster
/// runs it, the open one on the heap and in the snapshot; those written before stay where
/// they are and are read, forgotten and removed as before. A chunk is written once, when
/// full, and leaves only once every slot of it is forgotten.
#[test]
fn s4_26_idle_resources_go_into_chunks_from_rules_4() {
    use crate::archive::Space;
    let mut log = Log::new();
    raise(&mut log, 3);
    for n in 0..5 {
        cycle(&mut log, &format!("old/{n}"));
    }
    assert_eq!(held(&log, Space::Cold), [0, 1, 2, 3, 4]);
    raise(&mut log, 4);
    // Numbers 5 to 44: chunk 0 from its slot 5, chunk 1, and 13 slots of the open chunk 2.
    for n in 0..40 {
        cycle(&mut log, &format!("new/{n}"));
    }
    assert_eq!(held(&log, Space::Cold), [0, 1, 2, 3, 4], "old values stay");
    assert_eq!(held(&log, Space::ColdChunks), [0, 1]);
    assert_eq!(log.state.open_cold_chunk().len(), 13);
    log.restore_from_snapshot();
    // Each answers as it went cold: a value of its own, one in a written chunk, one in the
    // open chunk (carried by the snapshot).
    for name in ["old/1", "new/0", "new/20", "new/39"] {
        let kinds: Vec<EventKind> = log.events(name).iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Acquired, EventKind::Released], "{name}");
        assert!(log.state.cold.contains(name), "{name}");
    }
    // Used again, each is forgotten where it was and goes cold in a new slot; chunk 0 (11
    // slots named) stays until the last of them is forgotten.
    for n in 0..10 {
        cycle(&mut log, &format!("new/{n}"));
    }
    log.state.forgotten().remove();
    assert_eq!(
        held(&log, Space::ColdChunks),
        [0, 1, 2],
        "chunk 2 full, 0 still read"
    );
    cycle(&mut log, "new/10");
    cycle(&mut log, "old/2");
    log.state.forgotten().remove();
    assert_eq!(held(&log, Space::ColdChunks), [1, 2]);
    assert_eq!(held(&log, Space::Cold), [0, 1, 3, 4]);
    log.restore_from_snapshot();
    for (name, events) in [("old/2", 4), ("new/0", 4), ("new/10", 4), ("new/39", 2)] {
        assert_eq!(log.events(name).len(), events, "{name}");
    }
    assert_eq!(log.state.remove_strays().expect("none lost"), 0);
    crate::testkit::invariants::check_event_log(&log.state, 0);
}
