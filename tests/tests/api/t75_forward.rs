//! Forward to owner (SPEC §4.9): the exclusive holder serves an inbox; `Forward` from any
//! client, through any node, delivers the payload with the owner's fencing token and returns
//! the owner's reply; a request is re-sent (at most 3 deliveries) only when it provably was not
//! processed, never after a timeout; and the §3 errors `no_owner`, `owner_unavailable`,
//! `owner_timeout`, `reply_too_large`.
//!
//! Owners run as tasks over the Rust client's `Inbox`. To know that an owner has seen every
//! delivery of an earlier forward, a test forwards `STOP` last: an inbox yields deliveries in
//! order, so once the owner sees `STOP` nothing earlier is still on its way.

use std::time::Duration;

use tenure_client::{pb, Client, Error, Inbox, MAX_PAYLOAD_BYTES};
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::{granted, ids, refused, register, release_request, secure, started, ALICE, BOB};
use tokio::task::JoinHandle;
use tonic::Code;
use tonic_types::StatusExt;

const TTL: Duration = Duration::from_secs(120);
/// Bounds every wait for an owner, so a lost delivery fails the test instead of stalling it.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
const STOP: &[u8] = b"stop";

/// What an owner does with a request.
#[derive(Clone)]
enum Act {
    Reply(Vec<u8>),
    Reject(&'static str),
    /// Keep it unanswered until the owner stops.
    Hold,
}

/// One request as the owner saw it, and whether its answer went through without an error.
#[derive(Debug)]
struct Seen {
    payload: Vec<u8>,
    fencing_token: u64,
    from_principal: String,
    request_id: String,
    answered: bool,
}

/// Serves `inbox` until `STOP` (answered `stopped`), acting on every other request with `act`;
/// returns what it saw before `STOP`.
fn serve_until_stop(
    mut inbox: Inbox,
    act: impl Fn(&[u8]) -> Act + Send + 'static,
) -> JoinHandle<Vec<Seen>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut held = Vec::new();
        loop {
            let request = tokio::time::timeout(CALL_TIMEOUT, inbox.next())
                .await
                .expect("a request in time")
                .expect("the inbox stays open")
                .expect("the node keeps the inbox");
            if request.payload() == STOP {
                request.reply(b"stopped".to_vec()).await.expect("reply");
                inbox.close().await.expect("a clean close");
                return seen;
            }
            let mut entry = Seen {
                payload: request.payload().to_vec(),
                fencing_token: request.fencing_token(),
                from_principal: request.from_principal().to_string(),
                request_id: request.request_id().to_string(),
                answered: true,
            };
            entry.answered = match act(request.payload()) {
                Act::Reply(payload) => request.reply(payload).await.is_ok(),
                Act::Reject(reason) => request.reject(reason).await.is_ok(),
                Act::Hold => {
                    held.push(request);
                    false
                }
            };
            seen.push(entry);
        }
    })
}

/// `Forward` with the tests' timeout.
async fn forward(
    client: &Client,
    resource: &str,
    payload: impl Into<Vec<u8>>,
) -> Result<pb::ForwardResponse, Error> {
    client
        .forward(resource, payload.into(), FORWARD_TIMEOUT)
        .await
}

/// Forwards `STOP` and returns what the owner saw before it.
async fn stop(client: &Client, resource: &str, owner: JoinHandle<Vec<Seen>>) -> Vec<Seen> {
    let reply = forward(client, resource, STOP)
        .await
        .expect("STOP forwarded");
    assert_eq!(reply.payload, b"stopped");
    owner.await.expect("the owner task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_delivers_the_payload_with_the_owners_token_and_returns_its_reply() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let lease = granted(&client, "t75/basic", "owner", TTL).await;
    let inbox = client.serve(&lease).await.expect("serve");
    assert_eq!(inbox.fencing_token(), lease.fencing_token);
    let owner = serve_until_stop(inbox, |payload| {
        Act::Reply([b"re: ".as_slice(), payload].concat())
    });

    let reply = client
        .forward_request(pb::ForwardRequest {
            resource: "t75/basic".into(),
            payload: b"ping".to_vec(),
            timeout: Some(tenure_client::prost_duration(FORWARD_TIMEOUT)),
            request_id: "t75-basic-1".into(),
        })
        .await
        .expect("forwarded");
    assert_eq!(reply.payload, b"re: ping");
    assert_eq!(reply.fencing_token, lease.fencing_token);
    assert_eq!(reply.owner_holder, "owner");
    assert_eq!(reply.attempts, 1);

    let seen = stop(&client, "t75/basic", owner).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].payload, b"ping");
    assert_eq!(seen[0].fencing_token, lease.fencing_token);
    assert_eq!(seen[0].from_principal, "anonymous");
    assert_eq!(seen[0].request_id, "t75-basic-1");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_without_an_exclusive_holder_is_no_owner() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    refused(
        "never held",
        forward(&client, "t75/nobody", "x").await,
        Code::FailedPrecondition,
        "no_owner",
    );
    let lease = granted(&client, "t75/released", "owner", TTL).await;
    client
        .release(release_request(&lease))
        .await
        .expect("release");
    refused(
        "released",
        forward(&client, "t75/released", "x").await,
        Code::FailedPrecondition,
        "no_owner",
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_to_an_owner_without_an_inbox_is_owner_unavailable() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    granted(&client, "t75/no-inbox", "owner", TTL).await;
    refused(
        "held, no inbox anywhere",
        forward(&client, "t75/no-inbox", "x").await,
        Code::Unavailable,
        "owner_unavailable",
    );
    cluster.shutdown().await;
}

/// The old owner (inbox on node 1) hands the resource over while a request waits on it: it
/// transfers the lease, the new owner opens its inbox on node `new_inbox_on`, and the old one
/// rejects the request. The forwarder (through node 3) re-reads the owner and the new one
/// answers, on the second delivery.
async fn handover(new_inbox_on: u64) {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    register(
        &client,
        "t75/handover",
        pb::Policy {
            transferable: true,
            ..Default::default()
        },
    )
    .await;
    let old = granted(&client, "t75/handover", "old", TTL).await;
    let mut old_inbox = cluster.client_of(1).serve(&old).await.expect("serve old");

    let new_inbox_client = cluster.client_of(new_inbox_on);
    let old_owner = tokio::spawn(async move {
        let request = tokio::time::timeout(CALL_TIMEOUT, old_inbox.next())
            .await
            .expect("a request in time")
            .expect("open")
            .expect("a request");
        let new = new_inbox_client
            .transfer(pb::TransferRequest {
                resource: old.resource.clone(),
                lease_id: old.lease_id.clone(),
                holder: old.holder.clone(),
                fencing_token: old.fencing_token,
                to_holder: "new".into(),
                ..Default::default()
            })
            .await
            .expect("transfer")
            .lease
            .expect("the new lease");
        let new_inbox = new_inbox_client.serve(&new).await.expect("serve new");
        let new_owner = serve_until_stop(new_inbox, |_| Act::Reply(b"from new".to_vec()));
        request.reject("handed over").await.expect("reject");
        (old.fencing_token, new, new_owner)
    });

    let reply = forward(&cluster.client_of(3), "t75/handover", "job")
        .await
        .expect("forwarded");
    let (old_token, new, new_owner) = old_owner.await.expect("the old owner");
    assert_eq!(reply.payload, b"from new");
    assert_eq!(reply.owner_holder, "new");
    assert_eq!(reply.fencing_token, new.fencing_token);
    assert!(new.fencing_token > old_token);
    assert_eq!(
        reply.attempts, 2,
        "one rejected delivery, then the new owner"
    );
    let seen = stop(&client, "t75/handover", new_owner).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].fencing_token, new.fencing_token);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_forward_is_re_read_and_re_sent_to_the_new_owner_on_another_node() {
    handover(2).await;
}

/// The new tenure's inbox replaces the old one on its node; the old owner can still reject
/// the request it was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_forward_is_re_sent_to_a_new_owner_that_replaced_the_old_inbox() {
    handover(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_is_delivered_at_most_three_times() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let lease = granted(&client, "t75/refuser", "owner", TTL).await;
    let owner = serve_until_stop(client.serve(&lease).await.expect("serve"), |_| {
        Act::Reject("busy")
    });
    refused(
        "rejected every time",
        forward(&client, "t75/refuser", b"doomed".to_vec()).await,
        Code::Unavailable,
        "owner_unavailable",
    );
    let seen = stop(&client, "t75/refuser", owner).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|s| s.payload == b"doomed"));
    let ids: Vec<&str> = seen.iter().map(|s| s.request_id.as_str()).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one request: {ids:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_never_answers_is_owner_timeout_and_sees_the_request_once() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let lease = granted(&client, "t75/silent", "owner", TTL).await;
    let owner = serve_until_stop(client.serve(&lease).await.expect("serve"), |_| Act::Hold);
    refused(
        "never answered",
        client
            .forward("t75/silent", b"lost".to_vec(), Duration::from_secs(1))
            .await,
        Code::DeadlineExceeded,
        "owner_timeout",
    );
    let seen = stop(&client, "t75/silent", owner).await;
    assert_eq!(seen.len(), 1, "never re-sent after a timeout: {seen:?}");
    assert_eq!(seen[0].payload, b"lost");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_one_mib_is_reply_too_large_and_the_inbox_stays_open() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let lease = granted(&client, "t75/chatty", "owner", TTL).await;
    let owner = serve_until_stop(
        client.serve(&lease).await.expect("serve"),
        |payload| match payload {
            b"big" => Act::Reply(vec![7; MAX_PAYLOAD_BYTES + 1]),
            b"huge" => Act::Reply(vec![7; 5 * MAX_PAYLOAD_BYTES]),
            _ => Act::Reply(vec![7; MAX_PAYLOAD_BYTES]),
        },
    );
    for payload in ["big", "huge"] {
        refused(
            payload,
            forward(&client, "t75/chatty", payload).await,
            Code::ResourceExhausted,
            "reply_too_large",
        );
    }
    let at_limit = forward(&client, "t75/chatty", b"max".to_vec())
        .await
        .expect("a reply at the limit");
    assert_eq!(at_limit.payload.len(), MAX_PAYLOAD_BYTES);
    let seen = stop(&client, "t75/chatty", owner).await;
    let answered: Vec<bool> = seen.iter().map(|s| s.answered).collect();
    assert_eq!(answered, [false, false, true], "the owner is told too");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_through_a_follower_reaches_an_inbox_on_another_node() {
    let (cluster, leader) = started(3).await;
    let followers: Vec<u64> = ids(3).into_iter().filter(|id| *id != leader).collect();
    let lease = granted(&cluster.client(), "t75/elsewhere", "owner", TTL).await;
    let inbox = cluster
        .client_of(followers[0])
        .serve(&lease)
        .await
        .expect("serve on a follower");
    let owner = serve_until_stop(inbox, |payload| Act::Reply(payload.to_vec()));
    for via in [followers[1], leader, followers[0]] {
        let reply = forward(
            &cluster.client_of(via),
            "t75/elsewhere",
            format!("via {via}"),
        )
        .await
        .unwrap_or_else(|e| panic!("forward via node {via}: {e}"));
        assert_eq!(reply.payload, format!("via {via}").as_bytes());
        assert_eq!(reply.attempts, 1);
    }
    let seen = stop(&cluster.client_of(followers[1]), "t75/elsewhere", owner).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_only_for_the_live_exclusive_lease_and_a_newer_tenure_ends_an_older_inbox() {
    let (cluster, _) = started(3).await;
    let client = cluster.client_of(2);
    let lease = granted(&client, "t75/serve", "owner", TTL).await;
    let variants = [
        (
            "a wrong token",
            pb::Lease {
                fencing_token: lease.fencing_token + 1,
                ..lease.clone()
            },
            Code::FailedPrecondition,
            "stale_fencing_token",
        ),
        (
            "an unknown lease",
            pb::Lease {
                lease_id: "lse_999999_0".into(),
                ..lease.clone()
            },
            Code::NotFound,
            "lease_not_found",
        ),
        (
            "another holder",
            pb::Lease {
                holder: "intruder".into(),
                ..lease.clone()
            },
            Code::PermissionDenied,
            "insufficient_permissions",
        ),
        (
            "a bad resource name",
            pb::Lease {
                resource: "bad name".into(),
                ..lease.clone()
            },
            Code::InvalidArgument,
            "invalid_argument",
        ),
    ];
    for (what, variant, code, reason) in variants {
        refused(what, client.serve(&variant).await.map(drop), code, reason);
    }

    let mut older = client.serve(&lease).await.expect("serve");
    client
        .release(release_request(&lease))
        .await
        .expect("release");
    refused(
        "a released lease",
        client.serve(&lease).await.map(drop),
        Code::NotFound,
        "lease_not_found",
    );
    let newer = granted(&client, "t75/serve", "next", TTL).await;
    let _newer_inbox = client.serve(&newer).await.expect("serve the newer tenure");
    refused(
        "the older tenure's inbox",
        tokio::time::timeout(CALL_TIMEOUT, older.next())
            .await
            .expect("ended in time")
            .map(|request| request.is_some()),
        Code::FailedPrecondition,
        "stale_fencing_token",
    );
    cluster.shutdown().await;
}

/// Raw calls to one node, so no client-library check or retry hides the node's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_forward_and_serve_input_is_invalid_argument() {
    let (cluster, leader) = started(3).await;
    let addr = &cluster.addrs[&leader];
    let mut raw = LeasesClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let ok = || pb::ForwardRequest {
        resource: "t75/bad".into(),
        payload: b"x".to_vec(),
        ..Default::default()
    };
    let duration = |seconds, nanos| Some(prost_types::Duration { seconds, nanos });
    let cases = [
        (
            "a payload over 1 MiB",
            pb::ForwardRequest {
                payload: vec![0; MAX_PAYLOAD_BYTES + 1],
                ..ok()
            },
        ),
        (
            "a bad name",
            pb::ForwardRequest {
                resource: "no spaces allowed".into(),
                ..ok()
            },
        ),
        (
            "an empty name",
            pb::ForwardRequest {
                resource: String::new(),
                ..ok()
            },
        ),
        (
            "a negative timeout",
            pb::ForwardRequest {
                timeout: duration(-1, 0),
                ..ok()
            },
        ),
        (
            "a timeout over 60 s",
            pb::ForwardRequest {
                timeout: duration(61, 0),
                ..ok()
            },
        ),
        (
            "a request_id over 128 bytes",
            pb::ForwardRequest {
                request_id: "r".repeat(129),
                ..ok()
            },
        ),
    ];
    for (what, request) in cases {
        let status = raw.forward(request).await.expect_err(what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "invalid_argument", "{what}");
    }
    let reply_first = futures::stream::iter([pb::ServeRequest {
        kind: Some(pb::serve_request::Kind::Reply(pb::ServeReply::default())),
    }]);
    let status = raw
        .serve(reply_first)
        .await
        .expect_err("a reply before open");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    cluster.shutdown().await;
}

/// With auth on: only the lease's principal serves it, any client forwards (the owner sees
/// who), a call without a token is refused, and the internal inbox RPCs take only the peer
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_the_principal_serves_any_client_forwards_and_peers_deliver() {
    let (cluster, leader) = secure(3, &[]).await;
    let alice = cluster.client().with_token(ALICE).expect("token");
    let bob = cluster.client().with_token(BOB).expect("token");
    let lease = granted(&alice, "t75/auth", "alices-worker", TTL).await;
    refused(
        "bob serving alice's lease",
        bob.serve(&lease).await.map(drop),
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    let owner = serve_until_stop(alice.serve(&lease).await.expect("serve"), |_| {
        Act::Reply(b"ok".to_vec())
    });
    refused(
        "no token",
        forward(&cluster.client(), "t75/auth", "x").await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    forward(&bob, "t75/auth", b"from bob".to_vec())
        .await
        .expect("bob forwards");
    let seen = stop(&alice, "t75/auth", owner).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].from_principal, "bob");

    let addr = &cluster.addrs[&leader];
    let mut raft =
        tenure_proto::raft::v1::raft_client::RaftClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
    let status = raft
        .find_inbox(tenure_proto::raft::v1::FindInboxRequest {
            resource: "t75/auth".into(),
            fencing_token: 1,
        })
        .await
        .expect_err("no peer token");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let mut forged = tonic::Request::new(tenure_proto::raft::v1::DeliverRequest {
        resource: "t75/auth".into(),
        fencing_token: lease.fencing_token,
        payload: b"forged".to_vec(),
        from_principal: "root".into(),
        ..Default::default()
    });
    let value = format!("Bearer {ALICE}").parse().expect("ascii");
    forged.metadata_mut().insert("authorization", value);
    let status = raft.deliver(forged).await.expect_err("a client token");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    cluster.shutdown().await;
}
