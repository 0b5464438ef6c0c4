//! Restore from a backup (docs/operations.md, `tenured restore`): a snapshot file copied off
//! one node starts a new cluster under new members, with the leases the backup holds and their
//! tokens; what the lost cluster did after the backup is gone, and every token the new cluster
//! grants is above the backup's index moved on by `--bump-index`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tenure_client::{pb, renew_request};
use tenure_node::store::restore::Restore;
use tenure_node::store::snapshot;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{get_resource, granted};

const ELECTION: Duration = Duration::from_secs(15);
const TTL: Duration = Duration::from_secs(120);

/// A backup of a cluster that went on after it, then was lost.
struct Backup {
    _dir: tempfile::TempDir,
    file: PathBuf,
    /// The backup's last index, and the term of its last entry (at least 2).
    index: u64,
    term: u64,
    /// A lease held when the backup was taken.
    held: pb::Lease,
    /// The token of a grant committed after the backup.
    later_token: u64,
}

async fn backup() -> Backup {
    let cluster = InProcessCluster::start(3, BTreeMap::new())
        .await
        .expect("cluster");
    cluster.leader(ELECTION).await.expect("a leader");
    let client = cluster.client();
    // A leader in a later term than the first, so that the backup's term is not where a new
    // cluster's Raft starts.
    let moved = client.transfer_leader(0).await.expect("transfer");
    assert!(moved.transferred, "{moved:?}");
    let leader = cluster.leader(ELECTION).await.expect("a new leader");
    let held = granted(&client, "held", "holder", TTL).await;
    let term = cluster.node(leader).raft.metrics().borrow().current_term;
    assert!(term >= 2);
    // Node 1 (perhaps a follower) snapshots what it has applied: the grant, once it has.
    cluster.applied_at_least(1, held.fencing_token).await;
    let taken = client.node_snapshot(0).await.expect("snapshot node 1");
    assert!(taken.last_index >= held.fencing_token);
    let dir = tempfile::tempdir().expect("backup dir");
    let (_, newest, _) = snapshot::newest(&cluster.data_dir(1).join("snapshots"))
        .expect("read the snapshot dir")
        .expect("a snapshot");
    let file = dir.path().join("tenure.snapshot");
    std::fs::copy(&newest, &file).expect("copy the snapshot");
    let later = granted(&client, "later", "late", TTL).await;
    cluster.shutdown().await;
    assert!(later.fencing_token > taken.last_index);
    Backup {
        _dir: dir,
        file,
        index: taken.last_index,
        term,
        held,
        later_token: later.fencing_token,
    }
}

/// The holders of `resource` with their tokens, read linearizably.
async fn holders(client: &tenure_client::Client, resource: &str) -> Vec<(String, u64)> {
    get_resource(client, resource)
        .await
        .expect("get resource")
        .leases
        .into_iter()
        .map(|l| (l.holder, l.fencing_token))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_restores_into_one_node_that_then_grows_to_three() {
    let backup = backup().await;
    let bump = 1_000;
    let mut cluster = InProcessCluster::restored(1, &backup.file, bump)
        .await
        .expect("restored node");
    assert_eq!(cluster.leader(ELECTION).await.expect("a leader"), 1);
    // Raft goes on in a later term than the backup's entries: the new leader's entries must
    // compare as newer than the restored state.
    assert!(cluster.node(1).raft.metrics().borrow().current_term > backup.term);
    let client = cluster.client();

    // The backup's lease, with its token; the grant after the backup is gone.
    let held = ("holder".to_string(), backup.held.fencing_token);
    assert_eq!(holders(&client, "held").await, vec![held.clone()]);
    assert_eq!(holders(&client, "later").await, vec![]);
    // Its holder renews it as before.
    let renewed = client
        .renew(renew_request(&backup.held, TTL))
        .await
        .expect("renew the restored lease");
    assert_eq!(
        renewed.lease.map(|l| l.fencing_token),
        Some(backup.held.fencing_token)
    );
    // A new grant's token is above the backup's index moved on, and so above the lost
    // cluster's grant after the backup.
    let fresh = granted(&client, "later", "new", TTL).await;
    assert!(
        fresh.fencing_token > backup.index + bump && fresh.fencing_token > backup.later_token,
        "token {} after a backup at {} (+{bump}) and a lost grant at {}",
        fresh.fencing_token,
        backup.index,
        backup.later_token
    );

    // Grown to three by the usual procedure; the new members get the whole state.
    for id in [2, 3] {
        let addr = cluster.join(id, None).await.expect("start a joining node");
        let added = client.add_learner(id, &addr, true).await.expect("add");
        assert!(added.caught_up, "{added:?}");
    }
    let promoted = client
        .change_membership(vec![2, 3], Vec::new())
        .await
        .expect("promote");
    let voters: Vec<u64> = promoted
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.id)
        .collect();
    assert_eq!(voters, vec![1, 2, 3], "{promoted:?}");
    for id in [2, 3] {
        cluster.applied_at_least(id, fresh.fencing_token).await;
        assert_eq!(cluster.local_leases(id, "held"), vec![held.clone()]);
        assert_eq!(
            cluster.local_leases(id, "later"),
            vec![("new".to_string(), fresh.fencing_token)]
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_member_restores_from_the_same_backup() {
    let backup = backup().await;
    let cluster = InProcessCluster::restored(3, &backup.file, 0)
        .await
        .expect("restored cluster");
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    assert!(cluster.node(leader).raft.metrics().borrow().current_term > backup.term);
    let client = cluster.client();
    let fresh = granted(&client, "another", "new", TTL).await;
    assert!(fresh.fencing_token > backup.index);
    for id in cluster.live_ids() {
        cluster.applied_at_least(id, fresh.fencing_token).await;
        assert_eq!(
            cluster.local_leases(id, "held"),
            vec![("holder".to_string(), backup.held.fencing_token)],
            "node {id}"
        );
        assert_eq!(cluster.local_leases(id, "later"), vec![], "node {id}");
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn restore_refuses_a_used_data_dir_a_bad_file_and_a_foreign_id() {
    let dir = tempfile::tempdir().expect("dir");
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"{\"not\":\"a snapshot\"}\nbody").expect("write");
    let restore = |snapshot: PathBuf, data_dir: PathBuf, id: u64| Restore {
        snapshot,
        data_dir,
        id,
        peers: [(1, "127.0.0.1:1".to_string())].into(),
        bump_index: 0,
    };
    let error =
        |restore: Restore| async move { restore.run().await.expect_err("refused").to_string() };

    let bad_file = error(restore(garbage.clone(), dir.path().join("a"), 1)).await;
    assert!(bad_file.contains("reading the snapshot"), "{bad_file}");
    let foreign = error(restore(garbage.clone(), dir.path().join("b"), 2)).await;
    assert!(
        foreign.contains("must include this node's id 2"),
        "{foreign}"
    );
    let used = dir.path().join("used");
    std::fs::create_dir_all(used.join("raft")).expect("mkdir");
    std::fs::write(used.join("raft").join("db"), b"x").expect("write");
    let used = error(restore(garbage, used, 1)).await;
    assert!(used.contains("already holds a node's data"), "{used}");
}
