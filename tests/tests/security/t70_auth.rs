//! Auth (SPEC §6, §3): bearer tokens map to principals and roles. With `--token-file`, a call
//! without a known token is `unauthenticated`, whatever its body; only an admin registers; only
//! a lease's principal or an admin renews, releases or transfers it; and a follower that
//! forwards a call keeps the caller's principal.

use std::time::Duration;

use crate::as_;
use tenure_client::{pb, Client};
use tenure_tests::cli::Cli;
use tenure_tests::{
    acquire_request, granted, ids, refused, release_request, secure, ADMIN, ALICE, BOB, PEER,
};
use tonic::Code;

const TTL: Duration = Duration::from_secs(60);

fn registered(name: &str, transferable: bool) -> pb::CreateResourceRequest {
    pb::CreateResourceRequest {
        name: name.into(),
        policy: Some(pb::Policy {
            transferable,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn renew(lease: &pb::Lease) -> pb::RenewRequest {
    pb::RenewRequest {
        resource: lease.resource.clone(),
        lease_id: lease.lease_id.clone(),
        holder: lease.holder.clone(),
        fencing_token: lease.fencing_token,
        ..Default::default()
    }
}

fn transfer(lease: &pb::Lease, to_holder: &str, to_principal: &str) -> pb::TransferRequest {
    pb::TransferRequest {
        resource: lease.resource.clone(),
        lease_id: lease.lease_id.clone(),
        holder: lease.holder.clone(),
        fencing_token: lease.fencing_token,
        to_holder: to_holder.into(),
        to_principal: to_principal.into(),
        ..Default::default()
    }
}

async fn leases_on(client: &Client, resource: &str) -> Vec<pb::Lease> {
    client
        .get_resource(pb::GetResourceRequest {
            name: resource.into(),
            consistency: 0,
        })
        .await
        .expect("get_resource as admin")
        .resource
        .expect("a resource")
        .leases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_unknown_tokens_are_unauthenticated_before_the_body_is_read() {
    let (cluster, _) = secure(3, &[]).await;
    let anonymous = cluster.client();
    let stranger = as_(&anonymous, "not-a-known-token");
    let admin = as_(&anonymous, ADMIN);
    const UNAUTHENTICATED: (Code, &str) = (Code::Unauthenticated, "unauthenticated");

    for (who, client) in [("no token", &anonymous), ("unknown token", &stranger)] {
        let (code, reason) = UNAUTHENTICATED;
        refused(
            &format!("{who}: acquire"),
            client.acquire(acquire_request("t70/a", "h", TTL)).await,
            code,
            reason,
        );
        refused(
            &format!("{who}: create_resource"),
            client.create_resource(registered("t70/a-reg", false)).await,
            code,
            reason,
        );
        refused(
            &format!("{who}: get_resource"),
            client
                .get_resource(pb::GetResourceRequest {
                    name: "t70/a".into(),
                    consistency: 0,
                })
                .await,
            code,
            reason,
        );
        refused(
            &format!("{who}: validate"),
            client
                .validate(pb::ValidateRequest {
                    resource: "t70/a".into(),
                    fencing_token: 1,
                    ..Default::default()
                })
                .await,
            code,
            reason,
        );
        refused(
            &format!("{who}: list_leases"),
            client
                .list_leases(pb::ListLeasesRequest {
                    principal: "alice".into(),
                    ..Default::default()
                })
                .await,
            code,
            reason,
        );
        // The caller is checked from the headers, before the body is read: even a call whose
        // arguments are bad is refused as unauthenticated.
        refused(
            &format!("{who}: acquire with a bad resource name"),
            client.acquire(acquire_request("bad name", "h", TTL)).await,
            code,
            reason,
        );
        refused(
            &format!("{who}: history with page_size 1001"),
            client
                .history(pb::HistoryRequest {
                    resource: "t70/a".into(),
                    page_size: 1_001,
                    ..Default::default()
                })
                .await,
            code,
            reason,
        );
        refused(
            &format!("{who}: create_resource with EXCLUSIVE as a shared mode"),
            client
                .create_resource(pb::CreateResourceRequest {
                    name: "t70/a-reg".into(),
                    policy: Some(pb::Policy {
                        shared_modes: vec![pb::LeaseMode::Exclusive as i32],
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await,
            code,
            reason,
        );
    }
    // Nothing was acquired or registered.
    assert!(leases_on(&admin, "t70/a").await.is_empty());
    let resource = admin
        .get_resource(pb::GetResourceRequest {
            name: "t70/a-reg".into(),
            consistency: 0,
        })
        .await
        .expect("get_resource")
        .resource
        .expect("a resource");
    assert!(resource.ad_hoc, "{resource:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_registers_and_only_the_principal_or_an_admin_changes_a_lease() {
    let (cluster, _) = secure(3, &[]).await;
    let client = cluster.client();
    let (admin, alice, bob) = (as_(&client, ADMIN), as_(&client, ALICE), as_(&client, BOB));
    const DENIED: (Code, &str) = (Code::PermissionDenied, "insufficient_permissions");

    refused(
        "alice registers",
        alice.create_resource(registered("t70/reg", true)).await,
        DENIED.0,
        DENIED.1,
    );
    let resource = admin
        .create_resource(registered("t70/reg", true))
        .await
        .expect("the admin registers")
        .resource
        .expect("a resource");
    assert!(!resource.ad_hoc && resource.policy.is_some_and(|p| p.transferable));

    let lease = granted(&alice, "t70/reg", "alice-h", TTL).await;
    assert_eq!(lease.principal, "alice");
    refused(
        "bob renews alice's lease",
        bob.renew(renew(&lease)).await,
        DENIED.0,
        DENIED.1,
    );
    refused(
        "bob releases alice's lease",
        bob.release(release_request(&lease)).await,
        DENIED.0,
        DENIED.1,
    );
    refused(
        "bob transfers alice's lease to himself",
        bob.transfer(transfer(&lease, "bob-h", "bob")).await,
        DENIED.0,
        DENIED.1,
    );
    let held = leases_on(&admin, "t70/reg").await;
    assert_eq!(
        held.iter()
            .map(|l| (l.holder.as_str(), l.fencing_token))
            .collect::<Vec<_>>(),
        [("alice-h", lease.fencing_token)],
        "bob changed nothing"
    );

    // Alice may; the admin may too.
    alice.renew(renew(&lease)).await.expect("alice renews");
    let renewed = admin.renew(renew(&lease)).await.expect("the admin renews");
    assert_eq!(renewed.lease.map(|l| l.principal).as_deref(), Some("alice"));
    let released = admin
        .release(release_request(&lease))
        .await
        .expect("the admin releases alice's lease")
        .lease
        .expect("the released lease");
    assert_eq!(released.status, pb::LeaseStatus::Released as i32);
    assert!(leases_on(&admin, "t70/reg").await.is_empty());

    // A transfer to another principal (an admin's call) hands over the right to change the
    // lease.
    let lease = granted(&alice, "t70/reg", "alice-h", TTL).await;
    let moved = admin
        .transfer(transfer(&lease, "bob-h", "bob"))
        .await
        .expect("the admin transfers alice's lease to bob")
        .lease
        .expect("the new lease");
    assert_eq!(
        (moved.holder.as_str(), moved.principal.as_str()),
        ("bob-h", "bob")
    );
    refused(
        "alice renews bob's lease",
        alice.renew(renew(&moved)).await,
        DENIED.0,
        DENIED.1,
    );
    bob.renew(renew(&moved))
        .await
        .expect("bob renews his lease");
    let listed = bob
        .list_leases(pb::ListLeasesRequest {
            principal: "bob".into(),
            ..Default::default()
        })
        .await
        .expect("list_leases");
    assert_eq!(
        listed
            .leases
            .iter()
            .map(|l| l.lease_id.as_str())
            .collect::<Vec<_>>(),
        [moved.lease_id.as_str()]
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_a_follower_keeps_the_callers_principal() {
    let (cluster, leader) = secure(3, &[]).await;
    let follower = ids(3)
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let through = cluster.client_of(follower);
    let (admin, alice, bob) = (
        as_(&through, ADMIN),
        as_(&through, ALICE),
        as_(&through, BOB),
    );
    const DENIED: (Code, &str) = (Code::PermissionDenied, "insufficient_permissions");

    // The follower authenticates before it forwards.
    refused(
        "no token, through a follower",
        through.acquire(acquire_request("t70/fwd", "h", TTL)).await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    refused(
        "alice registers, through a follower",
        alice.create_resource(registered("t70/fwd-reg", true)).await,
        DENIED.0,
        DENIED.1,
    );
    admin
        .create_resource(registered("t70/fwd-reg", true))
        .await
        .expect("the admin registers through a follower");

    let lease = granted(&alice, "t70/fwd", "alice-h", TTL).await;
    assert_eq!(lease.principal, "alice");
    let on_leader = cluster.client_of(leader).with_token(ADMIN).expect("token");
    let seen = leases_on(&on_leader, "t70/fwd").await;
    assert_eq!(
        seen.iter()
            .map(|l| (l.holder.as_str(), l.principal.as_str()))
            .collect::<Vec<_>>(),
        [("alice-h", "alice")]
    );
    refused(
        "bob renews alice's lease, through a follower",
        bob.renew(renew(&lease)).await,
        DENIED.0,
        DENIED.1,
    );

    let lease = granted(&alice, "t70/fwd-reg", "alice-h", TTL).await;
    let moved = alice
        .transfer(transfer(&lease, "carol-h", ""))
        .await
        .expect("a transfer through a follower")
        .lease
        .expect("the new lease");
    assert_eq!(
        (moved.holder.as_str(), moved.principal.as_str()),
        ("carol-h", "alice")
    );
    assert!(moved.fencing_token > lease.fencing_token);

    let history = alice
        .history(pb::HistoryRequest {
            resource: "t70/fwd-reg".into(),
            order: pb::Order::Asc as i32,
            ..Default::default()
        })
        .await
        .expect("history through a follower");
    let actors: Vec<(i32, &str)> = history
        .entries
        .iter()
        .map(|e| (e.event, e.actor.as_str()))
        .collect();
    assert_eq!(
        actors,
        [
            (pb::EventType::Registered as i32, "root"),
            (pb::EventType::Acquired as i32, "alice"),
            (pb::EventType::Transferred as i32, "alice"),
        ]
    );
    cluster.shutdown().await;
}

/// The internal Raft service shares the port: with auth on it takes only the peer token, so a
/// client cannot hand a node a command in another principal's name (no token or an unknown
/// one: unauthenticated; a client's or admin's: permission denied); the client API refuses
/// the peer token.
#[tokio::test]
async fn the_internal_raft_service_takes_only_the_peer_token() {
    tenure_tests::init_tracing();
    let (cluster, leader) = secure(3, &[]).await;
    let addr = cluster.node(leader).addr.clone();
    let mut raft =
        tenure_proto::raft::v1::raft_client::RaftClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
    let forged = |token: Option<&str>| {
        let mut request = tonic::Request::new(tenure_proto::raft::v1::RaftBytes {
            data: br#"{"principal":"alice","admin":true}"#.to_vec(),
        });
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().expect("ascii");
            request.metadata_mut().insert("authorization", value);
        }
        request
    };
    for (token, code) in [
        (None, Code::Unauthenticated),
        (Some("nope"), Code::Unauthenticated),
        (Some(ADMIN), Code::PermissionDenied),
        (Some(ALICE), Code::PermissionDenied),
    ] {
        let status = raft.propose(forged(token)).await.expect_err("refused");
        assert_eq!(status.code(), code, "{token:?}: {status:?}");
    }
    // The peer token passes the door; the forged body then fails to decode.
    let status = raft
        .propose(forged(Some(PEER)))
        .await
        .expect_err("bad body");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    let as_peer = as_(&cluster.client(), PEER);
    refused(
        "the peer token on the client API",
        as_peer.acquire(acquire_request("t70/peer", "h", TTL)).await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    cluster.shutdown().await;
}

/// SPEC §2: the Cluster service is admin only.
#[tokio::test]
async fn cluster_status_is_for_admins() {
    tenure_tests::init_tracing();
    let (cluster, _leader) = secure(3, &[]).await;
    let client = cluster.client();
    refused(
        "status without a token",
        client.node_status(0).await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    refused(
        "status as a client",
        as_(&client, ALICE).node_status(0).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    let status = as_(&client, ADMIN)
        .node_status(0)
        .await
        .expect("an admin reads it");
    assert!(status.leader_id > 0, "{status:?}");
    cluster.shutdown().await;
}

/// The CLI tells a node that refused the caller from one that did not answer: without a token
/// every node answered `unauthenticated`, and the CLI says so and says how to give one.
#[tokio::test]
async fn the_cli_says_a_node_that_refused_a_caller_answered() {
    tenure_tests::init_tracing();
    let (cluster, _leader) = secure(3, &[]).await;
    let endpoints = cluster.addrs.values().cloned().collect::<Vec<_>>();
    let cli = Cli::of(&endpoints);
    let text = cli.run("--output text cluster status").await;
    let stdout = text.stdout;
    for endpoint in &endpoints {
        assert!(
            stdout.contains(&format!("{endpoint}  answered: unauthenticated")),
            "{stdout}"
        );
    }
    assert!(!stdout.contains("unreachable"), "{stdout}");
    assert!(stdout.contains("TENURE_TOKEN or --auth-token"), "{stdout}");
    let (_, rows) = cli.json("cluster status").await;
    let rows = rows.as_array().expect("one row per endpoint");
    assert_eq!(rows.len(), endpoints.len(), "{rows:?}");
    assert!(rows.iter().all(|row| row["reachable"] == true), "{rows:?}");
    cluster.shutdown().await;
}
