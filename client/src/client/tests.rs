use tenure_proto::contract::Reason;
use tenure_proto::v1 as pb;

use super::*;

#[tokio::test]
async fn a_token_is_never_sent_in_clear_off_this_machine_unless_allowed() {
    let token = "t".repeat(32);
    for endpoints in [&["10.0.0.1:7101"][..], &["127.0.0.1:7101", "tenure-2:7101"]] {
        let client = Client::new(endpoints).expect("client");
        let Err(Error::Local(refusal)) = client.with_token(&token) else {
            panic!("{endpoints:?}: a token in clear was accepted");
        };
        assert!(refusal.contains("in clear"), "{refusal}");
        client.insecure().with_token(&token).expect("--insecure");
    }
    Client::new(["127.0.0.1:7101", "localhost:7102", "[::1]:7103"])
        .expect("client")
        .with_token(&token)
        .expect("loopback");
}

/// Nothing listens on port 1: the call gives up at its deadline naming the endpoint and
/// what it answered, still as `unavailable`.
#[tokio::test]
async fn a_call_no_node_answered_names_each_endpoint_and_its_error() {
    let client = Client::new(["127.0.0.1:1"])
        .expect("client")
        .with_timeout(Duration::from_millis(300));
    let error = client
        .validate(pb::ValidateRequest {
            resource: "r".into(),
            fencing_token: 1,
            ..Default::default()
        })
        .await
        .expect_err("nothing listens");
    assert_eq!(error.reason(), Some(Reason::Unavailable), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("no node answered in time; the outcome is unknown (127.0.0.1:1: "),
        "{text}"
    );
}
