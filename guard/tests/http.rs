//! The HTTP layer (`tenure_guard::http::FenceLayer`) in front of a handler that records what
//! it was asked to write: the headers, a stale token answered 409 with both tokens and the
//! handler not called, the shared-mode rule, the fence kept across a restart, another
//! process's hold on the resource's lock keeping the handler out, and in this process writers
//! taking turns, one that leaves while waiting leaving no turn behind.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode};
use tenure_guard::http::{Admitted, FenceLayer, HIGHEST, MODE, RESOURCE, TOKEN};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt};

/// What the handler was asked to write: each request's token header, in the order it ran.
type Written = Arc<Mutex<Vec<String>>>;

/// One request through `layer` to a handler that records its token header.
async fn send(
    layer: &FenceLayer,
    written: &Written,
    method: Method,
    headers: &[(&str, &str)],
) -> Response<String> {
    let written = written.clone();
    let handler = tower::service_fn(move |request: Request<String>| {
        let written = written.clone();
        async move {
            let token = request
                .headers()
                .get(TOKEN)
                .map(|v| v.to_str().expect("text"));
            written
                .lock()
                .expect("lock")
                .push(token.unwrap_or("-").to_owned());
            Ok::<_, std::convert::Infallible>(Response::new(String::from("done")))
        }
    });
    let mut request = Request::builder().method(method).uri("/ledger");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(String::new()).expect("a request");
    let Ok(response) = layer.layer(handler).oneshot(request).await;
    response
}

fn json(response: &Response<String>) -> serde_json::Value {
    serde_json::from_str(response.body()).expect("a JSON body")
}

fn written(written: &Written) -> Vec<String> {
    written.lock().expect("lock").clone()
}

#[tokio::test]
async fn a_stale_token_is_answered_409_with_both_tokens_and_the_handler_not_called() {
    let dir = tempfile::tempdir().expect("dir");
    let layer = FenceLayer::new(dir.path());
    let log = Written::default();
    let lease = |token: &'static str| [(RESOURCE, "billing/ledger"), (TOKEN, token)];
    for token in ["5", "5", "9"] {
        let response = send(&layer, &log, Method::POST, &lease(token)).await;
        assert_eq!(response.status(), StatusCode::OK, "token {token}");
    }
    let response = send(&layer, &log, Method::POST, &lease("5")).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(response.headers()[HIGHEST], "9");
    let body = json(&response);
    assert_eq!(body["error"], "stale_fencing_token");
    assert_eq!(body["resource"], "billing/ledger");
    assert_eq!(
        (body["highest"].as_u64(), body["got"].as_u64()),
        (Some(9), Some(5))
    );
    assert_eq!(written(&log), ["5", "5", "9"]);

    // A restart: a new layer over the same directory keeps the fence.
    let restarted = FenceLayer::new(dir.path());
    let response = send(&restarted, &log, Method::PUT, &lease("7")).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    // Another resource has its own fence.
    let other = [(RESOURCE, "billing/other"), (TOKEN, "2")];
    let response = send(&restarted, &log, Method::POST, &other).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_write_names_its_lease_in_well_formed_headers() {
    let dir = tempfile::tempdir().expect("dir");
    let layer = FenceLayer::new(dir.path());
    let log = Written::default();
    let response = send(&layer, &log, Method::POST, &[]).await;
    assert_eq!(response.status(), StatusCode::PRECONDITION_REQUIRED);
    assert_eq!(json(&response)["error"], "fencing_token_required");
    let response = send(&layer, &log, Method::GET, &[]).await;
    assert_eq!(response.status(), StatusCode::OK, "a read passes");
    let bad: [&[(&str, &str)]; 9] = [
        &[(RESOURCE, "r"), (TOKEN, "abc")],
        &[(RESOURCE, "r"), (TOKEN, "0")],
        &[(RESOURCE, "r"), (TOKEN, "+5")],
        &[(RESOURCE, "r"), (TOKEN, "007")],
        &[(RESOURCE, "r"), (TOKEN, "9223372036854775808")],
        &[(RESOURCE, "r")],
        &[(TOKEN, "4")],
        &[(RESOURCE, "r"), (TOKEN, "4"), (MODE, "sometimes")],
        &[(RESOURCE, "r"), (RESOURCE, "r"), (TOKEN, "4")],
    ];
    for headers in bad {
        let response = send(&layer, &log, Method::POST, headers).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{headers:?}");
        assert_eq!(json(&response)["error"], "invalid_fencing_headers");
    }
    assert_eq!(written(&log), ["-"], "only the read reached the handler");
    let optional = FenceLayer::new(dir.path()).optional();
    let response = send(&optional, &log, Method::POST, &[]).await;
    assert_eq!(response.status(), StatusCode::OK);
    let only_billing = FenceLayer::new(dir.path()).resources(|r| r.starts_with("billing/"));
    let other = [(RESOURCE, "spam/1"), (TOKEN, "4")];
    let response = send(&only_billing, &log, Method::POST, &other).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        !dir.path().join(".tenure-fence").exists(),
        "nothing made for it"
    );
}

#[tokio::test]
async fn shared_writers_are_checked_against_the_exclusive_token_and_fence_out_older_ones() {
    let dir = tempfile::tempdir().expect("dir");
    let layer = FenceLayer::new(dir.path());
    let log = Written::default();
    let status = |response: Response<String>| response.status();
    let exclusive = |t| [(RESOURCE, "seats"), (TOKEN, t)];
    let shared = |t| [(RESOURCE, "seats"), (TOKEN, t), (MODE, "shared")];
    assert_eq!(
        status(send(&layer, &log, Method::POST, &exclusive("10")).await),
        200
    );
    assert_eq!(
        status(send(&layer, &log, Method::POST, &shared("12")).await),
        200
    );
    assert_eq!(
        status(send(&layer, &log, Method::POST, &shared("11")).await),
        200
    );
    assert_eq!(
        status(send(&layer, &log, Method::POST, &shared("9")).await),
        409
    );
    let response = send(&layer, &log, Method::POST, &exclusive("10")).await;
    assert_eq!(
        json(&response)["highest"],
        12,
        "the co-holders came after it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_holding_the_resource_s_lock_keeps_the_handler_out() {
    let dir = tempfile::tempdir().expect("dir");
    let layer = FenceLayer::new(dir.path());
    let log = Written::default();
    let lease = [(RESOURCE, "r"), (TOKEN, "5")];
    assert_eq!(send(&layer, &log, Method::POST, &lease).await.status(), 200);
    // Another process's writer, as far as the lock goes.
    let lock = std::fs::File::open(dir.path().join(".tenure-fence/r.lock")).expect("lock file");
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).expect("takes it");
    let waiting = tokio::spawn({
        let (layer, log) = (layer.clone(), log.clone());
        async move { send(&layer, &log, Method::POST, &[(RESOURCE, "r"), (TOKEN, "9")]).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !waiting_in_flock() {
        assert_eq!(
            written(&log),
            ["5"],
            "the handler ran beside the lock's holder"
        );
        assert!(
            Instant::now() < deadline,
            "the request is not waiting for the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(lock);
    assert_eq!(waiting.await.expect("joins").status(), StatusCode::OK);
    assert_eq!(written(&log), ["5", "9"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_in_one_process_take_turns_and_one_that_leaves_while_waiting_leaks_none() {
    let dir = tempfile::tempdir().expect("dir");
    let layer = FenceLayer::new(dir.path());
    let log = Written::default();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (log, entered, release) = (log.clone(), entered.clone(), release.clone());
        tower::service_fn(move |request: Request<String>| {
            let (log, entered, release) = (log.clone(), entered.clone(), release.clone());
            async move {
                let admitted = request.extensions().get::<Admitted>().expect("the lease");
                let token = request.headers()[TOKEN].to_str().expect("text").to_owned();
                assert_eq!(admitted.token.to_string(), token);
                log.lock().expect("lock").push(token.clone());
                if token == "5" {
                    entered.notify_one();
                    release.notified().await;
                }
                Ok::<_, std::convert::Infallible>(Response::new(String::new()))
            }
        })
    };
    let request = |token: &str| {
        Request::post("/ledger")
            .header(RESOURCE, "r")
            .header(TOKEN, token)
            .body(String::new())
            .expect("a request")
    };
    let first = tokio::spawn(layer.layer(handler.clone()).oneshot(request("5")));
    entered.notified().await;
    let leaving = tokio::spawn(layer.layer(handler.clone()).oneshot(request("7")));
    let third = tokio::spawn(layer.layer(handler.clone()).oneshot(request("9")));
    leaving.abort();
    assert!(leaving.await.expect_err("aborted").is_cancelled());
    assert_eq!(written(&log), ["5"], "no one ran beside the first");
    // While the first one's handler runs, its flock keeps another process's writer out.
    let lock_path = dir.path().join(".tenure-fence/r.lock");
    let try_lock = || {
        let lock = std::fs::File::open(&lock_path).expect("lock file");
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
    };
    assert_eq!(try_lock(), Err(rustix::io::Errno::WOULDBLOCK));
    release.notify_one();
    for answered in [first, third] {
        let Ok(response) = answered.await.expect("joins");
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(written(&log), ["5", "9"]);
    let Ok(after) = layer.layer(handler).oneshot(request("11")).await;
    assert_eq!(after.status(), StatusCode::OK, "no turn was left behind");
    assert_eq!(
        try_lock(),
        Ok(()),
        "the lock is released once the handler answered"
    );
}

/// Whether a thread of this process waits for a file lock.
fn waiting_in_flock() -> bool {
    std::fs::read_dir("/proc/self/task")
        .expect("lists threads")
        .flatten()
        .any(|task| {
            std::fs::read_to_string(task.path().join("wchan"))
                .is_ok_and(|wchan| wchan == "locks_lock_inode_wait")
        })
}

#[tokio::test]
async fn it_layers_an_axum_router() {
    let dir = tempfile::tempdir().expect("dir");
    let app = axum::Router::new()
        .route("/ledger", axum::routing::post(|| async { "written" }))
        .layer(FenceLayer::new(dir.path()));
    let post = |token: &str| {
        Request::post("/ledger")
            .header(RESOURCE, "billing/ledger")
            .header(TOKEN, token)
            .body(axum::body::Body::empty())
            .expect("a request")
    };
    let Ok(written) = app.clone().oneshot(post("9")).await;
    assert_eq!(written.status(), StatusCode::OK);
    let Ok(refused) = app.oneshot(post("5")).await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    assert_eq!(refused.headers()[HIGHEST], "9");
}
