//! Quotas per principal through the API (SPEC §4.17): an admin sets them with `SetQuota`, every
//! node refuses past them with `resource_exhausted` naming the quota, retries of remembered
//! requests still answer, watches count per node, and `Status` shows who is nearest a limit.

use std::time::Duration;

use crate::as_;
use tenure_client::pb;
use tenure_tests::{acquire_request, granted, ids, refused, secure, ADMIN, ALICE, BOB};
use tonic::Code;

const TTL: Duration = Duration::from_secs(60);

fn set(principal: &str, quota: &str, limit: u64) -> pb::SetQuotaRequest {
    pb::SetQuotaRequest {
        principal: principal.into(),
        changes: vec![pb::QuotaChange {
            quota: quota.into(),
            limit,
            reset: false,
        }],
        request_id: String::new(),
    }
}

fn line<'a>(reply: &'a pb::QuotaResponse, quota: &str) -> &'a pb::QuotaLine {
    reply
        .quotas
        .iter()
        .find(|l| l.quota == quota)
        .unwrap_or_else(|| panic!("no {quota} in {reply:?}"))
}

#[track_caller]
fn over_quota<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, tenure_client::Error>,
    quota: &str,
) {
    match result {
        Err(tenure_client::Error::Status {
            code: Code::ResourceExhausted,
            reason,
            message,
        }) if reason == "resource_exhausted" => {
            assert!(
                message.contains(&format!("its {quota} quota")),
                "{what}: {message}"
            );
        }
        other => panic!("{what}: expected the {quota} quota, got {other:?}"),
    }
}

#[tokio::test]
async fn an_admin_sets_a_lease_quota_every_node_enforces_it_and_retries_still_answer() {
    let (cluster, _) = secure(3, &[]).await;
    let admin = as_(&cluster.client(), ADMIN);
    let alice = as_(&cluster.client(), ALICE);

    refused(
        "alice sets her own quota",
        alice.set_quota(set("alice", "leases", 1_000_000)).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    refused(
        "an unknown quota",
        admin.set_quota(set("alice", "lease", 2)).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    let reply = admin
        .set_quota(set("alice", "leases", 2))
        .await
        .expect("set");
    assert_eq!(line(&reply, "leases").limit, 2);
    assert!(line(&reply, "leases").overridden);

    let first_request = pb::AcquireRequest {
        request_id: "t98-first".into(),
        ..acquire_request("q1", "a", TTL)
    };
    let first = alice.acquire(first_request.clone()).await.expect("first");
    assert!(first.granted);
    granted(&alice, "q2", "a", TTL).await;
    over_quota(
        "a third lease",
        alice.acquire(acquire_request("q3", "a", TTL)).await,
        "leases",
    );
    // Every node: each refuses alike, because the quota is in the log.
    for id in ids(3) {
        let via = as_(&cluster.client_of(id), ALICE);
        over_quota(
            &format!("via node {id}"),
            via.acquire(acquire_request("q3", "a", TTL)).await,
            "leases",
        );
    }
    // A retry of a granted acquire is no new lease: the same answer.
    let again = alice.acquire(first_request).await.expect("retry");
    assert_eq!(again.lease, first.lease);
    // Bob is not alice.
    granted(&as_(&cluster.client(), BOB), "q3", "b", TTL).await;

    let got = admin.get_quota("alice").await.expect("get");
    assert_eq!(
        (line(&got, "leases").used, line(&got, "leases").limit),
        (2, 2)
    );
    assert!(line(&got, "exactly_once_bytes").used > 0);
    let status = admin.node_status(0).await.expect("status");
    assert!(
        status.top_principals.iter().any(|p| p.principal == "alice"),
        "{:?}",
        status.top_principals
    );

    // Back to the default: room again.
    let reset = pb::SetQuotaRequest {
        changes: vec![pb::QuotaChange {
            quota: "leases".into(),
            limit: 0,
            reset: true,
        }],
        ..set("alice", "leases", 0)
    };
    let reply = admin.set_quota(reset).await.expect("reset");
    assert!(!line(&reply, "leases").overridden);
    granted(&alice, "q4", "a", TTL).await;
}

#[tokio::test]
async fn watches_count_per_principal_on_each_node() {
    let (cluster, _) = secure(3, &[]).await;
    let admin = as_(&cluster.client(), ADMIN);
    admin
        .set_quota(set("alice", "watches", 1))
        .await
        .expect("set");
    let node = ids(3)[0];
    let alice = as_(&cluster.client_of(node), ALICE);
    let watch = pb::WatchRequest {
        resource: "w".into(),
        ..Default::default()
    };
    // The quota is in the log: wait until this node applied it, by asking it.
    let on_node = as_(&cluster.client_of(node), ADMIN);
    for _ in 0..200 {
        let got = on_node.get_quota("alice").await.expect("get");
        if line(&got, "watches").limit == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let first = alice.watch(watch.clone()).await.expect("first watch");
    over_quota(
        "a second watch",
        alice.watch(watch.clone()).await,
        "watches",
    );
    let got = on_node.get_quota("alice").await.expect("get");
    assert_eq!(line(&got, "watches").used, 1);
    // Another node counts its own.
    let elsewhere = as_(&cluster.client_of(ids(3)[1]), ALICE);
    let _other = elsewhere
        .watch(watch.clone())
        .await
        .expect("a watch on another node");
    drop(first);
    // The place frees when the stream ends; the node sees the end shortly after.
    let mut opened = None;
    for _ in 0..200 {
        match alice.watch(watch.clone()).await {
            Ok(stream) => {
                opened = Some(stream);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
    assert!(opened.is_some(), "the first watch's place was never freed");
}

#[tokio::test]
async fn a_watch_of_every_resource_needs_an_admin_or_a_quota_of_its_own() {
    let (cluster, _) = secure(3, &[]).await;
    let node = ids(3)[0];
    let everything = pb::WatchRequest::default();
    let bob = as_(&cluster.client_of(node), BOB);
    over_quota(
        "bob watches every resource",
        bob.watch(everything.clone()).await,
        "all_resource_watches",
    );
    // A prefix is fine; so is an admin's watch of everything.
    let prefix = pb::WatchRequest {
        prefix: "jobs/".into(),
        ..Default::default()
    };
    let _jobs = bob.watch(prefix).await.expect("a prefix watch");
    let admin = as_(&cluster.client_of(node), ADMIN);
    let _all = admin
        .watch(everything.clone())
        .await
        .expect("an admin's watch");
    admin
        .set_quota(set("bob", "all_resource_watches", 1))
        .await
        .expect("set");
    for _ in 0..200 {
        let got = admin.get_quota("bob").await.expect("get");
        if line(&got, "all_resource_watches").limit == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _bobs = bob.watch(everything).await.expect("allowed by its quota");
}

/// A lease may be handed only to a principal of the token file: one handed to a name nobody
/// can call as would count against no one's quota.
#[tokio::test]
async fn a_lease_goes_only_to_a_principal_of_the_token_file() {
    let (cluster, _) = secure(3, &[]).await;
    let admin = as_(&cluster.client(), ADMIN);
    admin
        .create_resource(pb::CreateResourceRequest {
            name: "handover".into(),
            policy: Some(pb::Policy {
                transferable: true,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("create");
    let alice = as_(&cluster.client(), ALICE);
    let lease = granted(&alice, "handover", "a", TTL).await;
    let to = |principal: &str| pb::TransferRequest {
        resource: lease.resource.clone(),
        lease_id: lease.lease_id.clone(),
        holder: lease.holder.clone(),
        fencing_token: lease.fencing_token,
        to_holder: "b".into(),
        to_principal: principal.into(),
        ..Default::default()
    };
    refused(
        "to a principal with no token",
        admin.transfer(to("ghost")).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    let moved = admin.transfer(to("bob")).await.expect("to bob");
    assert_eq!(moved.lease.expect("the new lease").principal, "bob");
}

/// A principal that lists faster than `--read-rate-per-principal` waits for its turn (the
/// node counts it in `tenure_reads_paced_total`) and still gets its answer; another principal
/// and an admin are not held back by it.
#[tokio::test]
async fn a_principal_listing_past_its_read_rate_waits_and_others_do_not() {
    let (cluster, _) = secure(3, &["--read-rate-per-principal=1000"]).await;
    let node = cluster.node(1).clone();
    let admin = as_(&cluster.client_of(1), ADMIN);
    let alice = as_(&cluster.client_of(1), ALICE);
    let bob = as_(&cluster.client_of(1), BOB);
    granted(&alice, "r1", "a", TTL).await;
    let page = |principal: &str| pb::ListLeasesRequest {
        principal: principal.into(),
        page_size: 1000,
        consistency: pb::Consistency::Stale as i32,
        ..Default::default()
    };
    let paced = || node.read_pacer.paced.get();
    // A full page is alice's second's worth: the first is not paced, the second (sent right
    // after) waits for her pace, then answers in full.
    let listed = alice.list_leases(page("alice")).await.expect("first page");
    assert_eq!(listed.leases.len(), 1);
    assert_eq!(paced(), 0);
    let listed = alice.list_leases(page("alice")).await.expect("second page");
    assert_eq!(listed.leases.len(), 1);
    assert_eq!(paced(), 1);
    // Bob and the admin read as much at once: bob has a pace of his own, the admin none.
    bob.list_leases(page("bob")).await.expect("bob");
    admin.list_leases(page("alice")).await.expect("admin");
    admin.list_leases(page("alice")).await.expect("admin again");
    assert_eq!(paced(), 1);
}
