use super::*;
use crate::lease::dedup::{format_4_table, Kept, Seen};
use crate::lease::encoding::{CHECKSUM_SINCE, UNCHECKED_FORMAT};
use crate::lease::{
    apply, AcquireOp, Command, CreateOp, EntryMeta, LeaderKey, Mode, Op, Policy, Proposal, Stamp,
};

fn entry(state: &mut State, index: u64, op: Op) -> crate::lease::Reply {
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
    apply(state, EntryMeta { index, leader }, &command)
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

/// `h` acquires `r` exclusively for 30 s.
fn exclusive_acquire() -> AcquireOp {
    AcquireOp {
        resource: "r".into(),
        holder: "h".into(),
        ttl_ms: Some(30_000),
        mode: Mode::Exclusive,
        units: 0,
        metadata: Default::default(),
        idempotency_key: None,
        wait_ms: None,
    }
}

/// A snapshot file of a state with one lease, as a node writes it: its path and bytes.
fn written(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut state = State::default();
    entry(&mut state, 1, Op::Acquire(exclusive_acquire()));
    let mut writer = Writer::create(dir, meta_at(None, Default::default())).expect("create");
    writer.state(&state).expect("encode");
    writer.finish().expect("finish").keep(dir).expect("keep");
    let (_, path, _) = newest(dir).expect("list").expect("a snapshot");
    let bytes = fs::read(&path).expect("read");
    (path, bytes)
}

#[test]
fn a_snapshot_with_one_flipped_byte_is_refused_on_load() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, bytes) = written(dir.path());
    let (_, state) = load(&path).expect("an intact file loads");
    assert_eq!(state.live_leases(), 1);
    let body_start = bytes.iter().position(|b| *b == b'\n').expect("meta line") + 1;
    for at in [
        10,
        body_start + 1,
        bytes.len() / 2,
        bytes.len() - 40,
        bytes.len() - 1,
    ] {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x01;
        fs::write(&path, &damaged).expect("write");
        assert!(
            load(&path).is_err(),
            "byte {at} of {} flipped, loaded",
            bytes.len()
        );
    }
}

#[test]
fn a_snapshot_is_checked_chunk_by_chunk_before_it_is_installed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, bytes) = written(dir.path());
    let feed = |data: &[u8], chunk: usize| {
        let mut check = ChunkCheck::default();
        let mut offset = 0;
        let mut verdict = Ok(());
        for piece in data.chunks(chunk) {
            let done = offset + piece.len() == data.len();
            verdict = check.chunk("s1", offset as u64, piece, done);
            if done {
                // The last chunk sent again gets the same answer.
                assert_eq!(check.chunk("s1", offset as u64, piece, true), verdict);
            }
            offset += piece.len();
        }
        verdict
    };
    for chunk in [1, 7, 33, bytes.len()] {
        assert_eq!(feed(&bytes, chunk), Ok(()), "chunks of {chunk}");
    }
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    for chunk in [1, 7, 33, bytes.len()] {
        let refused = feed(&damaged, chunk).expect_err("a flipped byte");
        assert!(refused.contains("checksum"), "{refused}");
    }
    // A file of the format before checksums passes unchecked (a node upgraded in place).
    let (meta, body) = split(&bytes).expect("split");
    let state = decode_state(&body[..body.len() - CHECKSUM_BYTES]).expect("decode");
    let mut older = serde_json::to_vec(&meta).expect("meta");
    older.push(b'\n');
    let no_records = format_4_table(&[]);
    older.extend(state.format_4_body(UNCHECKED_FORMAT, &no_records));
    assert_eq!(feed(&older, 16), Ok(()));
    let (_, older_body) = checked(&older).expect("format 3 reads");
    assert_eq!(decode_state(older_body).expect("decode"), state);
}

#[test]
fn an_older_format_is_refused_by_name() {
    let error = decode_state(br#"{"format_version":1,"state":{}}"#).expect_err("refused");
    assert!(error.to_string().contains("snapshot format 1"), "{error}");
    let error =
        decode_state(&postcard::to_allocvec(&(11u32, 0u8)).expect("encode")).expect_err("refused");
    assert!(error.to_string().contains("snapshot format 11"), "{error}");
}

/// A node upgraded in place loads the format-5 snapshot the release before sessions wrote:
/// its leases, waiters, history, exactly-once records and quota settings as they were.
#[test]
fn a_format_5_snapshot_loads_as_it_was() {
    let mut state = State::default();
    let op = exclusive_acquire();
    entry(&mut state, 1, Op::Acquire(op.clone()));
    entry(
        &mut state,
        2,
        Op::Acquire(AcquireOp {
            holder: "second".into(),
            wait_ms: Some(60_000),
            ..op.clone()
        }),
    );
    entry(
        &mut state,
        3,
        Op::SetQuota(crate::lease::command::SetQuotaOp {
            principal: Some("pp".into()),
            changes: vec![(crate::lease::quota::Quota::Leases, Some(7))],
        }),
    );
    let restored = decode_state(&state.format_5_body()).expect("format 5 reads");
    assert_eq!(restored, state);
    assert_eq!(restored.waiters(), 1);
    assert_eq!(
        restored
            .quotas()
            .limits("pp")
            .get(crate::lease::quota::Quota::Leases),
        7
    );
}

/// A node upgraded in place loads the format-6 snapshot the release before multi-waits wrote:
/// its sessions, the leases and waits on them, as they were.
#[test]
fn a_format_6_snapshot_loads_as_it_was() {
    use crate::lease::command::{CreateSessionOp, SessionAcquireOp};
    let mut state = State::default();
    entry(
        &mut state,
        1,
        Op::CreateSession(CreateSessionOp {
            holder: "first".into(),
            ttl_ms: Some(10_000),
            metadata: Default::default(),
        }),
    );
    let op = exclusive_acquire();
    let on_session = |acquire: AcquireOp| {
        Op::AcquireOnSession(SessionAcquireOp {
            session_id: "ses_1".into(),
            acquire: AcquireOp {
                holder: "first".into(),
                ttl_ms: None,
                ..acquire
            },
        })
    };
    entry(&mut state, 2, on_session(op.clone()));
    entry(
        &mut state,
        3,
        Op::Acquire(AcquireOp {
            holder: "second".into(),
            wait_ms: Some(60_000),
            ..op.clone()
        }),
    );
    let restored = decode_state(&state.format_6_body()).expect("format 6 reads");
    assert_eq!(restored, state);
    assert_eq!(restored.waiters(), 1);
    assert_eq!(restored.live_leases(), 1);
}

/// A node upgraded in place loads the JSON snapshot the release before wrote, and still
/// answers a retry of a request that snapshot remembers with the original reply.
#[test]
fn a_format_2_snapshot_loads_with_its_exactly_once_records() {
    let mut state = State::default();
    let op = exclusive_acquire();
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
        .dedup()
        .check("pp", "req-1", &Op::Acquire(op.clone()));
    assert!(matches!(seen, Seen::Retry(Kept::Reply(r)) if r == reply));
    let other = Op::Acquire(AcquireOp {
        holder: "other".into(),
        ..op
    });
    let seen = restored.dedup().check("pp", "req-1", &other);
    assert!(matches!(seen, Seen::Conflict));
}

/// A format-4 snapshot's registrations and bookings read into the current forms: a
/// registered resource stays bookable (every resource was) and its bookings keep denying
/// renewals as they did; the ad-hoc default is not bookable.
#[test]
fn a_format_4_snapshot_keeps_its_policies_and_bookings_as_they_were() {
    let mut state = State::default();
    entry(
        &mut state,
        1,
        Op::CreateResource(CreateOp {
            name: Some("room".into()),
            policy: Policy {
                bookable: true,
                ..Policy::registered()
            },
        }),
    );
    let book = crate::lease::BookOp {
        resource: "room".into(),
        holder: "h".into(),
        start_wall_ms: 1_700_000_100_000,
        duration_ms: 60_000,
        ad_hoc_bookable: false,
    };
    assert!(matches!(
        entry(&mut state, 2, Op::Book(book)),
        crate::lease::Reply::Booking(_)
    ));
    let body = state.format_4_body(CHECKSUM_SINCE, &format_4_table(&[]));
    let restored = decode_state(&body).expect("decode");
    let view = restored.resource_view("room");
    assert!(view.policy.bookable);
    assert_eq!(view.policy.max_holders, 0);
    assert_eq!(view.bookings.len(), 1);
    assert!(
        view.bookings[0].denies_earlier_leases,
        "a booking of before keeps its rule"
    );
    assert!(!restored.resource_view("adhoc").policy.bookable);
}

/// A node upgraded in place loads the format-4 snapshot the release before wrote: its
/// exactly-once records slimmed (no metadata kept), a retry still answered in full, and
/// the records counted in the table's bytes.
#[test]
fn a_format_4_snapshot_loads_with_its_records_slimmed() {
    let mut state = State::default();
    let op = AcquireOp {
        metadata: [("k".to_string(), "v".repeat(4000))].into(),
        ..exclusive_acquire()
    };
    let reply = entry(&mut state, 1, Op::Acquire(op.clone()));
    let acquire = Op::Acquire(op);
    let table = format_4_table(&[("p", "r1", &acquire, &reply, 1)]);
    let mut data = serde_json::to_vec(&meta_at(None, Default::default())).expect("meta");
    data.push(b'\n');
    data.extend(state.format_4_body(CHECKSUM_SINCE, &table));
    let checksum: [u8; 32] = Sha256::digest(&data).into();
    data.extend(checksum);
    let (_, body) = checked(&data).expect("a format 4 file with its checksum");
    let restored = decode_state(body).expect("decode");
    assert_eq!(restored.dedup().len(), 1);
    assert!(
        restored.dedup().bytes() < 400,
        "{} bytes",
        restored.dedup().bytes()
    );
    match restored.dedup().check("p", "r1", &acquire) {
        Seen::Retry(kept) => assert_eq!(restored.rebuild(kept, &acquire), reply),
        _ => panic!("the record was lost"),
    }
}
