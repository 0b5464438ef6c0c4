//! `AcquireMany` through the Rust client (SPEC §4.25): all or nothing, one token, and the
//! deadlock that taking two locks one at a time runs into, which `lock_many` never does.

use std::time::Duration;

use tenure_client::{pb, Acquired, AcquiredMany, Client, Lease, Lost};
use tenure_tests::started;

#[track_caller]
fn all(answer: AcquiredMany) -> Vec<Lease> {
    match answer {
        AcquiredMany::Granted(leases) => leases,
        AcquiredMany::Refused { reason, claims } => panic!("refused: {reason} {claims:?}"),
    }
}

/// `rounds` times: takes both resources, in the order given, waiting for them, and lets go.
async fn transfers(client: Client, holder: &'static str, order: [&'static str; 2], rounds: u32) {
    for round in 0..rounds {
        let leases = all(client
            .lock_many(holder, order)
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{holder}, round {round}: {e}")));
        let names: Vec<&str> = leases.iter().map(|l| l.info().resource.as_str()).collect();
        assert_eq!(names, order, "leases in the order named");
        let token = leases[0].fencing_token();
        assert!(leases.iter().all(|l| l.fencing_token() == token));
        for lease in leases {
            lease.release().await.expect("release");
        }
    }
}

/// The two-process demo: A takes x then y, B takes y then x, both waiting, 1,000 times each,
/// each with its own connections to its own node. Taken one at a time this deadlocks (see
/// the next test); with `lock_many` every round completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_with_lock_many_complete_every_time_in_1000_rounds() {
    let (cluster, _) = started(3).await;
    let a = tokio::spawn(transfers(
        cluster.client_of(1),
        "A",
        ["demo/x", "demo/y"],
        1_000,
    ));
    let b = tokio::spawn(transfers(
        cluster.client_of(2),
        "B",
        ["demo/y", "demo/x"],
        1_000,
    ));
    a.await.expect("A completed 1,000 rounds");
    b.await.expect("B completed 1,000 rounds");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lock_at_a_time_deadlocks_where_lock_many_does_not() {
    let (cluster, _) = started(3).await;
    let (a, b) = (cluster.client_of(1), cluster.client_of(2));
    let lock = |client: &Client, resource: &str, holder: &str| {
        client
            .lock(resource, holder)
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(2))
    };
    let Acquired::Granted(_x) = lock(&a, "once/x", "A").await.expect("A takes x") else {
        panic!("x is free");
    };
    let Acquired::Granted(_y) = lock(&b, "once/y", "B").await.expect("B takes y") else {
        panic!("y is free");
    };
    // Each now waits for what the other holds: neither can move until its wait times out.
    let (a_then, b_then) = tokio::join!(lock(&a, "once/y", "A"), lock(&b, "once/x", "B"));
    for answer in [a_then, b_then] {
        match answer.expect("answered") {
            Acquired::Refused { reason, .. } => assert_eq!(reason, "wait_timeout"),
            Acquired::Granted(lease) => panic!("granted {:?} out of a deadlock", lease.info()),
        }
    }
    drop((_x, _y));
    // The same two holders with lock_many, on fresh resources, in opposite orders at once.
    let (a_both, b_both) = tokio::join!(
        transfers(a.clone(), "A", ["many/x", "many/y"], 20),
        transfers(b.clone(), "B", ["many/y", "many/x"], 20)
    );
    let ((), ()) = (a_both, b_both);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_grants_nothing_and_names_what_blocks_each_resource() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let Acquired::Granted(held) = client
        .lease("refuse/y", "C", Duration::from_secs(30))
        .await
        .expect("C takes y")
    else {
        panic!("y is free");
    };
    match client
        .lock_many("A", ["refuse/x", "refuse/y"])
        .try_acquire()
        .await
        .expect("answered")
    {
        AcquiredMany::Refused { reason, claims } => {
            assert_eq!(reason, "resource_unavailable");
            assert_eq!(claims.len(), 2);
            assert_eq!(
                (claims[0].resource.as_str(), claims[0].reason.as_str()),
                ("refuse/x", "")
            );
            assert_eq!(claims[1].reason, "resource_unavailable");
            assert_eq!(claims[1].holders.len(), 1);
            assert_eq!(claims[1].holders[0].holder, "C");
            assert_eq!(claims[1].holders[0].fencing_token, held.fencing_token());
        }
        AcquiredMany::Granted(_) => panic!("granted while C holds y"),
    }
    let x = client
        .get_resource(pb::GetResourceRequest {
            name: "refuse/x".into(),
            ..Default::default()
        })
        .await
        .expect("read x")
        .resource
        .expect("x");
    assert!(
        x.leases.is_empty(),
        "nothing of the refused request was granted"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_taken_together_on_a_session_are_lost_with_it() {
    let (cluster, _) = started(3).await;
    let client = cluster.client();
    let session = client
        .session(Duration::from_secs(5))
        .await
        .expect("session");
    let leases = all(session
        .acquire_many(["session/a", "session/b", "session/c"])
        .try_acquire()
        .await
        .expect("acquire_many"));
    assert_eq!(leases.len(), 3);
    assert!(leases.iter().all(|l| l.info().session_id == session.id()));
    session.close().await.expect("close");
    for lease in &leases {
        assert_eq!(lease.lost().await, Lost::Released);
    }
    cluster.shutdown().await;
}
