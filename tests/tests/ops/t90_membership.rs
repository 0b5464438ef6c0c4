//! Membership online (SPEC §2 `Cluster`, §6): grow 3 → 5 and shrink back under load, remove
//! the leader, a wiped node rejoining under a new id, leadership transfer, snapshots on
//! demand, and clear refusals of bad changes. Throughout, a lease held from the start stays
//! held with its token, and no grant's fencing token is ever below an earlier one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tenure_node::store::WatchReceiver as _;

use tenure_client::{renew_request, Client};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{
    get_resource, granted, refused, release_request, started, started_with, ELECTION,
};
use tokio::task::JoinHandle;
use tonic::Code;

const TTL: Duration = Duration::from_secs(120);

/// What the background load saw.
struct Load {
    stop: Arc<AtomicBool>,
    task: JoinHandle<(u64, Vec<String>)>,
}

/// Lock cycles on fresh resources and renewals of `held`, one at a time, until stopped.
/// Every grant's token must exceed every earlier one (the load is sequential, so completion
/// order is log order); returns the cycles done and any failures.
fn load(client: Client, held: tenure_client::pb::Lease) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let mut last_token = held.fencing_token;
        let mut cycles = 0u64;
        let mut failures = Vec::new();
        while !stopped.load(Ordering::Relaxed) {
            let resource = format!("load/{cycles}");
            match client
                .acquire(tenure_tests::acquire_request(&resource, "loader", TTL))
                .await
            {
                Ok(reply) if reply.granted => {
                    let lease = reply.lease.expect("a granted lease");
                    if lease.fencing_token <= last_token {
                        failures.push(format!(
                            "token went backwards: {} after {last_token}",
                            lease.fencing_token
                        ));
                    }
                    last_token = lease.fencing_token;
                    if let Err(e) = client.release(release_request(&lease)).await {
                        failures.push(format!("release {resource}: {e}"));
                    }
                }
                Ok(reply) => failures.push(format!("acquire {resource} not granted: {reply:?}")),
                Err(e) => failures.push(format!("acquire {resource}: {e}")),
            }
            match client.renew(renew_request(&held, TTL)).await {
                Ok(renewed) => {
                    let token = renewed.lease.map(|l| l.fencing_token);
                    if token != Some(held.fencing_token) {
                        failures.push(format!("renew changed the token: {token:?}"));
                    }
                }
                Err(e) => failures.push(format!("renew: {e}")),
            }
            cycles += 1;
        }
        (cycles, failures)
    });
    Load { stop, task }
}

impl Load {
    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let (cycles, failures) = self.task.await.expect("load task");
        assert!(failures.is_empty(), "the load failed: {failures:#?}");
        assert!(cycles > 0, "the load made no progress");
        cycles
    }
}

/// The voters and learners the leader reports, as sorted ids.
fn roles(response: &tenure_client::pb::MembershipResponse) -> (Vec<u64>, Vec<u64>) {
    let mut voters: Vec<u64> = response
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.id)
        .collect();
    let mut learners: Vec<u64> = response
        .members
        .iter()
        .filter(|m| !m.voter)
        .map(|m| m.id)
        .collect();
    voters.sort_unstable();
    learners.sort_unstable();
    (voters, learners)
}

/// Node `id` has applied the leader's state so far and holds `resource` with `token`.
async fn replicated(cluster: &InProcessCluster, leader: u64, id: u64, resource: &str, token: u64) {
    cluster
        .applied_at_least(id, cluster.applied_index(leader))
        .await;
    let leases = cluster.local_leases(id, resource);
    assert!(
        leases.iter().any(|(_, t)| *t == token),
        "node {id} holds {leases:?} on {resource}, not token {token}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grow_to_five_and_shrink_back_to_three_under_load() {
    let (mut cluster, _) = started(3).await;
    let client = cluster.client();
    let held = granted(&client, "held/grow", "keeper", TTL).await;
    let load = load(client.clone(), held.clone());

    let mut joined = Vec::new();
    for id in [4, 5] {
        let addr = cluster.join(id, None).await.expect("start a joiner");
        let added = client.add_learner(id, &addr, true).await.expect("add");
        assert!(added.caught_up, "learner {id} caught up: {added:?}");
        assert!(
            roles(&added).1.contains(&id),
            "{id} is a learner: {added:?}"
        );
        joined.push(addr);
    }
    let promoted = client
        .change_membership(vec![4, 5], Vec::new())
        .await
        .expect("promote");
    assert_eq!(roles(&promoted), (vec![1, 2, 3, 4, 5], vec![]));
    assert!(promoted.log_index > 0);

    // The new voters have the whole state, the held lease included.
    let leader = cluster.leader(ELECTION).await.expect("a leader of five");
    for id in [4, 5] {
        replicated(&cluster, leader, id, "held/grow", held.fencing_token).await;
    }
    // A client of the new members only works.
    let newcomer = Client::new(&joined).expect("client of 4 and 5");
    let lease = granted(&newcomer, "via/newcomers", "n", TTL).await;
    assert!(lease.fencing_token > held.fencing_token);

    let shrunk = client
        .change_membership(Vec::new(), vec![4, 5])
        .await
        .expect("remove 4 and 5");
    assert_eq!(roles(&shrunk), (vec![1, 2, 3], vec![]));
    // Removing them again changes nothing (a retried call must not fail).
    let again = client
        .change_membership(Vec::new(), vec![4, 5])
        .await
        .expect("remove again");
    assert_eq!(again.log_index, 0);
    cluster.stop(4).await;
    cluster.stop(5).await;

    let cycles = load.finish().await;
    let resource = get_resource(&client, "held/grow").await.expect("read");
    let tokens: Vec<u64> = resource.leases.iter().map(|l| l.fencing_token).collect();
    assert_eq!(
        tokens,
        [held.fencing_token],
        "the held lease survived ({cycles} cycles)"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removing_the_leader_elects_another_and_keeps_the_leases() {
    let (mut cluster, _) = started(3).await;
    let client = cluster.client();
    let held = granted(&client, "held/leader", "keeper", TTL).await;
    let load = load(client.clone(), held.clone());
    let old = cluster.leader(ELECTION).await.expect("a leader");

    let changed = client
        .change_membership(Vec::new(), vec![old])
        .await
        .expect("remove the leader");
    let (voters, learners) = roles(&changed);
    assert!(!voters.contains(&old) && learners.is_empty(), "{changed:?}");
    // The old leader committed its own removal, so it knows: it sends clients elsewhere.
    let removed = cluster.client_of(old).with_timeout(Duration::from_secs(1));
    match removed
        .acquire(tenure_tests::acquire_request("on/removed", "r", TTL))
        .await
    {
        Err(tenure_client::Error::Status { code, message, .. }) => {
            assert_eq!(code, Code::Unavailable, "{message}");
            assert!(message.contains("not a member"), "{message}");
        }
        other => panic!("a removed node served an acquire: {other:?}"),
    }
    cluster.stop(old).await;

    let new = cluster.leader(ELECTION).await.expect("a new leader");
    assert_ne!(new, old);
    let cycles = load.finish().await;
    let after = granted(&client, "after/removal", "k", TTL).await;
    assert!(after.fencing_token > held.fencing_token);
    for id in cluster.live_ids() {
        replicated(&cluster, new, id, "held/leader", held.fencing_token).await;
    }
    assert!(cycles > 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_node_rejoins_under_a_new_id() {
    let (mut cluster, _) = started(3).await;
    let client = cluster.client();
    let held = granted(&client, "held/wipe", "keeper", TTL).await;
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    let lost = cluster.follower_of(leader);
    let addr = cluster.wipe(lost).await.expect("wipe");
    // Clients of the surviving members (the lost address will be a node not yet added).
    let client = Client::new(cluster.addrs.values()).expect("client of the survivors");

    // Its address still belongs to member `lost`: a new id there is refused until it goes.
    let fresh = 4;
    cluster
        .join(fresh, Some(&addr))
        .await
        .expect("restart empty");
    refused(
        "a new id at a member's address",
        client.add_learner(fresh, &addr, true).await,
        Code::AlreadyExists,
        "already_exists",
    );
    client
        .change_membership(Vec::new(), vec![lost])
        .await
        .expect("remove the lost node");
    let added = client.add_learner(fresh, &addr, true).await.expect("add");
    assert!(added.caught_up, "{added:?}");
    let promoted = client
        .change_membership(vec![fresh], Vec::new())
        .await
        .expect("promote");
    let (voters, _) = roles(&promoted);
    assert!(
        voters.contains(&fresh) && !voters.contains(&lost),
        "{promoted:?}"
    );

    let leader = cluster.leader(ELECTION).await.expect("a leader");
    replicated(&cluster, leader, fresh, "held/wipe", held.fencing_token).await;
    let after = granted(&client, "after/wipe", "k", TTL).await;
    assert!(after.fencing_token > held.fencing_token);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leadership_moves_to_the_voter_asked_for() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let held = granted(&client, "held/transfer", "keeper", TTL).await;
    let load = load(client.clone(), held.clone());
    let old = cluster.leader(ELECTION).await.expect("a leader");
    let target = cluster.follower_of(old);

    let moved = client.transfer_leader(target).await.expect("transfer");
    assert!(moved.transferred && moved.detail.is_empty(), "{moved:?}");
    assert_eq!((moved.previous_leader_id, moved.leader_id), (old, target));
    assert_eq!(cluster.leader(ELECTION).await.expect("a leader"), target);

    // To nobody in particular: another voter than before.
    let again = client.transfer_leader(0).await.expect("transfer");
    assert!(again.transferred && again.leader_id != target, "{again:?}");
    // To the leader itself: nothing to do.
    let same = client
        .transfer_leader(again.leader_id)
        .await
        .expect("no-op");
    assert!(
        same.transferred && same.leader_id == again.leader_id,
        "{same:?}"
    );

    load.finish().await;
    let resource = get_resource(&client, "held/transfer").await.expect("read");
    let tokens: Vec<u64> = resource.leases.iter().map(|l| l.fencing_token).collect();
    assert_eq!(tokens, [held.fencing_token]);
    cluster.shutdown().await;
}

/// SIGTERM on the leader (a graceful stop) hands leadership over before the node goes: it
/// sees its successor elected, in the next term, instead of leaving the others to wait out
/// its lease and elect one after it is gone. Leases and tokens are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_stopped_gracefully_hands_leadership_over_first() {
    let (mut cluster, _) = started(3).await;
    let client = cluster.client();
    let held = granted(&client, "held", "holder", TTL).await;
    let old = cluster.leader(ELECTION).await.expect("a leader");
    let term = cluster
        .node(old)
        .raft
        .metrics()
        .borrow_watched()
        .current_term;
    let mut watch = cluster.node(old).raft.metrics();
    let successor = tokio::spawn(async move {
        let seen = tenure_node::store::wait_metrics(&mut watch, |m| {
            m.current_leader.is_some_and(|l| l != old)
        })
        .await?;
        seen.current_leader
    });
    cluster.stop(old).await;
    // Resolves (or ends with None, when the old leader's Raft stops without one).
    let successor = tokio::time::timeout(ELECTION, successor)
        .await
        .expect("the old leader's metrics ended")
        .expect("watch task")
        .expect("the old leader saw its successor before it stopped");
    assert_eq!(cluster.leader(ELECTION).await.expect("a leader"), successor);
    let now = cluster
        .node(successor)
        .raft
        .metrics()
        .borrow_watched()
        .current_term;
    assert_eq!(now, term + 1, "one election, the hand-over's");
    let renewed = client
        .renew(renew_request(&held, TTL))
        .await
        .expect("renew after the hand-over");
    assert_eq!(
        renewed.lease.map(|l| l.fencing_token),
        Some(held.fencing_token)
    );
    let after = granted(&client, "after/stop", "k", TTL).await;
    assert!(after.fencing_token > held.fencing_token);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transfer_to_a_stopped_voter_is_declined_and_the_leader_stays() {
    let (mut cluster, _) = started(3).await;
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    let down = cluster.follower_of(leader);
    cluster.kill(down).await;
    let client = cluster.client_of(leader);
    // Committed while `down` is gone, so it is behind.
    granted(&client, "while/down", "k", TTL).await;
    let term = cluster
        .node(leader)
        .raft
        .metrics()
        .borrow_watched()
        .current_term;
    let declined = client.transfer_leader(down).await.expect("answered");
    assert!(!declined.transferred, "{declined:?}");
    assert!(declined.detail.contains("behind"), "{declined:?}");
    assert_eq!(cluster.leader(ELECTION).await.expect("a leader"), leader);
    let after = cluster
        .node(leader)
        .raft
        .metrics()
        .borrow_watched()
        .current_term;
    assert_eq!(after, term, "a declined transfer caused no election");
    // Writes go on.
    granted(&client, "after/declined", "k", TTL).await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn raft_messages_for_another_node_id_are_refused() {
    let (cluster, _) = started(3).await;
    let mut raft = tenure_proto::raft::v1::raft_client::RaftClient::connect(format!(
        "http://{}",
        cluster.addrs[&2]
    ))
    .await
    .expect("connect");
    let mut request = tonic::Request::new(tenure_proto::raft::v1::RaftBytes { data: vec![] });
    request
        .metadata_mut()
        .insert("tenure-raft-to", "7".parse().expect("ascii"));
    let status = raft
        .append_entries(request)
        .await
        .expect_err("a message for node 7 at node 2");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("this is node 2"), "{status:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_snapshot_on_demand_covers_what_was_applied() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    granted(&client, "held/snapshot", "keeper", TTL).await;
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    let applied = cluster.applied_index(leader);
    let position = cluster
        .live_ids()
        .iter()
        .position(|id| *id == leader)
        .expect("the leader's endpoint");
    let snapshot = client
        .node_snapshot(position, false)
        .await
        .expect("snapshot");
    assert!(snapshot.last_index >= applied, "{snapshot:?} vs {applied}");
    assert!(snapshot.bytes > 0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn bad_membership_changes_are_refused_with_the_reason() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let invalid = |what| (what, Code::InvalidArgument, "invalid_argument");
    for (what, result) in [
        ("id 0", client.add_learner(0, "127.0.0.1:1", false).await),
        ("no port", client.add_learner(9, "127.0.0.1", false).await),
        ("port 0", client.add_learner(9, "127.0.0.1:0", false).await),
    ] {
        let (what, code, reason) = invalid(what);
        refused(what, result, code, reason);
    }
    refused(
        "a voter at another address",
        client.add_learner(2, "127.0.0.1:9", false).await,
        Code::AlreadyExists,
        "already_exists",
    );
    refused(
        "a new id at a member's address",
        client.add_learner(9, &cluster.addrs[&2], false).await,
        Code::AlreadyExists,
        "already_exists",
    );
    let same = client
        .add_learner(2, &cluster.addrs[&2], false)
        .await
        .expect("a voter at its own address is already there");
    assert_eq!(same.log_index, 0);
    for (what, result) in [
        (
            "nothing to do",
            client.change_membership(vec![], vec![]).await,
        ),
        (
            "promote a stranger",
            client.change_membership(vec![9], vec![]).await,
        ),
        (
            "promote and remove",
            client.change_membership(vec![2], vec![2]).await,
        ),
        (
            "no voter left",
            client.change_membership(vec![], vec![1, 2, 3]).await,
        ),
    ] {
        let (what, code, reason) = invalid(what);
        refused(what, result, code, reason);
    }
    refused(
        "transfer to a stranger",
        client.transfer_leader(9).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    // Nothing changed.
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    let metrics = cluster.node(leader).raft.metrics().borrow_watched().clone();
    let voters: Vec<u64> = metrics.membership_config.membership().voter_ids().collect();
    assert_eq!(voters, [1, 2, 3]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_behind_the_purged_log_catches_up_from_a_snapshot() {
    // Snapshot after 20 entries and keep no log behind it: a new member cannot be sent the
    // log from the start, only the leader's snapshot.
    let flags = ["--snapshot-every", "20", "--snapshot-keep-logs", "0"];
    let extra = tenure_tests::same_flags(3, &flags);
    let (mut cluster, leader) = started_with(3, extra).await;
    let client = cluster.client();
    let held = granted(&client, "held/snapshot", "keeper", TTL).await;
    for i in 0..40 {
        granted(&client, &format!("fill/{i}"), "f", TTL).await;
    }
    cluster
        .node(leader)
        .raft
        .wait(Some(ELECTION))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index > held.fencing_token),
            "the leader purged its log past the held lease's entry",
        )
        .await
        .expect("a purge");

    let addr = cluster.join(4, None).await.expect("start a joiner");
    let added = client.add_learner(4, &addr, true).await.expect("add");
    assert!(added.caught_up, "{added:?}");
    let installed =
        tenure_node::store::StorageStats::get(&cluster.node(4).sm.stats.snapshots_installed);
    assert!(
        installed >= 1,
        "the learner installed {installed} snapshots"
    );
    replicated(&cluster, leader, 4, "held/snapshot", held.fencing_token).await;
    cluster.shutdown().await;
}
