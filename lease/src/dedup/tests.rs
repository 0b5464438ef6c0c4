use std::ops::Bound;
use std::sync::Arc;

use super::*;
use crate::archive::{Archive, MemArchive, Space};
use crate::command::ReleaseOp;
use crate::policy::DEDUP_WINDOW_MS;
use crate::types::Rejection;

fn release(holder: &str) -> Op {
    Op::Release(ReleaseOp {
        resource: "r".into(),
        lease_id: "lse_1_0".into(),
        holder: holder.into(),
        fencing_token: 1,
    })
}

fn remember(dedup: &mut Dedup, principal: &str, request_id: &str, op: &Op, reply: &Reply) {
    remember_at(dedup, principal, request_id, op, reply, 0);
}

fn remember_at(
    dedup: &mut Dedup,
    principal: &str,
    request_id: &str,
    op: &Op,
    reply: &Reply,
    at_ms: u64,
) {
    match dedup.check(principal, request_id, op) {
        Seen::New(ticket) => {
            dedup.remember(principal, ticket, reply, at_ms);
        }
        _ => panic!("{principal}/{request_id} was already remembered"),
    }
}

#[test]
fn a_retry_gets_the_original_reply_and_another_request_a_conflict() {
    let mut dedup = Dedup::default();
    let reply = Reply::Rejected(Rejection::invalid("ttl", "too long"));
    remember(&mut dedup, "alice", "req-1", &release("a"), &reply);
    assert!(matches!(
        dedup.check("alice", "req-1", &release("a")),
        Seen::Retry(Kept::Reply(r)) if r == reply
    ));
    assert!(matches!(
        dedup.check("alice", "req-1", &release("b")),
        Seen::Conflict
    ));
}

#[test]
fn keys_of_different_principals_or_splits_do_not_meet() {
    let mut dedup = Dedup::default();
    remember(&mut dedup, "ab", "c", &release("a"), &Reply::None);
    // Same concatenation, other split; other principal, same request_id.
    assert!(matches!(
        dedup.check("a", "bc", &release("a")),
        Seen::New(_)
    ));
    assert!(matches!(
        dedup.check("bob", "c", &release("a")),
        Seen::New(_)
    ));
}

#[test]
fn a_resolved_wait_answers_retries_with_its_outcome_and_the_window_forgets() {
    let mut dedup = Dedup::default();
    remember(&mut dedup, "p", "w", &release("a"), &Reply::None);
    let decided = Reply::Cancelled {
        cancelled: true,
        revision: 9,
    };
    let before = dedup.bytes();
    let (whose, change) = dedup.resolve("p", "w", &decided);
    assert_eq!(whose, "p");
    assert_eq!(dedup.bytes() as i64, before as i64 + change);
    assert!(matches!(
        dedup.check("p", "w", &release("a")),
        Seen::Retry(Kept::Reply(r)) if r == decided
    ));
    let mut freed = Vec::new();
    dedup.prune(DEDUP_WINDOW_MS - 1, |(p, n)| freed.push((p.to_string(), n)));
    assert_eq!(dedup.len(), 1);
    dedup.prune(DEDUP_WINDOW_MS, |(p, n)| freed.push((p.to_string(), n)));
    assert!(dedup.is_empty());
    assert_eq!(dedup.bytes(), 0);
    assert_eq!(freed, vec![("p".to_string(), -(before as i64 + change))]);
}

fn lease_view(metadata: BTreeMap<String, String>) -> crate::types::LeaseView {
    use crate::types::{Held, Lease, LeaseStatus, LeaseView, Mode};
    LeaseView {
        lease: Lease {
            resource: "r".into(),
            held: Held {
                position: 0,
                holder: "h".into(),
                principal: "p".into(),
                mode: Mode::Exclusive,
                units: 0,
                fencing_token: 1,
                acquired_at_ms: 0,
                expires_at_ms: 1,
                ttl_ms: 1,
                acquired_wall_ms: 0,
                metadata: metadata.into(),
                idempotency_key: None,
                session: None,
            },
        },
        status: LeaseStatus::Active,
        expires_wall_ms: 0,
        remaining_ms: 0,
    }
}

fn retried(dedup: &Dedup, principal: &str, request_id: &str) -> Kept {
    match dedup.check(principal, request_id, &release("a")) {
        Seen::Retry(kept) => kept,
        _ => panic!("{principal}/{request_id} is not remembered"),
    }
}

#[test]
fn a_record_keeps_no_metadata_and_no_holders_however_large_the_reply() {
    use crate::types::{AcquireOutcome, Refusal};
    let metadata: BTreeMap<String, String> = (0..16)
        .map(|i| (format!("k{i}"), "v".repeat(1000)))
        .collect();
    let view = lease_view(metadata);
    let refused = Reply::Acquire(AcquireOutcome {
        granted: false,
        lease: None,
        refusal: Some(Refusal::ResourceUnavailable),
        holders: vec![view.clone(); 100],
        queue_position: 0,
        wait_id: None,
        closed_until_wall_ms: None,
    });
    let mut dedup = Dedup::default();
    remember(&mut dedup, "p", "1", &release("a"), &refused);
    remember(
        &mut dedup,
        "p",
        "2",
        &release("a"),
        &Reply::Lease(view.clone()),
    );
    assert!(
        dedup.bytes() < 2 * RECORD_BYTES + 200,
        "{} bytes",
        dedup.bytes()
    );
    let Kept::Reply(Reply::Acquire(outcome)) = retried(&dedup, "p", "1") else {
        panic!("an acquire's record keeps an acquire");
    };
    assert!(outcome.holders.is_empty());
    let Kept::Reply(Reply::Lease(kept)) = retried(&dedup, "p", "2") else {
        panic!("a lease's record keeps a lease");
    };
    assert!(kept.lease.metadata.is_empty());
    assert_eq!(kept.lease.lease_id(), view.lease.lease_id());
}

#[test]
fn a_reply_with_nothing_to_leave_out_is_kept_whole() {
    let view = lease_view(BTreeMap::new());
    let mut dedup = Dedup::default();
    let reply = Reply::Lease(view);
    remember(&mut dedup, "p", "1", &release("a"), &reply);
    assert_eq!(retried(&dedup, "p", "1"), Kept::Reply(reply.clone()));
    assert_eq!(Kept::encode_of(&reply), Kept::of(&reply).encode());
}

#[test]
fn the_table_refuses_new_records_past_its_total() {
    let mut dedup = Dedup::default();
    assert!(dedup.room().is_ok());
    dedup.set_bytes(EXACTLY_ONCE_TOTAL_BYTES);
    let refused = dedup.room().expect_err("over the total");
    assert_eq!(refused.reason(), "resource_exhausted");
}

/// A SetQuota remembered by the release before sessions (nine quotas in its reply) and
/// retried after the upgrade gets its answer, the tenth quota at its compiled default.
#[test]
fn a_set_quota_remembered_before_sessions_is_answered_after_the_upgrade() {
    use crate::command::SetQuotaOp;
    use crate::quota::{Limits, Quota, QuotaViewV5};

    let op = Op::SetQuota(SetQuotaOp {
        principal: Some("alice".into()),
        changes: vec![(Quota::Leases, Some(7))],
    });
    let old = QuotaViewV5 {
        principal: Some("alice".into()),
        settings: [Some(7), None, None, None, None, None, None, None, None],
        limits: [7, 1, 2, 3, 4, 5, 6, 7, 8],
        usage: [1, 0, 0, 0, 0, 0, 0, 0, 0],
    };
    // Kept::Reply (variant 0) of Reply::Quota (variant 9), as postcard numbers variants.
    let mut kept = vec![0u8, 9];
    kept.extend(postcard::to_allocvec(&old).expect("encodes"));
    let mut entries = BTreeMap::new();
    entries.insert(
        key("root", "q-1"),
        Remembered {
            principal: "root".into(),
            op: fingerprint(&op),
            kept: kept.into(),
            at_ms: 0,
        },
    );
    let dedup = Dedup::of_table(entries, vec![(0, key("root", "q-1"))]);
    match dedup.check("root", "q-1", &op) {
        Seen::Retry(Kept::Reply(Reply::Quota(view))) => {
            assert_eq!(view.limits.get(Quota::Leases), 7);
            assert_eq!(view.settings.get(Quota::Leases), Some(7));
            assert_eq!(view.usage.get(Quota::Leases), 1);
            assert_eq!(
                view.limits.get(Quota::Sessions),
                Limits::DEFAULT.get(Quota::Sessions)
            );
        }
        _ => panic!("the old record was not answered"),
    }
}

/// The table as formats up to 8 encode it, with the shapes those releases keep in memory.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct HeapTable {
    entries: imbl::OrdMap<Digest128, Arc<Remembered>>,
    order: imbl::Vector<(u64, Digest128)>,
}

/// `n` requests of `principal`, one a millisecond from `from_ms`.
fn many(dedup: &mut Dedup, principal: &str, n: usize, from_ms: u64) {
    for i in 0..n {
        let id = format!("{principal}-{from_ms}-{i}");
        remember_at(
            dedup,
            principal,
            &id,
            &release("a"),
            &Reply::None,
            from_ms + i as u64,
        );
    }
}

/// What the table keeps in the archive reads, for a member of the release before (rules 2
/// and below), as the heap table it kept, and the heap table's encoding reads back as the
/// same table: snapshots go both ways in a cluster of two releases.
#[test]
fn the_table_reads_as_the_heap_table_of_formats_up_to_8_and_back() {
    let mut dedup = Dedup::default();
    let mut heap = HeapTable {
        entries: imbl::OrdMap::new(),
        order: imbl::Vector::new(),
    };
    for (n, principal) in ["zed", "amy", "bob", "amy"].into_iter().enumerate() {
        let at_ms = 1_000 * (n as u64 / 2);
        let id = format!("req-{n}");
        remember_at(
            &mut dedup,
            principal,
            &id,
            &release(principal),
            &Reply::None,
            at_ms,
        );
        let k = key(principal, &id);
        heap.order.push_back((at_ms, k));
        heap.entries.insert(
            k,
            Arc::new(Remembered {
                principal: principal.into(),
                op: fingerprint(&release(principal)),
                kept: Kept::encode_of(&Reply::None),
                at_ms,
            }),
        );
    }
    let ours = postcard::to_allocvec(&dedup).expect("encodes");
    let as_heap: HeapTable = postcard::from_bytes(&ours).expect("the release before reads it");
    assert_eq!(as_heap, heap);
    let theirs = postcard::to_allocvec(&heap).expect("encodes");
    let back: Dedup = postcard::from_bytes(&theirs).expect("this release reads it");
    assert_eq!(back, dedup);
    assert_eq!(back.len(), 4);
}

/// A copy of the table (a snapshot's) reads it as it was while the table goes on in the same
/// archive: chunks filled and written, a wait's outcome decided, the window moving on.
#[test]
fn a_copy_reads_the_table_as_it_was_while_the_table_goes_on() {
    let mut dedup = Dedup::default();
    many(&mut dedup, "p", CHUNK - 1, 0);
    remember_at(
        &mut dedup,
        "p",
        "wait",
        &release("a"),
        &Reply::None,
        CHUNK as u64,
    );
    let copy = dedup.snapshot_copy();
    let before = postcard::to_allocvec(&copy).expect("encodes");

    many(&mut dedup, "p", CHUNK + 3, 10_000);
    let decided = Reply::Cancelled {
        cancelled: true,
        revision: 6,
    };
    dedup.resolve("p", "wait", &decided);
    dedup.prune(DEDUP_WINDOW_MS + 5_000, |_| {});
    assert_eq!(
        dedup.len(),
        CHUNK + 3,
        "only the later records are in the window"
    );

    assert_eq!(postcard::to_allocvec(&copy).expect("encodes"), before);
    assert_eq!(copy.len(), CHUNK);
    assert!(matches!(
        copy.check("p", "wait", &release("a")),
        Seen::Retry(Kept::Reply(Reply::None))
    ));
    assert!(matches!(
        copy.check("p", "p-10000-0", &release("a")),
        Seen::New(_)
    ));
    assert!(matches!(
        dedup.check("p", "wait", &release("a")),
        Seen::New(_)
    ));
    assert!(matches!(
        dedup.check("p", "p-10000-0", &release("a")),
        Seen::Retry(_)
    ));
}

fn chunks_in(archive: &MemArchive) -> usize {
    let mut n = 0;
    archive.scan(
        Space::ExactlyOnce,
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        &mut |_, _| {
            n += 1;
            true
        },
    );
    n
}

/// Records are written to the archive a chunk at a time; chunks the window has passed leave
/// it when the node says so; a request id forgotten and used again is a new request; and a
/// retry finds its record in a written chunk or in the one being filled.
#[test]
fn chunks_are_written_when_full_and_leave_once_forgotten() {
    let archive = Arc::new(MemArchive::default());
    let mut dedup = Dedup::in_archive(archive.clone());
    remember_at(&mut dedup, "p", "a", &release("a"), &Reply::None, 0);
    many(&mut dedup, "p", 2 * CHUNK, 1);
    assert_eq!(
        chunks_in(&archive),
        2,
        "two full chunks written, one being filled"
    );
    assert!(matches!(
        dedup.check("p", "a", &release("a")),
        Seen::Retry(_)
    ));
    assert!(matches!(
        dedup.check("p", "a", &release("b")),
        Seen::Conflict
    ));
    assert!(matches!(
        dedup.check("p", &format!("p-1-{}", 2 * CHUNK - 1), &release("a")),
        Seen::Retry(_)
    ));

    // The window passes the first chunk and a record of the second.
    let mut freed = 0;
    dedup.prune(DEDUP_WINDOW_MS + CHUNK as u64, |(_, n)| freed -= n);
    assert_eq!(dedup.len(), CHUNK);
    assert!(freed > 0);
    dedup.remove_forgotten();
    assert_eq!(chunks_in(&archive), 1);
    assert!(matches!(dedup.check("p", "a", &release("b")), Seen::New(_)));
    remember_at(
        &mut dedup,
        "p",
        "a",
        &release("b"),
        &Reply::None,
        DEDUP_WINDOW_MS + CHUNK as u64,
    );
    assert!(matches!(
        dedup.check("p", "a", &release("b")),
        Seen::Retry(_)
    ));

    let mut moved = dedup.snapshot_copy();
    let other = Arc::new(MemArchive::default());
    moved.move_into(other.clone());
    assert_eq!(chunks_in(&other), 1);
    assert_eq!(moved, dedup);
}

/// Records numbered from `first` on, across a wrap of the index's low bits: found and
/// forgotten on both sides.
fn chunk_numbers_run_past(first: u64) {
    let mut dedup = Dedup::numbered_from(first);
    many(&mut dedup, "p", 5 * CHUNK, 0);
    for i in [0, CHUNK + 1, 3 * CHUNK, 5 * CHUNK - 1] {
        let id = format!("p-0-{i}");
        assert!(
            matches!(dedup.check("p", &id, &release("a")), Seen::Retry(_)),
            "{id}"
        );
    }
    dedup.prune(DEDUP_WINDOW_MS + 3 * CHUNK as u64, |_| {});
    assert_eq!(dedup.len(), 2 * CHUNK - 1);
    assert!(matches!(
        dedup.check("p", &format!("p-0-{}", 3 * CHUNK), &release("a")),
        Seen::New(_)
    ));
    assert!(matches!(
        dedup.check("p", &format!("p-0-{}", 4 * CHUNK), &release("a")),
        Seen::Retry(_)
    ));
    dedup.remove_forgotten();
    dedup.prune(DEDUP_WINDOW_MS + 5 * CHUNK as u64, |_| {});
    assert!(dedup.is_empty());
}

/// Chunk numbers run past 2^32 (the number whose low 32 bits are all ones is never used).
#[test]
fn chunk_numbers_run_past_32_bits() {
    chunk_numbers_run_past(u64::from(u32::MAX) - 2);
}

/// Chunk numbers run past 2^24 (the index keeps their low 24 bits).
#[test]
fn chunk_numbers_run_past_the_index_s_24_bits() {
    chunk_numbers_run_past((1 << 24) - 2);
}

/// Keys that share the index's 39-bit prefix (made here: a real pair takes about 2^39 ÷ the
/// live keys hashes) are both remembered, found, and forgotten apart.
#[test]
fn keys_that_share_a_prefix_are_kept_apart() {
    let mut dedup = Dedup::default();
    let (a, mut b) = (key("p", "a"), key("p", "a"));
    b[15] ^= 1;
    let record = |at_ms| Remembered {
        principal: "p".into(),
        op: fingerprint(&release("a")),
        kept: Kept::encode_of(&Reply::None),
        at_ms,
    };
    for (k, at_ms) in [(a, 0), (b, 1)] {
        let sharing = dedup.sharing(&k);
        dedup.add(
            Ticket {
                key: k,
                op: record(at_ms).op,
                sharing,
            },
            record(at_ms),
        );
    }
    assert_eq!(dedup.record(&a).map(|r| r.at_ms), Some(0));
    assert_eq!(dedup.record(&b).map(|r| r.at_ms), Some(1));
    dedup.prune(DEDUP_WINDOW_MS, |_| {});
    assert_eq!(dedup.record(&a), None);
    assert_eq!(dedup.record(&b).map(|r| r.at_ms), Some(1));
    dedup.prune(DEDUP_WINDOW_MS + 1, |_| {});
    assert!(dedup.is_empty());
    assert_eq!(dedup.record(&b), None);
}

/// A table read back from what format 9 writes of it (its open chunk and place, over its
/// archive) is indexed again from its written chunks in one ordered pass: across the chunk
/// number never used it finds every record, and a written chunk the archive lost, first or
/// last, stops the load.
#[test]
fn a_table_read_back_is_indexed_again_and_a_lost_chunk_is_found() {
    let mut dedup = Dedup::numbered_from(u64::from(u32::MAX) - 2);
    many(&mut dedup, "p", 5 * CHUNK + 3, 0);
    let encoded = postcard::to_allocvec(&dedup.live()).expect("encode");
    let archive = dedup.archive_shared();
    let read = || {
        let parts: super::table::DedupLoaded = postcard::from_bytes(&encoded).expect("decode");
        let mut again = Dedup::from_live(parts, archive.clone());
        again.index_again().map(|usage| (again, usage))
    };
    let (again, usage) = read().expect("every chunk there");
    assert_eq!(again, dedup);
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0].0, "p");
    for i in [0, CHUNK + 1, 2 * CHUNK, 5 * CHUNK + 2] {
        let id = format!("p-0-{i}");
        assert!(
            matches!(again.check("p", &id, &release("a")), Seen::Retry(_)),
            "{id}"
        );
    }
    let written = dedup.archived_chunks();
    assert_eq!(written.len(), 5);
    assert!(written.windows(2).any(|w| w[1] == w[0] + 2), "{written:?}");
    for lost in [written[0], written[2], written[4]] {
        let key = crate::archive::chunk_key(lost);
        let value = archive.get(Space::ExactlyOnce, &key).expect("written");
        archive.remove(Space::ExactlyOnce, &key);
        let error = read().map(|_| ()).expect_err("a chunk lost");
        assert_eq!(error, format!("exactly-once chunk {lost} does not decode"));
        archive.insert(Space::ExactlyOnce, &key, &value);
    }
    read().expect("every chunk there again");
}
