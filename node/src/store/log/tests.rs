use super::*;
use crate::store::{EntryPayload, LeaderId};

fn blank(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(
            LeaderId {
                term: 3,
                node_id: 1,
            },
            index,
        ),
        payload: EntryPayload::Blank,
    }
}

/// Writes blank entries at `indexes` straight into sled, in `wire`'s encoding.
fn fill(store: &LogStore, wire: codec::Wire, indexes: std::ops::RangeInclusive<u64>) {
    for index in indexes {
        let value = codec::to_bytes_as(wire, &blank(index)).expect("encode");
        store.log.insert(index_key(index), value).expect("insert");
    }
}

/// A node upgraded in place reads the JSON entries its previous release wrote, and the
/// binary ones it appends after them (`append` encodes with `codec::to_bytes`).
#[tokio::test]
async fn a_log_written_as_json_is_read_alongside_binary_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path(), Arc::default()).expect("open");
    fill(&store, codec::Wire::Json, 1..=2);
    fill(&store, codec::Wire::Binary, 3..=3);
    let read = store.try_get_log_entries(1..4).await.expect("read");
    assert_eq!(read, vec![blank(1), blank(2), blank(3)]);
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_log_id, Some(blank(3).log_id));
}

/// `purge` moves the log's start durably and returns; the entries behind it go in the
/// background, and a purge a crash cut short is finished when the log is opened again.
#[tokio::test]
async fn purged_entries_are_removed_behind_the_call_and_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path(), Arc::default()).expect("open");
    fill(&store, codec::Wire::Binary, 1..=3_000);
    store.purge(blank(2_000).log_id).await.expect("purge");
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, Some(blank(2_000).log_id));
    assert_eq!(state.last_log_id, Some(blank(3_000).log_id));
    let mut purged = store.purged.clone();
    purged.wait_for(|&p| p >= 2_000).await.expect("purger");
    assert_eq!(
        store.log.first().expect("first").map(|(k, _)| k.to_vec()),
        Some(index_key(2_001).to_vec())
    );

    // As if a crash came before the purger: entries behind the start are still there.
    fill(&store, codec::Wire::Binary, 1..=2_000);
    store.db.flush().expect("flush");
    drop(store);
    let stats = Arc::<StorageStats>::default();
    let store = LogStore::open(dir.path(), stats.clone()).expect("reopen");
    // Only the entries after the purge point count as log kept since the snapshot.
    let kept: usize = (2_001..=3_000)
        .map(|i| codec::to_bytes(&blank(i)).expect("binary").len())
        .sum();
    assert_eq!(StorageStats::get(&stats.log_bytes), kept as u64);
    let mut purged = store.purged.clone();
    purged.wait_for(|&p| p >= 2_000).await.expect("purger");
    assert_eq!(store.log.len(), 1_000);
    let read = store
        .clone()
        .try_get_log_entries(2_001..3_001)
        .await
        .expect("read");
    assert_eq!(read.len(), 1_000);
}

/// With nothing after the purge point but entries the purger has not removed yet, the
/// log ends where it was purged, whatever the purger has done meanwhile.
#[tokio::test]
async fn a_log_purged_to_its_end_ends_at_the_purge_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path(), Arc::default()).expect("open");
    // A snapshot installed past the log: purged through 150 ...
    store.purge(blank(150).log_id).await.expect("purge");
    let mut purged = store.purged.clone();
    purged.wait_for(|&p| p >= 150).await.expect("purger");
    // ... with entries up to 100 still there (written after the purger passed, so they
    // stay, as if it had not reached them yet).
    fill(&store, codec::Wire::Binary, 1..=100);
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, Some(blank(150).log_id));
    assert_eq!(state.last_log_id, Some(blank(150).log_id));
}

/// What a crash leaves when appends were journaled but sled was not flushed: the journal's
/// entries and truncations are replayed in order when the log opens, and the journal is then
/// checkpointed into sled and removed.
#[tokio::test]
async fn journaled_appends_and_truncations_are_replayed_in_order_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(LogStore::open(dir.path(), Arc::default()).expect("create"));
    let other = |index| Entry {
        log_id: LogId::new(
            LeaderId {
                term: 4,
                node_id: 2,
            },
            index,
        ),
        payload: EntryPayload::Blank,
    };
    let mut records = Vec::new();
    for index in 1..=3 {
        let bytes = codec::to_bytes(&blank(index)).expect("encode");
        wal::encode_entry(&mut records, index, &bytes);
    }
    // A follower's conflict: entry 3 removed, then another leader's entry 3.
    wal::encode_truncate(&mut records, 3);
    let bytes = codec::to_bytes(&other(3)).expect("encode");
    wal::encode_entry(&mut records, 3, &bytes);
    let segment = dir.path().join("wal").join(format!("{:020}", 1_000));
    std::fs::write(&segment, &records).expect("journal");

    let mut store = LogStore::open(dir.path(), Arc::default()).expect("open");
    let read = store.try_get_log_entries(1..10).await.expect("read");
    assert_eq!(read, vec![blank(1), blank(2), other(3)]);
    assert!(
        !segment.exists(),
        "the replayed segment is removed once sled holds it"
    );
    // The segment begun at open is the one replayed next time.
    let appended = (4..=5).map(other).collect::<Vec<_>>();
    let mut journal = Vec::new();
    for entry in &appended {
        let bytes = codec::to_bytes(entry).expect("encode");
        wal::encode_entry(&mut journal, entry.log_id.index, &bytes);
    }
    drop(store);
    let newest = wal::segments_for_tests(&dir.path().join("wal"));
    std::fs::write(newest, &journal).expect("journal");
    let mut store = LogStore::open(dir.path(), Arc::default()).expect("reopen");
    let read = store.try_get_log_entries(1..10).await.expect("read");
    assert_eq!(read.len(), 5);
    assert_eq!(read[3..], appended[..]);
}

/// A full journal segment is closed and checkpointed: sled is flushed and the segment goes,
/// and what was journaled after it is what a reopen replays.
#[tokio::test]
async fn a_full_segment_is_checkpointed_into_sled_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path(), Arc::default()).expect("open");
    let wal_dir = dir.path().join("wal");
    let first = wal::segments_for_tests(&wal_dir);
    let mut index = 0;
    let mut journal = |count: usize| {
        let mut records = Vec::new();
        for _ in 0..count {
            index += 1;
            let bytes = codec::to_bytes(&blank(index)).expect("encode");
            store
                .log
                .insert(index_key(index), bytes.clone())
                .expect("insert");
            wal::encode_entry(&mut records, index, &bytes);
        }
        store.journal(&records, || Ok(()))
    };
    // More than a segment holds, in one write: the segment closes after it.
    let per_entry = codec::to_bytes(&blank(1)).expect("encode").len() + 17;
    let count = wal::SEGMENT_BYTES as usize / per_entry + 1;
    journal(count).expect("durable");
    let mut checkpoints = store.checkpoints.clone();
    checkpoints
        .wait_for(|&n| n >= 1)
        .await
        .expect("checkpointer");
    assert!(!first.exists(), "the checkpointed segment is removed");
    journal(3).expect("durable");
    drop(store);
    let mut store = LogStore::open(dir.path(), Arc::default()).expect("reopen");
    let read = store.try_get_log_entries(1..=index).await.expect("read");
    assert_eq!(read.len() as u64, index);
    assert_eq!(read.last(), Some(&blank(index)));
}

/// A log directory as the release on openraft 0.9.25 left it (its entries' bytes, its vote and
/// committed id as it wrote them) opens under openraft 0.10 with the same entries, vote and
/// committed id.
#[tokio::test]
async fn a_log_written_by_the_openraft_0_9_release_opens_with_its_entries_and_vote() {
    use crate::store::codec::tests::{unhex, OPENRAFT_0_9_ENTRIES};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = LogStore::open(dir.path(), Arc::default()).expect("create");
        for (index, hex) in (1u64..).zip(OPENRAFT_0_9_ENTRIES) {
            store
                .log
                .insert(index_key(index), unhex(hex))
                .expect("entry");
        }
        let meta = &store.meta;
        let vote = br#"{"leader_id":{"term":7,"node_id":2},"committed":true}"#;
        meta.insert(VOTE, &vote[..]).expect("vote");
        let committed = br#"{"leader_id":{"term":7,"node_id":2},"index":4}"#;
        meta.insert(COMMITTED, &committed[..]).expect("committed");
        store.db.flush().expect("flush");
    }
    let mut store = LogStore::open(dir.path(), Arc::default()).expect("open");
    let entries = store.try_get_log_entries(1..5).await.expect("read");
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, vec![1, 2, 3, 4]);
    assert!(entries.iter().all(|e| e.log_id.leader_id
        == LeaderId {
            term: 123,
            node_id: 2
        }));
    assert!(matches!(entries[1].payload, EntryPayload::Membership(_)));
    assert!(matches!(entries[2].payload, EntryPayload::Normal(_)));
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_log_id, Some(entries[3].log_id));
    let vote = store.read_vote().await.expect("vote");
    assert_eq!(vote, Some(Vote::new_committed(7, 2)));
    let committed = store.read_committed().await.expect("committed");
    assert_eq!(
        committed,
        Some(LogId::new(
            LeaderId {
                term: 7,
                node_id: 2
            },
            4
        ))
    );
}
