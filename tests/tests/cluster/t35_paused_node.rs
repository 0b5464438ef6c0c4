//! Regression (found by the fault harness): a node resumed after SIGSTOP meets a burst of
//! streams its clients cancelled while it was stopped. With h2's default allowance of 20
//! pending resets, it answered with GOAWAY (ENHANCE_YOUR_CALM) and failed calls that were
//! still waiting, as RESOURCE_EXHAUSTED.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_proto::v1::leases_client::LeasesClient;
use tenure_proto::v1::{Consistency, GetResourceRequest};
use tenure_tests::process::ProcessCluster;
use tenure_tests::ELECTION;
use tonic::transport::Endpoint;

fn stale_read(deadline: Duration) -> tonic::Request<GetResourceRequest> {
    let mut request = tonic::Request::new(GetResourceRequest {
        name: "paused/r".into(),
        consistency: Consistency::Stale as i32,
    });
    request.set_timeout(deadline);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_resumed_from_sigstop_serves_the_calls_still_waiting() {
    let cluster = ProcessCluster::start(3, BTreeMap::new()).expect("cluster");
    cluster.leader(ELECTION).await.expect("leader");
    let channel = Endpoint::from_shared(format!("http://{}", cluster.addrs[&1]))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let client = LeasesClient::new(channel);
    client
        .clone()
        .get_resource(stale_read(Duration::from_secs(5)))
        .await
        .expect("a read before the pause");

    cluster.set_stopped(1, true).expect("SIGSTOP");
    // Calls that give up while the node is stopped: each leaves a reset stream behind.
    let cancelled: Vec<_> = (0..60)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .get_resource(stale_read(Duration::from_millis(100)))
                    .await
            })
        })
        .collect();
    for call in cancelled {
        assert!(
            call.await.expect("task").is_err(),
            "a stopped node cannot answer"
        );
    }
    // Calls still waiting when the node comes back.
    let waiting: Vec<_> = (0..5)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .get_resource(stale_read(Duration::from_secs(10)))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await; // let them reach the socket
    cluster.set_stopped(1, false).expect("SIGCONT");
    for call in waiting {
        let answer = call.await.expect("task");
        assert!(
            answer.is_ok(),
            "a call waiting on a resumed node failed: {answer:?}"
        );
    }
}
