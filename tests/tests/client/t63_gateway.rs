//! The HTTP/JSON gateway (SPEC §2.7) on a real three-node cluster with auth on: every route,
//! the refusals of the gate, bad JSON, and a `Watch` over Server-Sent Events resumed on
//! another node after the first was killed. On one node with auth off: the `Host` check of a
//! loopback gateway, the head timeout and the cap on connections.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use tenure_node::gateway::routes::ROUTES;
use tenure_tests::http::{Answer, Http};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{secure, ADMIN, ALICE, PEER};

/// A three-node cluster with auth and the gateway on, and the admin's gateway on `node`.
async fn cluster() -> (InProcessCluster, u64) {
    secure(3, &["--http-listen", "127.0.0.1:0"]).await
}

fn gateway(cluster: &InProcessCluster, node: u64, token: Option<&str>) -> Http {
    Http::new(cluster.http_addr(node).expect("--http-listen bound"), token)
}

/// The routes a test called, by template, to show that it called them all.
struct Walk {
    http: Http,
    called: BTreeSet<(String, &'static str)>,
}

impl Walk {
    /// `method path` (its template `template`) with `body`; the answer.
    async fn call(
        &mut self,
        method: &str,
        template: &'static str,
        path: &str,
        body: Value,
    ) -> Answer {
        self.called.insert((method.to_string(), template));
        self.http.call(method, path, body).await
    }

    /// As [`Walk::call`], answered 200.
    async fn ok(&mut self, method: &str, template: &'static str, path: &str, body: Value) -> Value {
        let answer = self.call(method, template, path, body).await;
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.json);
        answer.json
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_route_answers_as_its_grpc_call() {
    let (cluster, leader) = cluster().await;
    let follower = cluster.follower_of(leader);
    let mut walk = Walk {
        http: gateway(&cluster, follower, Some(ADMIN)),
        called: BTreeSet::new(),
    };

    // Resources.
    let policy =
        json!({"transferable": true, "bookable": true, "defaultTtl": "30s", "maxTtl": "3600s"});
    let created = walk
        .ok(
            "POST",
            "/v1/resources",
            "/v1/resources",
            json!({"name": "gw/a", "policy": policy}),
        )
        .await;
    assert_eq!(created["resource"]["name"], "gw/a");
    let listed = walk
        .ok(
            "GET",
            "/v1/resources",
            "/v1/resources?prefix=gw/",
            Value::Null,
        )
        .await;
    assert_eq!(listed["resources"][0]["name"], "gw/a");
    let read = walk
        .ok(
            "GET",
            "/v1/resources/{name}",
            "/v1/resources/gw%2Fa",
            Value::Null,
        )
        .await;
    assert_eq!(read["resource"]["policy"]["transferable"], true);

    // A lease's life: acquire, renew, validate, list, transfer, release, history.
    let acquired = walk
        .ok(
            "POST",
            "/v1/resources/{resource}:acquire",
            "/v1/resources/gw%2Fa:acquire",
            json!({"holder": "h1", "ttl": "30s"}),
        )
        .await;
    assert_eq!(acquired["granted"], true);
    let lease = &acquired["lease"];
    let (id, token) = (
        lease["leaseId"].as_str().expect("a string"),
        lease["fencingToken"].clone(),
    );
    assert!(
        token.as_str().is_some_and(|t| t.parse::<u64>().is_ok()),
        "{token}"
    );
    let renewed = walk
        .ok(
            "POST",
            "/v1/resources/{resource}/leases/{lease_id}:renew",
            &format!("/v1/resources/gw%2Fa/leases/{id}:renew"),
            json!({"holder": "h1", "fencingToken": token, "ttl": "60s"}),
        )
        .await;
    assert_eq!(renewed["lease"]["fencingToken"], token);
    let valid = walk
        .ok(
            "POST",
            "/v1/resources/{resource}:validate",
            "/v1/resources/gw%2Fa:validate",
            json!({"fencingToken": token}),
        )
        .await;
    assert_eq!(valid["valid"], true);
    let mine = walk
        .ok("GET", "/v1/leases", "/v1/leases?holder=h1", Value::Null)
        .await;
    assert_eq!(mine["leases"][0]["leaseId"], id);
    let moved = walk
        .ok(
            "POST",
            "/v1/resources/{resource}/leases/{lease_id}:transfer",
            &format!("/v1/resources/gw%2Fa/leases/{id}:transfer"),
            json!({"holder": "h1", "fencingToken": token, "toHolder": "h2"}),
        )
        .await;
    let (id2, token2) = (
        moved["lease"]["leaseId"]
            .as_str()
            .expect("a string")
            .to_string(),
        moved["lease"]["fencingToken"].clone(),
    );
    walk.ok(
        "POST",
        "/v1/resources/{resource}/leases/{lease_id}:release",
        &format!("/v1/resources/gw%2Fa/leases/{id2}:release"),
        json!({"holder": "h2", "fencing_token": token2}),
    )
    .await;
    let history = walk
        .ok(
            "GET",
            "/v1/resources/{resource}/history",
            "/v1/resources/gw%2Fa/history?order=ORDER_ASC&events=EVENT_TYPE_ACQUIRED&events=EVENT_TYPE_RELEASED",
            Value::Null,
        )
        .await;
    let kinds: Vec<&str> = history["entries"]
        .as_array()
        .expect("an array")
        .iter()
        .map(|e| e["event"].as_str().expect("a string"))
        .collect();
    assert_eq!(kinds, ["EVENT_TYPE_ACQUIRED", "EVENT_TYPE_RELEASED"]);

    // Bookings and forwarding.
    let tomorrow = std::time::SystemTime::now() + std::time::Duration::from_secs(86_400);
    let mut start = prost_types::Timestamp::from(tomorrow);
    start.nanos = 0;
    let start = start.to_string();
    walk.ok(
        "POST",
        "/v1/resources/{resource}/bookings",
        "/v1/resources/gw%2Fa/bookings",
        json!({"holder": "h3", "start": start, "duration": "60s"}),
    )
    .await;
    walk.ok(
        "POST",
        "/v1/resources/{resource}/bookings:cancel",
        "/v1/resources/gw%2Fa/bookings:cancel",
        json!({"holder": "h3", "start": start}),
    )
    .await;
    let forward = walk
        .call(
            "POST",
            "/v1/resources/{resource}:forward",
            "/v1/resources/gw%2Fa:forward",
            json!({"payload": "aGVsbG8="}),
        )
        .await;
    assert_eq!(
        (forward.status, forward.reason()),
        (400, "no_owner"),
        "{}",
        forward.json
    );

    // The waiting room: a wait cancelled from another call.
    walk.ok(
        "POST",
        "/v1/resources/{resource}:acquire",
        "/v1/resources/gw%2Fq:acquire",
        json!({"holder": "q1", "ttl": "30s"}),
    )
    .await;
    let waiter = walk.http.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .ok(
                "POST",
                "/v1/resources/gw%2Fq:acquire",
                json!({"holder": "q2", "ttl": "30s", "onConflict": "ON_CONFLICT_WAIT", "waitTimeout": "60s"}),
            )
            .await
    });
    let cancelled = loop {
        let answer = walk
            .ok(
                "POST",
                "/v1/resources/{resource}:cancelWait",
                "/v1/resources/gw%2Fq:cancelWait",
                json!({"holder": "q2"}),
            )
            .await;
        if answer["cancelled"] == true {
            break answer;
        }
        // Not queued yet: the wait's entry has not been applied.
        tokio::task::yield_now().await;
    };
    assert!(cancelled["revision"].as_str().is_some());
    let ended = waiting.await.expect("the waiting call");
    assert_eq!(
        (ended["granted"].clone(), ended["reason"].clone()),
        (json!(false), json!("wait_cancelled"))
    );

    // Several at once.
    let many = walk
        .ok(
            "POST",
            "/v1/resources:acquireMany",
            "/v1/resources:acquireMany",
            json!({"holder": "m1", "ttl": "30s", "claims": [{"resource": "gw/x"}, {"resource": "gw/y"}]}),
        )
        .await;
    assert_eq!(many["leases"].as_array().map(Vec::len), Some(2));

    // Sessions.
    let session = walk
        .ok(
            "POST",
            "/v1/sessions",
            "/v1/sessions",
            json!({"holder": "s1", "ttl": "30s"}),
        )
        .await;
    let sid = session["session"]["sessionId"]
        .as_str()
        .expect("a string")
        .to_string();
    walk.ok(
        "POST",
        "/v1/resources/{resource}:acquire",
        "/v1/resources/gw%2Fs:acquire",
        json!({"holder": "s1", "sessionId": sid}),
    )
    .await;
    walk.ok(
        "POST",
        "/v1/sessions/{session_id}:renew",
        &format!("/v1/sessions/{sid}:renew"),
        Value::Null,
    )
    .await;
    let got = walk
        .ok(
            "GET",
            "/v1/sessions/{session_id}",
            &format!("/v1/sessions/{sid}"),
            Value::Null,
        )
        .await;
    assert_eq!(got["session"]["leaseCount"], 1);
    let sessions = walk
        .ok("GET", "/v1/sessions", "/v1/sessions?holder=s1", Value::Null)
        .await;
    assert_eq!(sessions["sessions"][0]["sessionId"], sid.as_str());
    let closed = walk
        .ok(
            "POST",
            "/v1/sessions/{session_id}:close",
            &format!("/v1/sessions/{sid}:close"),
            Value::Null,
        )
        .await;
    assert_eq!(closed["session"]["status"], "SESSION_STATUS_CLOSED");
    let gone = walk
        .call(
            "GET",
            "/v1/sessions/{session_id}",
            &format!("/v1/sessions/{sid}"),
            Value::Null,
        )
        .await;
    assert_eq!((gone.status, gone.reason()), (404, "session_not_found"));

    // The cluster and quotas.
    let status = walk
        .ok("GET", "/v1/cluster", "/v1/cluster", Value::Null)
        .await;
    assert_eq!(status["members"].as_array().map(Vec::len), Some(3));
    walk.ok(
        "POST",
        "/v1/cluster:snapshot",
        "/v1/cluster:snapshot",
        Value::Null,
    )
    .await;
    let exists = walk
        .call(
            "POST",
            "/v1/cluster/learners",
            "/v1/cluster/learners",
            json!({"id": follower, "addr": "127.0.0.1:1"}),
        )
        .await;
    assert_eq!(
        (exists.status, exists.reason()),
        (409, "already_exists"),
        "{}",
        exists.json
    );
    let unknown = walk
        .call(
            "POST",
            "/v1/cluster/members",
            "/v1/cluster/members",
            json!({"promote": [99]}),
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.json);
    let quota = walk
        .ok(
            "PUT",
            "/v1/quotas/{principal}",
            "/v1/quotas/alice",
            json!({"changes": [{"quota": "leases", "limit": 7}]}),
        )
        .await;
    // GetQuota reads the answering node's applied state (not linearizable, SPEC §2.4).
    let read = walk
        .ok(
            "GET",
            "/v1/quotas/{principal}",
            "/v1/quotas/alice",
            Value::Null,
        )
        .await;
    assert_eq!(read["principal"], "alice");
    let leases = quota["quotas"]
        .as_array()
        .expect("an array")
        .iter()
        .find(|l| l["quota"] == "leases")
        .cloned()
        .unwrap_or_default();
    assert_eq!(leases["limit"], "7", "{quota}");
    walk.ok(
        "PUT",
        "/v1/quotas",
        "/v1/quotas",
        json!({"changes": [{"quota": "sessions", "limit": 500}]}),
    )
    .await;
    walk.ok("GET", "/v1/quotas", "/v1/quotas", Value::Null)
        .await;
    let moved = walk
        .ok(
            "POST",
            "/v1/cluster:transferLeader",
            "/v1/cluster:transferLeader",
            json!({"to": follower}),
        )
        .await;
    assert!(moved["previousLeaderId"].as_str().is_some(), "{moved}");

    // Watch: the stream opens with what the history holds.
    walk.called.insert(("GET".into(), "/v1/watch"));
    let mut events = walk
        .http
        .events("/v1/watch?resource=gw/a", None)
        .await
        .expect("a stream");
    let first = events.next().await.expect("an event");
    assert_eq!(first.event, "watch");
    assert!(first.id.is_some());

    let all: BTreeSet<(String, &'static str)> = ROUTES
        .iter()
        .map(|r| (r.method.to_string(), r.path))
        .collect();
    let missed: Vec<_> = all.difference(&walk.called).collect();
    assert!(
        missed.is_empty(),
        "routes the test never called: {missed:?}"
    );
    drop(events);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gate_refuses_from_the_headers_with_the_reason() {
    let (cluster, leader) = cluster().await;
    let admin = gateway(&cluster, leader, Some(ADMIN));
    let refused = |answer: &Answer| {
        (
            answer.status,
            answer.reason().to_string(),
            answer.json["code"].clone(),
        )
    };

    let none = admin
        .with_token(None)
        .call("GET", "/v1/resources", Value::Null)
        .await;
    assert_eq!(
        refused(&none),
        (401, "unauthenticated".into(), json!("UNAUTHENTICATED"))
    );
    let wrong = admin
        .with_token(Some("not-a-token-of-this-cluster-0123456789"))
        .call("GET", "/v1/resources", Value::Null)
        .await;
    assert_eq!(wrong.status, 401);
    let peer = admin
        .with_token(Some(PEER))
        .call("GET", "/v1/resources", Value::Null)
        .await;
    assert_eq!((peer.status, peer.reason()), (401, "unauthenticated"));
    let alice = admin.with_token(Some(ALICE));
    let cluster_call = alice.call("GET", "/v1/cluster", Value::Null).await;
    assert_eq!(
        refused(&cluster_call),
        (
            403,
            "insufficient_permissions".into(),
            json!("PERMISSION_DENIED")
        )
    );
    let register = alice
        .call("POST", "/v1/resources", json!({"name": "gw/mine"}))
        .await;
    assert_eq!(
        (register.status, register.reason()),
        (403, "insufficient_permissions")
    );
    assert_eq!(
        register.headers.get("tenure-reason").map(|v| v.as_bytes()),
        Some(&b"insufficient_permissions"[..])
    );
    // A client acts on its own leases; another's holder is refused.
    alice
        .ok(
            "POST",
            "/v1/resources/gw%2Fown:acquire",
            json!({"holder": "alice-1", "ttl": "30s"}),
        )
        .await;

    // The body is not read for a caller the gate refuses: a request that announces 1 GiB and
    // sends nothing is answered at once.
    let addr = cluster.http_addr(leader).expect("gateway");
    let answer = announce_and_send_nothing(addr, None).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");

    // What a web page could send on a user's behalf is refused: a form or plain text, and a
    // cross-site call.
    let path = "/v1/resources/gw%2Fown:acquire";
    let form = alice
        .raw_with(
            "POST",
            path,
            "holder=x",
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_eq!((form.status, form.reason()), (415, "invalid_argument"));
    // Its body was not read, so its connection ends, and the answer says so.
    assert_eq!(
        form.headers.get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    let body = r#"{"holder": "alice-1", "ttl": "30s"}"#;
    let cross = alice
        .raw_with("POST", path, body, &[("origin", "https://evil.example")])
        .await;
    assert_eq!(
        (cross.status, cross.reason()),
        (403, "insufficient_permissions")
    );
    let fetched = alice
        .raw_with("POST", path, body, &[("sec-fetch-site", "cross-site")])
        .await;
    assert_eq!(fetched.status, 403);

    // A body that never arrives is given up on, and its place in flight freed.
    let answer = announce_and_send_nothing(addr, Some(ALICE)).await;
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");

    // The OpenAPI document needs no token.
    let openapi = admin
        .with_token(None)
        .call("GET", "/v1/openapi.json", Value::Null)
        .await;
    assert_eq!(openapi.status, 200);
    assert!(openapi.json["paths"]["/v1/resources/{resource}:acquire"]["post"].is_object());

    // No answer is a page a browser would render, sniff or frame: the refusals and the
    // answers alike.
    for answer in [&openapi, &cluster_call, &register] {
        assert_eq!(
            answer
                .headers
                .get("x-content-type-options")
                .map(|v| v.as_bytes()),
            Some(&b"nosniff"[..])
        );
        assert_eq!(
            answer
                .headers
                .get("content-security-policy")
                .map(|v| v.as_bytes()),
            Some(tenure_node::gateway::API_CONTENT_SECURITY_POLICY.as_bytes())
        );
    }
    cluster.shutdown().await;
}

/// Sends the head of a request that announces a body (1 GiB without a token; 100 bytes with
/// one), and not the body; what the node answers.
async fn announce_and_send_nothing(addr: std::net::SocketAddr, token: Option<&str>) -> String {
    match token {
        None => announce(addr, None, "/v1/resources", 1 << 30, "").await,
        Some(token) => {
            announce(
                addr,
                Some(token),
                "/v1/resources/gw%2Fslow:acquire",
                100,
                "{",
            )
            .await
        }
    }
}

/// Sends the head of `POST path` announcing a body of `length` bytes, then only `sent` of it;
/// what the node answers (a node that waited for the rest would fail the test).
async fn announce(
    addr: std::net::SocketAddr,
    token: Option<&str>,
    path: &str,
    length: usize,
    sent: &str,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: tenure\r\n{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n{sent}"
    );
    stream.write_all(head.as_bytes()).await.expect("the head");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(std::time::Duration::from_secs(30), stream.read(&mut answer))
        .await
        .expect("answered without the body")
        .expect("read");
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_json_and_wrong_types_are_400_naming_the_field() {
    let (cluster, leader) = cluster().await;
    let http = gateway(&cluster, leader, Some(ADMIN));
    let acquire = "/v1/resources/gw%2Fbad:acquire";
    let cases: Vec<(&str, &str)> = vec![
        (r#"{"holder": 5}"#, "holder"),
        (r#"{"holder": "h", "ttl": 30}"#, "ttl"),
        (r#"{"holder": "h", "units": "two"}"#, "units"),
        (r#"{"holder": "h", "mode": "LEASE_MODE_SIDEWAYS"}"#, "mode"),
        (r#"{"holder": "h", "onConflict": true}"#, "onConflict"),
        (r#"{"holder": "h", "resource": "gw/other"}"#, "resource"),
        (r#"{"holder": "h", "ttl": "0.5s"}"#, "ttl"),
    ];
    for (body, field) in cases {
        let answer = http.raw("POST", acquire, body).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.json);
        let message = answer.json["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field),
            "{body}: {message} does not name {field}"
        );
    }
    // The handler's own rule, as gRPC answers it.
    let short = http
        .raw("POST", acquire, r#"{"holder": "h", "ttl": "0.5s"}"#)
        .await;
    assert_eq!(
        (short.reason(), short.json["code"].clone()),
        ("ttl_out_of_range", json!("OUT_OF_RANGE"))
    );
    for body in [r#"{"holder": "#, "[1, 2]", r#""h""#] {
        let answer = http.raw("POST", acquire, body).await;
        assert_eq!(
            (answer.status, answer.reason()),
            (400, "invalid_argument"),
            "{body}"
        );
    }
    let twice = http
        .raw(
            "POST",
            acquire,
            r#"{"holder": "h", "requestId": "a", "request_id": "b"}"#,
        )
        .await;
    assert_eq!(twice.status, 400, "{}", twice.json);
    let in_query = http
        .raw("POST", &format!("{acquire}?holder=h"), r#"{"ttl": "30s"}"#)
        .await;
    assert_eq!(
        (in_query.status, in_query.reason()),
        (400, "invalid_argument")
    );
    let unknown = http.raw("POST", acquire, r#"{"holdr": "h"}"#).await;
    assert!(unknown.json["message"]
        .as_str()
        .unwrap_or_default()
        .contains("holdr"));
    let query = http
        .call("GET", "/v1/resources?colour=red", Value::Null)
        .await;
    assert_eq!(query.status, 400);
    assert!(query.json["message"]
        .as_str()
        .unwrap_or_default()
        .contains("colour"));

    let nowhere = http.call("GET", "/v1/nowhere", Value::Null).await;
    assert_eq!(nowhere.status, 404);
    let method = http
        .call("DELETE", "/v1/resources/gw%2Fbad", Value::Null)
        .await;
    assert_eq!(method.status, 405);
    assert_eq!(
        method.headers.get("allow").map(|v| v.as_bytes()),
        Some(&b"GET"[..])
    );
    // A body announced over the limit is refused unread.
    let addr = cluster.http_addr(leader).expect("gateway");
    let big = announce(
        addr,
        Some(ADMIN),
        acquire,
        tenure_node::gateway::MAX_BODY_BYTES + 1,
        "",
    )
    .await;
    assert!(big.starts_with("HTTP/1.1 429"), "{big}");
    assert!(big.contains("resource_exhausted"), "{big}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_resumes_on_another_node_after_a_kill_without_a_gap() {
    let (mut cluster, leader) = cluster().await;
    let first = cluster.follower_of(leader);
    let writer = gateway(&cluster, leader, Some(ADMIN));
    let watcher = gateway(&cluster, first, Some(ADMIN));
    let mut stream = watcher
        .events("/v1/watch?prefix=sse/", None)
        .await
        .expect("a stream");
    let mut seen: Vec<(u64, String, u32)> = Vec::new();
    let mut last_id = 0u64;
    for round in 0..5 {
        let resource = format!("sse%2Fr{round}");
        let acquired = writer
            .ok(
                "POST",
                &format!("/v1/resources/{resource}:acquire"),
                json!({"holder": "w", "ttl": "30s"}),
            )
            .await;
        let lease = &acquired["lease"];
        writer
            .ok(
                "POST",
                &format!(
                    "/v1/resources/{resource}/leases/{}:release",
                    lease["leaseId"].as_str().expect("a string")
                ),
                json!({"holder": "w", "fencingToken": lease["fencingToken"]}),
            )
            .await;
    }
    // Read until the stream has shown half the rounds, then kill its node.
    while seen.len() < 5 {
        let event = stream.next().await.expect("an event");
        last_id = last_id.max(take(event, &mut seen));
    }
    cluster.kill(first).await;
    let others: Vec<u64> = cluster.live_ids();
    let second = gateway(&cluster, others[0], Some(ADMIN));
    let mut resumed = second
        .events("/v1/watch?prefix=sse/", Some(last_id))
        .await
        .expect("a resumed stream");
    while seen.len() < 10 {
        let event = resumed.next().await.expect("an event");
        take(event, &mut seen);
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "in order, each once");
    assert_eq!(seen.len(), 10, "5 acquired and 5 released: {seen:?}");
    drop((stream, resumed));
    cluster.shutdown().await;
}

/// Adds the events of one `watch` event to `seen` as (revision, resource, seq); its id.
fn take(event: tenure_tests::http::ServerEvent, seen: &mut Vec<(u64, String, u32)>) -> u64 {
    assert_eq!(event.event, "watch", "{:?}", event.data);
    for e in event.data["events"].as_array().cloned().unwrap_or_default() {
        let revision: u64 = e["revision"]
            .as_str()
            .expect("a string")
            .parse()
            .expect("a number");
        let resource = e["resource"].as_str().expect("a string").to_string();
        seen.push((revision, resource, e["seq"].as_u64().unwrap_or(0) as u32));
    }
    event.id.and_then(|id| id.parse::<u64>().ok()).unwrap_or(0)
}

/// One node with auth off and its gateway on loopback.
async fn open_node() -> (InProcessCluster, std::net::SocketAddr) {
    let flags = tenure_tests::same_flags(1, &["--http-listen", "127.0.0.1:0"]);
    let (cluster, node) = tenure_tests::started_with(1, flags).await;
    let addr = cluster.http_addr(node).expect("--http-listen bound");
    (cluster, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_off_a_loopback_gateway_answers_only_calls_addressed_to_this_machine() {
    let (cluster, addr) = open_node().await;
    let http = Http::new(addr, None);
    let port = addr.port();
    for host in [
        addr.to_string(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let answer = http
            .raw_with("GET", "/v1/resources", "", &[("host", &host)])
            .await;
        assert_eq!(answer.status, 200, "Host: {host}: {}", answer.json);
    }
    // A page of another site whose name was rebound to 127.0.0.1 calls with its own name.
    for host in ["tenure.attacker.example", "tenure.attacker.example:80"] {
        let rebound = http
            .raw_with("GET", "/v1/resources", "", &[("host", host)])
            .await;
        assert_eq!(
            (rebound.status, rebound.reason()),
            (403, "insufficient_permissions"),
            "Host: {host}"
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_given_up_on() {
    use tenure_node::gateway::serve::HEAD_TIMEOUT;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cluster, addr) = open_node().await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /v1/resources HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .expect("half a head");
    let sent = std::time::Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(HEAD_TIMEOUT * 3, stream.read_to_end(&mut answer))
        .await
        .expect("the node closes the connection instead of waiting for the head")
        .expect("read");
    // A slow client has the whole timeout, and the call was never answered.
    assert!(sent.elapsed() >= HEAD_TIMEOUT - std::time::Duration::from_millis(500));
    assert!(
        !String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    cluster.shutdown().await;
}

/// A body that names a key twice is refused: parsers disagree on which counts, and this one
/// kept the last (`{"holder": "a", "holder": "b"}` granted to `b`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_names_a_key_twice_is_refused_and_nothing_is_done() {
    let (cluster, addr) = open_node().await;
    let http = Http::new(addr, None);
    for body in [
        r#"{"holder": "a", "holder": "b"}"#,
        r#"{"holder": "a", "metadata": {"k": "1", "k": "2"}}"#,
    ] {
        let answer = http
            .raw_with(
                "POST",
                "/v1/resources/t63%2Ftwice:acquire",
                body,
                &[("content-type", "application/json")],
            )
            .await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.json);
        assert_eq!(answer.reason(), "invalid_argument", "{}", answer.json);
        assert!(
            answer.json.to_string().contains("given twice"),
            "{}",
            answer.json
        );
    }
    let resource = tenure_tests::get_resource(&cluster.client(), "t63/twice")
        .await
        .expect("read");
    assert!(resource.leases.is_empty(), "{resource:?}");
    cluster.shutdown().await;
}
