use super::*;
use openraft::{CommittedLeaderId, EntryPayload};

fn blank(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(3, 1), index),
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
