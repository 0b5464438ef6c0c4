//! A snapshot file carries the SHA-256 of its contents: one flipped byte is refused when a
//! leader reads its file to send it, or a follower installs what it was sent (the node stays
//! up, and takes the next good snapshot), when a node loads its own file at start, and by
//! `tenured restore`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tenure_node::store::WatchReceiver as _;

use tenure_node::store::restore::Restore;
use tenure_node::store::{snapshot, StorageStats};
use tenure_tests::granted;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{started, started_with, ELECTION};

const TTL: Duration = Duration::from_secs(60);

/// The newest snapshot file of node `id`.
fn newest(cluster: &InProcessCluster, id: u64) -> PathBuf {
    snapshot::newest(&cluster.data_dir(id).join("snapshots"))
        .expect("read the snapshot dir")
        .expect("a snapshot")
        .1
}

/// Flips one bit in the middle of the file.
fn flip_a_bit(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x08;
    // Replaced whole (written aside, renamed over): a node sending the file right now keeps
    // reading the intact one, never a file cut short while it is rewritten.
    let aside = path.with_file_name(".flipping.tmp");
    std::fs::write(&aside, bytes).expect("write");
    std::fs::rename(&aside, path).expect("rename");
}

/// Waits (yielding) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(ELECTION, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not within {ELECTION:?}: {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_snapshot_from_the_leader_is_refused_and_the_next_good_one_installed() {
    // No snapshot but on demand, and no log kept behind one: a new member can only be sent
    // the leader's snapshot file.
    let flags = ["--snapshot-every", "1000000", "--snapshot-keep-logs", "0"];
    let extra = tenure_tests::same_flags(3, &flags);
    let (mut cluster, leader) = started_with(3, extra).await;
    let client = cluster.client();
    let held = granted(&client, "damaged/held", "keeper", TTL).await;
    let at_leader = cluster.client_of(leader);
    at_leader.node_snapshot(0, false).await.expect("a snapshot");
    cluster
        .node(leader)
        .raft
        .wait(Some(ELECTION))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index >= held.fencing_token),
            "the leader purged its log behind the snapshot",
        )
        .await
        .expect("a purge");
    flip_a_bit(&newest(&cluster, leader));

    let addr = cluster.join(4, None).await.expect("start a joiner");
    client.add_learner(4, &addr, false).await.expect("add");
    let joiner = cluster.node(4).clone();
    // Refused by the leader, which reads the file to send it whole (its own snapshot is the
    // live state alone, from rules version 3), or else by the joiner as it arrives.
    let sender = cluster.node(leader).clone();
    until("the damaged snapshot is refused", || {
        StorageStats::get(&joiner.sm.stats.snapshots_refused) >= 1
            || StorageStats::get(&sender.sm.stats.snapshots_refused) >= 1
    })
    .await;
    assert_eq!(StorageStats::get(&joiner.sm.stats.snapshots_installed), 0);
    assert!(
        joiner.raft.metrics().borrow_watched().running_state.is_ok(),
        "the refusal left the joiner's Raft running"
    );

    // A new snapshot replaces the damaged file: the joiner installs it and catches up. A
    // snapshot is built only past the last one's index, so something is written first (else
    // the call finds the damaged one covering everything applied, unless a tick came between).
    granted(&client, "damaged/after", "keeper", TTL).await;
    at_leader
        .node_snapshot(0, false)
        .await
        .expect("a new snapshot");
    joiner
        .raft
        .wait(Some(ELECTION))
        .applied_index_at_least(Some(held.fencing_token), "the joiner caught up")
        .await
        .expect("caught up from the good snapshot");
    assert!(StorageStats::get(&joiner.sm.stats.snapshots_installed) >= 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_snapshot_is_refused_at_start_and_by_restore() {
    let (mut cluster, _) = started(1).await;
    granted(&cluster.client(), "damaged/one", "h", TTL).await;
    let taken = cluster
        .client()
        .node_snapshot(0, true)
        .await
        .expect("a snapshot");
    let file = newest(&cluster, 1);
    let backup_dir = tempfile::tempdir().expect("dir");
    let backup = backup_dir.path().join("tenure.snapshot");
    std::fs::copy(&taken.backup_path, &backup).expect("copy");

    cluster.stop(1).await;
    flip_a_bit(&file);
    let refused = cluster
        .restart(1)
        .await
        .expect_err("a damaged snapshot loaded");
    assert!(format!("{refused:#}").contains("damaged"), "{refused:#}");

    let restore = |snapshot: PathBuf, data_dir: PathBuf| Restore {
        snapshot,
        data_dir,
        id: 1,
        peers: BTreeMap::from([(1, "127.0.0.1:1".to_string())]),
        bump_index: 0,
    };
    restore(backup.clone(), backup_dir.path().join("intact"))
        .run()
        .await
        .expect("the intact backup restores");
    flip_a_bit(&backup);
    let refused = restore(backup, backup_dir.path().join("damaged"))
        .run()
        .await
        .expect_err("a damaged backup restored");
    assert!(format!("{refused:#}").contains("damaged"), "{refused:#}");
    cluster.shutdown().await;
}
