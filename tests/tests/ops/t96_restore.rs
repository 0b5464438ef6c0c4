//! Restore from a backup (docs/operations.md, `tenured restore`): the backup file
//! `tenure cluster snapshot --backup` wrote on one node, copied off, starts a new cluster under new members, with the leases the backup holds and their
//! tokens; what the lost cluster did after the backup is gone, and every token the new cluster
//! grants is above the backup's index moved on by `--bump-index`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tenure_node::store::WatchReceiver as _;

use tenure_client::{pb, renew_request};
use tenure_node::store::restore::{Restore, DEFAULT_BUMP, TERM_BUMP};
use tenure_node::store::snapshot;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{get_resource, granted, started, ELECTION};

const TTL: Duration = Duration::from_secs(120);

/// A backup of a cluster that went on after it, then was lost.
struct Backup {
    dir: tempfile::TempDir,
    file: PathBuf,
    /// The last index the file covers, and the term of that entry (at least 2).
    index: u64,
    term: u64,
    /// A lease held when the backup was taken.
    held: pb::Lease,
    /// The token of a grant committed after the backup.
    later_token: u64,
}

impl Backup {
    /// Node 3's data directory as the lost cluster left it (it has the later grant, in a
    /// later term).
    fn node3_data(&self) -> PathBuf {
        self.dir.path().join("node3")
    }
}

async fn backup() -> Backup {
    let (mut cluster, first) = started(3).await;
    // A leader in a later term than the first, so that the backup's term is not where a new
    // cluster's Raft starts.
    cluster.kill(first).await;
    cluster.leader(ELECTION).await.expect("a new leader");
    cluster.restart(first).await.expect("restart");
    let client = cluster.client();
    let held = granted(&client, "held", "holder", TTL).await;
    // Node 1 (perhaps a follower) snapshots what it has applied: the grant, once it has.
    cluster.applied_at_least(1, held.fencing_token).await;
    // This release's rules first: node 1's own snapshot is then the live state alone.
    let mut applied = cluster.node(1).sm.subscribe();
    while cluster.node(1).sm.read().state.rules() < tenure_node::rules::RELEASE.max {
        tokio::time::timeout(ELECTION, applied.changed())
            .await
            .expect("the rules rise")
            .expect("the node runs");
    }
    let taken = client
        .node_snapshot(0, true)
        .await
        .expect("snapshot node 1");
    // What the build cost its thread, as the node measured it (nanosecond clock: never 0).
    assert!(
        taken.build_cpu_micros > 0,
        "the build's CPU time is reported: {taken:?}"
    );
    let dir = tempfile::tempdir().expect("backup dir");
    let (meta, newest, _) = snapshot::newest(&cluster.data_dir(1).join("backups"))
        .expect("read the backups dir")
        .expect("a backup");
    assert_eq!(newest.display().to_string(), taken.backup_path);
    let last = meta.last_log_id.expect("an index");
    assert!(last.index >= held.fencing_token && last.leader_id.term >= 2);
    let file = dir.path().join("tenure.snapshot");
    std::fs::copy(&newest, &file).expect("copy the backup");
    // The node's own snapshot file holds the live state alone: not a backup.
    let (_, own, _) = snapshot::newest(&cluster.data_dir(1).join("snapshots"))
        .expect("read the snapshot dir")
        .expect("a snapshot");
    let refused = snapshot::load(&own).expect_err("not a backup").to_string();
    assert!(refused.contains("--backup"), "{refused}");

    // The lost cluster goes on in a later term than the backup's.
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    cluster.kill(leader).await;
    cluster.leader(ELECTION).await.expect("a new leader");
    cluster.restart(leader).await.expect("restart");
    let later = granted(&client, "later", "late", TTL).await;
    cluster.applied_at_least(3, later.fencing_token).await;
    cluster.stop(3).await;
    copy_dir(&cluster.data_dir(3), &dir.path().join("node3"));
    cluster.shutdown().await;
    Backup {
        dir,
        file,
        index: last.index,
        term: last.leader_id.term,
        held,
        later_token: later.fencing_token,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
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

fn term(cluster: &InProcessCluster, id: u64) -> u64 {
    cluster
        .node(id)
        .raft
        .metrics()
        .borrow_watched()
        .current_term
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_restores_into_one_node_that_then_grows_to_three() {
    let backup = backup().await;
    let bump = 1_000;
    let mut cluster = InProcessCluster::restored(1, &backup.file, bump)
        .await
        .expect("restored node");
    assert_eq!(cluster.leader(ELECTION).await.expect("a leader"), 1);
    // Raft goes on in a later term than the restored state's, itself far past the backup's.
    assert!(term(&cluster, 1) > backup.term + TERM_BUMP);
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

/// The documented procedure: node 1 restored with the whole membership, the others started
/// empty; then node 1 restarts on what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_member_restores_and_the_others_receive_the_state() {
    let backup = backup().await;
    let mut cluster = InProcessCluster::restored(3, &backup.file, DEFAULT_BUMP)
        .await
        .expect("restored cluster");
    cluster.leader(ELECTION).await.expect("a leader");
    let client = cluster.client();
    let fresh = granted(&client, "another", "new", TTL).await;
    assert!(fresh.fencing_token > backup.index + DEFAULT_BUMP);
    let held = vec![("holder".to_string(), backup.held.fencing_token)];
    for id in cluster.live_ids() {
        cluster.applied_at_least(id, fresh.fencing_token).await;
        assert_eq!(cluster.local_leases(id, "held"), held, "node {id}");
        assert_eq!(cluster.local_leases(id, "later"), vec![], "node {id}");
    }

    // The restored node restarts on its own data, the later grant still at its token.
    cluster.kill(1).await;
    cluster.restart(1).await.expect("restart node 1");
    cluster.leader(ELECTION).await.expect("a leader");
    let after = granted(&client, "after-restart", "new", TTL).await;
    assert!(after.fencing_token > fresh.fencing_token);
    cluster.applied_at_least(1, after.fencing_token).await;
    assert_eq!(cluster.local_leases(1, "held"), held);
    assert_eq!(
        cluster.local_leases(1, "another"),
        vec![("new".to_string(), fresh.fencing_token)]
    );
    cluster.shutdown().await;
}

/// A member of the lost cluster that comes back with its data (it has entries past the
/// backup, in a term past the backup's) neither leads nor keeps them: it takes the restored
/// state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_member_back_with_its_data_takes_the_restored_state() {
    let backup = backup().await;
    let old_data = backup.node3_data();
    let cluster = InProcessCluster::start_prepared(3, BTreeMap::new(), |id, cluster| {
        let restore = Restore {
            snapshot: backup.file.clone(),
            data_dir: cluster.data_dir(id),
            id,
            peers: cluster.addrs.clone(),
            bump_index: 1_000,
        };
        let (old_data, data_dir) = (old_data.clone(), cluster.data_dir(id));
        async move {
            match id {
                1 => restore.run().await.map(drop),
                3 => {
                    copy_dir(&old_data, &data_dir);
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    })
    .await
    .expect("restored cluster");
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    assert_ne!(leader, 3, "the old member must not lead");
    let client = cluster.client();
    let fresh = granted(&client, "another", "new", TTL).await;
    cluster.applied_at_least(3, fresh.fencing_token).await;
    assert_eq!(cluster.local_leases(3, "later"), vec![]);
    assert_eq!(
        cluster.local_leases(3, "held"),
        vec![("holder".to_string(), backup.held.fencing_token)]
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn restore_refuses_what_would_not_make_one_consistent_cluster() {
    let dir = tempfile::tempdir().expect("dir");
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"{\"not\":\"a snapshot\"}\nbody").expect("write");
    let restore = |data_dir: &str, id: u64, peers: &[u64]| Restore {
        snapshot: garbage.clone(),
        data_dir: dir.path().join(data_dir),
        id,
        peers: peers
            .iter()
            .map(|p| (*p, format!("127.0.0.1:{p}")))
            .collect(),
        bump_index: 0,
    };
    let error =
        |restore: Restore| async move { restore.run().await.expect_err("refused").to_string() };

    let bad_file = error(restore("a", 1, &[1])).await;
    assert!(bad_file.contains("reading the snapshot"), "{bad_file}");
    let foreign = error(restore("b", 2, &[1])).await;
    assert!(
        foreign.contains("must include this node's id 2"),
        "{foreign}"
    );
    let not_lowest = error(restore("c", 2, &[1, 2, 3])).await;
    assert!(not_lowest.contains("restore node 1"), "{not_lowest}");
    for used in ["raft", "snapshots"] {
        let data = dir.path().join(used).join(used);
        std::fs::create_dir_all(&data).expect("mkdir");
        std::fs::write(data.join("file"), b"x").expect("write");
        let refused = error(restore(used, 1, &[1])).await;
        assert!(refused.contains("already holds a node's data"), "{refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bump_past_exact_json_numbers_is_refused() {
    let backup = backup().await;
    let dir = tempfile::tempdir().expect("dir");
    let restore = Restore {
        snapshot: backup.file.clone(),
        data_dir: dir.path().join("d"),
        id: 1,
        peers: [(1, "127.0.0.1:1".to_string())].into(),
        bump_index: 1 << 53,
    };
    let refused = restore.run().await.expect_err("too large").to_string();
    assert!(refused.contains("too large"), "{refused}");
}
