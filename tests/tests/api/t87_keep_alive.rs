//! `KeepAlive` (SPEC §2.3, §4.3): many leases renewed on one stream, each renewal answered on
//! its own (renewed, or refused with the reason a `Renew` would get) without ending the
//! stream; the principal's in-flight limit holding a flood; the Rust client's lease handles
//! renewing on one stream across a leader change; at most 64 streams of one principal.

use std::time::Duration;

use tenure_client::{pb, prost_duration, renew_request, Acquired, Client};
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::{granted, secure, started, ALICE, BOB, ELECTION};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};

/// A `KeepAlive` stream opened on `addr`, as the holder of `token` when given.
pub(crate) async fn stream_on(
    addr: &str,
    token: Option<&str>,
) -> (
    mpsc::Sender<pb::KeepAliveRequest>,
    Streaming<pb::KeepAliveResponse>,
) {
    let (requests, answers) = open_stream(addr, token).await;
    (requests, answers.expect("the stream opens"))
}

/// Opens a `KeepAlive` stream on `addr` as the holder of `token`: its sender, and the node's
/// answer (the stream, or why it refused it).
async fn open_stream(
    addr: &str,
    token: Option<&str>,
) -> (
    mpsc::Sender<pb::KeepAliveRequest>,
    Result<Streaming<pb::KeepAliveResponse>, tonic::Status>,
) {
    let (requests, outgoing) = mpsc::channel(1024);
    let mut call = tonic::Request::new(ReceiverStream::new(outgoing));
    if let Some(token) = token {
        call.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii"),
        );
    }
    let answers = LeasesClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
        .keep_alive(call)
        .await
        .map(tonic::Response::into_inner);
    (requests, answers)
}

fn renewal(seq: u64, lease: &pb::Lease, ttl: Duration) -> pb::KeepAliveRequest {
    pb::KeepAliveRequest {
        seq,
        renew: Some(pb::RenewRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder: lease.holder.clone(),
            fencing_token: lease.fencing_token,
            ttl: Some(prost_duration(ttl)),
            request_id: String::new(),
            ..Default::default()
        }),
        session_id: String::new(),
    }
}

async fn next_answer(answers: &mut Streaming<pb::KeepAliveResponse>) -> pb::KeepAliveResponse {
    tokio::time::timeout(ELECTION, answers.message())
        .await
        .expect("an answer in time")
        .expect("the stream stays open")
        .expect("an answer, not the stream's end")
}

/// The refusal of an answer: its reason and code.
fn refused(answer: &pb::KeepAliveResponse) -> (&str, Code) {
    let refusal = answer
        .refusal
        .as_ref()
        .unwrap_or_else(|| panic!("seq {} was renewed, not refused: {answer:?}", answer.seq));
    assert!(answer.lease.is_none(), "{answer:?}");
    assert!(!refusal.message.is_empty(), "{answer:?}");
    (refusal.reason.as_str(), Code::from_i32(refusal.code))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_renews_many_leases_on_one_stream() {
    let (cluster, leader) = started(3).await;
    let client = cluster.client();
    let mut leases = Vec::new();
    for k in 0..100 {
        leases.push(
            granted(
                &client,
                &format!("t87/many/{k}"),
                "a",
                Duration::from_secs(30),
            )
            .await,
        );
    }
    let (requests, mut answers) = stream_on(&cluster.addrs[&leader], None).await;
    for (seq, lease) in leases.iter().enumerate() {
        requests
            .send(renewal(seq as u64, lease, Duration::from_secs(600)))
            .await
            .expect("send");
    }
    let mut renewed = vec![None; leases.len()];
    for _ in 0..leases.len() {
        let answer = next_answer(&mut answers).await;
        let seq = answer.seq as usize;
        let lease = answer
            .lease
            .unwrap_or_else(|| panic!("seq {seq} refused: {:?}", answer.refusal));
        assert!(
            renewed[seq].replace(lease).is_none(),
            "seq {seq} answered twice"
        );
    }
    for (before, after) in leases.iter().zip(renewed) {
        let after = after.expect("every renewal answered");
        assert_eq!(
            (&after.resource, &after.lease_id, after.fencing_token),
            (&before.resource, &before.lease_id, before.fencing_token)
        );
        assert_eq!(after.ttl, Some(prost_duration(Duration::from_secs(600))));
        let seconds = |lease: &pb::Lease| lease.expires_at.as_ref().expect("an expiry").seconds;
        assert!(
            seconds(&after) > seconds(before) + 500,
            "{after:?} vs {before:?}"
        );
    }
    // The client's side ends: the node ends the stream once everything is answered.
    drop(requests);
    let end = tokio::time::timeout(ELECTION, answers.message()).await;
    assert!(end.expect("ends in time").expect("a clean end").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renewal_is_answered_on_the_stream_which_stays_open() {
    let (cluster, leader) = started(3).await;
    let client = cluster.client();
    let lease = granted(&client, "t87/refused", "a", Duration::from_secs(30)).await;
    let (requests, mut answers) = stream_on(&cluster.addrs[&leader], None).await;
    let ttl = Duration::from_secs(60);

    let stale = pb::Lease {
        fencing_token: lease.fencing_token + 1,
        ..lease.clone()
    };
    let unknown = pb::Lease {
        resource: "t87/nobody-holds-this".into(),
        ..lease.clone()
    };
    let another_holder = pb::Lease {
        holder: "b".into(),
        ..lease.clone()
    };
    let cases: Vec<(pb::KeepAliveRequest, &str, Code)> = vec![
        (
            renewal(1, &stale, ttl),
            "stale_fencing_token",
            Code::FailedPrecondition,
        ),
        (renewal(2, &unknown, ttl), "lease_not_found", Code::NotFound),
        (
            renewal(3, &another_holder, ttl),
            "insufficient_permissions",
            Code::PermissionDenied,
        ),
        (
            renewal(4, &lease, Duration::from_millis(10)),
            "ttl_out_of_range",
            Code::OutOfRange,
        ),
        (
            pb::KeepAliveRequest {
                seq: 5,
                renew: None,
                session_id: String::new(),
            },
            "invalid_argument",
            Code::InvalidArgument,
        ),
        (
            renewal(
                6,
                &pb::Lease {
                    resource: "bad name!".into(),
                    ..lease.clone()
                },
                ttl,
            ),
            "invalid_argument",
            Code::InvalidArgument,
        ),
    ];
    for (request, reason, code) in &cases {
        requests.send(request.clone()).await.expect("send");
        let answer = next_answer(&mut answers).await;
        assert_eq!(answer.seq, request.seq);
        assert_eq!(refused(&answer), (*reason, *code), "seq {}", request.seq);
    }
    // Still open, and the lease untouched by the refusals.
    requests.send(renewal(7, &lease, ttl)).await.expect("send");
    let answer = next_answer(&mut answers).await;
    assert_eq!(answer.seq, 7);
    let renewed = answer.lease.expect("renewed");
    assert_eq!(renewed.fencing_token, lease.fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principals_lease_is_refused_and_a_flood_is_held_to_the_in_flight_limit() {
    let (mut cluster, leader) = secure(
        3,
        &[
            "--max-in-flight-per-principal",
            "4",
            "--request-timeout",
            "3s",
        ],
    )
    .await;
    let alice = cluster.client().with_token(ALICE).expect("token");
    let lease = granted(&alice, "t87/flood", "a", Duration::from_secs(60)).await;
    let addr = cluster.addrs[&leader].clone();

    let (bob, mut bob_answers) = stream_on(&addr, Some(BOB)).await;
    bob.send(renewal(1, &lease, Duration::from_secs(60)))
        .await
        .expect("send");
    let answer = next_answer(&mut bob_answers).await;
    assert_eq!(
        refused(&answer),
        ("insufficient_permissions", Code::PermissionDenied)
    );

    // Without a quorum no renewal commits: the first four hold alice's places in flight until
    // the request timeout, and every other one of a flood is refused at once, on the stream.
    let followers: Vec<u64> = cluster
        .live_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    for id in &followers {
        cluster.kill(*id).await;
    }
    const FLOOD: u64 = 400;
    let (requests, mut answers) = stream_on(&addr, Some(ALICE)).await;
    for seq in 0..FLOOD {
        requests
            .send(renewal(seq, &lease, Duration::from_secs(60)))
            .await
            .expect("send");
    }
    let mut reasons = std::collections::BTreeMap::<&str, u64>::new();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..FLOOD {
        let answer = next_answer(&mut answers).await;
        assert!(seen.insert(answer.seq), "seq {} answered twice", answer.seq);
        let (reason, code) = refused(&answer);
        let expected = match reason {
            "too_many_requests" => Code::ResourceExhausted,
            "unavailable" => Code::Unavailable,
            other => panic!("seq {}: {other}", answer.seq),
        };
        assert_eq!(code, expected);
        *reasons
            .entry(if reason == "unavailable" {
                "unavailable"
            } else {
                "too_many_requests"
            })
            .or_default() += 1;
    }
    assert_eq!(
        reasons,
        [("too_many_requests", FLOOD - 4), ("unavailable", 4)].into(),
        "four in flight, the rest refused"
    );

    // With a quorum again, the same stream renews.
    for id in &followers {
        cluster.restart(*id).await.expect("restart");
    }
    requests
        .send(renewal(FLOOD, &lease, Duration::from_secs(60)))
        .await
        .expect("send");
    let answer = next_answer(&mut answers).await;
    assert_eq!(answer.seq, FLOOD);
    assert!(answer.lease.is_some(), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_handles_renew_on_the_clients_stream_across_a_leader_change() {
    let (mut cluster, leader) = started(3).await;
    let client: Client = cluster.client();
    let ttl = Duration::from_secs(6);
    let mut held = Vec::new();
    for k in 0..3 {
        match client
            .lease(&format!("t87/handle/{k}"), "a", ttl)
            .await
            .expect("answered")
        {
            Acquired::Granted(lease) => held.push(lease),
            Acquired::Refused { reason, .. } => panic!("refused: {reason}"),
        }
    }
    // The client's stream is open (on the leader, which the acquires named) before the
    // leader dies: the handles' renewals must find it broken and open it again elsewhere.
    let opened = client
        .keep_alive(renew_request(held[0].info(), ttl))
        .await
        .expect("renewed on the stream");
    assert_eq!(opened.fencing_token, held[0].fencing_token());
    cluster.kill(leader).await;
    let new_leader = cluster.leader(ELECTION).await.expect("a new leader");
    assert_ne!(new_leader, leader);
    // Two ttls on: only renewals after the failover can have kept the leases.
    tokio::time::sleep(2 * ttl).await;
    for lease in &held {
        if let Ok(lost) = tokio::time::timeout(Duration::ZERO, lease.lost()).await {
            panic!("{} was lost: {lost}", lease.info().resource);
        }
        let valid = cluster
            .client_of(new_leader)
            .validate(pb::ValidateRequest {
                resource: lease.info().resource.clone(),
                fencing_token: lease.fencing_token(),
                ..Default::default()
            })
            .await
            .expect("validate");
        assert!(valid.valid, "{valid:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_has_at_most_64_keep_alive_streams_on_a_node() {
    let (cluster, leader) = secure(3, &[]).await;
    let addr = &cluster.addrs[&leader];
    let mut open = Vec::new();
    for _ in 0..64 {
        open.push(stream_on(addr, Some(ALICE)).await);
    }
    // The 65th of alice's is refused by name; bob's first still opens.
    let (_requests, refused) = open_stream(addr, Some(ALICE)).await;
    let refused = refused.expect_err("a 65th stream of one principal");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(
        tenure_client::Error::from(refused).reason_str(),
        "too_many_streams"
    );
    let _bob = stream_on(addr, Some(BOB)).await;
    drop(open);
}

/// SPEC §4.3: a renew that replaces its lease's metadata is refused on a stream, whose
/// renewals finish in any order (two such renews could land either way); the lease is
/// untouched and a plain renewal on the same stream is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_replaces_metadata_is_refused_on_a_stream() {
    let (cluster, leader) = started(3).await;
    let client = cluster.client();
    let lease = granted(&client, "t87/metadata", "a", Duration::from_secs(30)).await;
    let (requests, mut answers) = stream_on(&cluster.addrs[&leader], None).await;
    let mut replacing = renewal(1, &lease, Duration::from_secs(60));
    if let Some(renew) = replacing.renew.as_mut() {
        renew.metadata = [("addr".to_string(), "10.0.0.7:80".to_string())].into();
        renew.replace_metadata = true;
    }
    requests.send(replacing).await.expect("send");
    let answer = next_answer(&mut answers).await;
    let (reason, code) = refused(&answer);
    assert_eq!((reason, code), ("invalid_argument", Code::InvalidArgument));
    assert!(
        answer
            .refusal
            .as_ref()
            .is_some_and(|r| r.message.contains("replace_metadata")),
        "{answer:?}"
    );
    requests
        .send(renewal(2, &lease, Duration::from_secs(60)))
        .await
        .expect("send");
    let renewed = next_answer(&mut answers).await;
    let renewed = renewed.lease.expect("the plain renewal is served");
    assert!(renewed.metadata.is_empty(), "{renewed:?}");
    cluster.shutdown().await;
}
