//! Fencing for services that take writes over HTTP (docs/fencing.md, "HTTP"): the caller
//! names its lease in two headers,
//!
//! ```text
//! Tenure-Resource: billing/ledger
//! Tenure-Fencing-Token: 1207
//! Tenure-Lease-Mode: shared            (optional: a READ or WRITE co-holder)
//! ```
//!
//! and [`FenceLayer`], a tower layer, checks the token against the highest the service has
//! seen for that resource, kept durably in a guarded directory ([`crate::dir`]: a token file
//! per resource under `flock`). The resource's lock is held from the check until the handler's
//! response is ready, so the check and whatever the handler writes are one step for every
//! writer of the resource going through the layer (in this process or another sharing the
//! directory). A stale token is answered `409 Conflict` without calling the handler:
//!
//! ```text
//! {"error":"stale_fencing_token","resource":"billing/ledger","highest":1302,"got":1207}
//! ```
//!
//! with the tokens in `Tenure-Fencing-Token-Highest` too. A malformed header is `400`; a write
//! (any method but GET, HEAD, OPTIONS and TRACE) without the headers is `428 Precondition
//! Required`, unless [`FenceLayer::optional`] lets it through unchecked. A failure of the
//! directory is `500`, the handler not called. The handler finds the lease in the request's
//! extensions ([`Admitted`]).
//!
//! Writers of a resource in one process take turns on an async lock (holding no thread);
//! one of them at a time waits in `flock` for a writer in another process. The lock is held
//! until the handler's response is ready, not while a streamed body is sent: write before
//! answering. It has no time limit of its own: bound your handlers' time (a tower timeout).

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::json;
use tower::{Layer, Service};

use crate::dir::Held;
use crate::{Error, Mode};

pub const RESOURCE: &str = "tenure-resource";
pub const TOKEN: &str = "tenure-fencing-token";
pub const MODE: &str = "tenure-lease-mode";
/// In a 409: the token that fenced the request out.
pub const HIGHEST: &str = "tenure-fencing-token-highest";

/// Guards the requests of the services it wraps with the fence kept in a directory.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    dir: Arc<PathBuf>,
    required: bool,
    turns: Arc<Turns>,
    allow: fn(&str) -> bool,
}

/// One async lock per resource with a request in flight. An entry no one holds or waits for
/// is removed when its last turn ends, and swept (with any a cancelled wait left) whenever
/// the map has doubled since the last sweep: it stays within twice the resources in flight.
#[derive(Debug, Default)]
struct Turns(std::sync::Mutex<TurnMap>);

#[derive(Debug, Default)]
struct TurnMap {
    locks: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    sweep_at: usize,
}

/// A request's turn at its resource in this process, ended when dropped: after its handler
/// answered, or, if the request is dropped while its blocking thread waits in `flock`, when
/// that thread is done (the turn moves there), so that one thread per resource waits at most.
struct Turn {
    turns: Arc<Turns>,
    resource: String,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Turns {
    async fn turn(self: &Arc<Self>, resource: &str) -> Turn {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if map.locks.len() >= map.sweep_at {
                map.locks.retain(|_, lock| Arc::strong_count(lock) > 1);
                map.sweep_at = (map.locks.len() * 2).max(64);
            }
            map.locks.entry(resource.to_owned()).or_default().clone()
        };
        Turn {
            turns: self.clone(),
            resource: resource.to_owned(),
            _guard: lock.lock_owned().await,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut map = self.turns.0.lock().unwrap_or_else(|p| p.into_inner());
        // The map's and the guard's: no one else holds or waits (clones are made only under
        // the map's lock, held here).
        if map
            .locks
            .get(&self.resource)
            .is_some_and(|lock| Arc::strong_count(lock) <= 2)
        {
            map.locks.remove(&self.resource);
        }
    }
}

impl FenceLayer {
    /// Fences kept in `dir` (made if missing; its `.tenure-fence/` holds them).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FenceLayer {
            dir: Arc::new(dir.into()),
            required: true,
            turns: Arc::default(),
            allow: |_| true,
        }
    }

    /// Only resources `allow` accepts are fenced (a token file and a lock file each); a
    /// request naming another is `400` before anything is made. The default takes every
    /// name: a client that may write can then make files for as many names as it likes.
    pub fn resources(self, allow: fn(&str) -> bool) -> Self {
        FenceLayer { allow, ..self }
    }

    /// Writes without the headers pass unchecked, instead of `428`.
    pub fn optional(self) -> Self {
        FenceLayer {
            required: false,
            ..self
        }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service behind a [`FenceLayer`].
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    layer: FenceLayer,
}

/// The lease a request named and the layer admitted: in the request's extensions for the
/// handler (`request.extensions().get::<Admitted>()`), which should write only what this
/// resource covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub resource: String,
    pub token: u64,
    pub mode: Mode,
}

/// The request's lease (`None`: it names none), or the answer to a malformed one: a header
/// given twice or not text, a resource without a token or the other way round, a token Tenure
/// never grants (decimal digits, no sign, no leading zero), a mode other than exclusive or
/// shared.
fn lease(headers: &HeaderMap) -> Result<Option<Admitted>, (StatusCode, String)> {
    let text = |name: &str| match headers.get_all(name).iter().count() {
        0 | 1 => headers
            .get(name)
            .map(|v| v.to_str().map_err(|_| bad(format!("{name} is not text"))))
            .transpose(),
        n => Err(bad(format!("{name} is given {n} times"))),
    };
    let (resource, token, mode) = (text(RESOURCE)?, text(TOKEN)?, text(MODE)?);
    let (resource, token) = match (resource, token) {
        (None, None) => return Ok(None),
        (Some(resource), Some(token)) if !resource.is_empty() => (resource, token),
        _ => return Err(bad(format!("{RESOURCE} and {TOKEN} go together"))),
    };
    let digits = token.trim();
    let token = Some(digits)
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()) && !d.starts_with('0'))
        .and_then(|d| d.parse().ok())
        .filter(|t| crate::valid_token(*t).is_ok())
        .ok_or_else(|| bad(format!("{TOKEN} is not a fencing token: {token:?}")))?;
    let mode = match mode.map(str::trim) {
        None | Some("exclusive") => Mode::Exclusive,
        Some("shared") => Mode::Shared,
        Some(other) => return Err(bad(format!("{MODE} is exclusive or shared: {other:?}"))),
    };
    Ok(Some(Admitted {
        resource: resource.to_owned(),
        token,
        mode,
    }))
}

fn bad(message: String) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, message)
}

/// A JSON answer of the layer's own.
fn answer<B: From<String>>(status: StatusCode, body: serde_json::Value) -> Response<B> {
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn refusal<B: From<String>>(error: Error) -> Response<B> {
    match error {
        Error::Stale {
            resource,
            highest,
            got,
        } => {
            let body = json!({
                "error": "stale_fencing_token",
                "resource": resource,
                "highest": highest,
                "got": got,
            });
            let mut response = answer(StatusCode::CONFLICT, body);
            response.headers_mut().insert(HIGHEST, highest.into());
            response
        }
        Error::Token(_) | Error::Name(_) => bad_request(error.to_string()),
        other => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": "fence_unavailable", "message": other.to_string()}),
        ),
    }
}

fn bad_request<B: From<String>>(message: String) -> Response<B> {
    answer(
        StatusCode::BAD_REQUEST,
        json!({"error": "invalid_fencing_headers", "message": message}),
    )
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Fenced<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone that was made ready serves this request; a fresh clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let mut request = request;
            let lease = match lease(request.headers()) {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    let reads = [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE];
                    if layer.required && !reads.contains(request.method()) {
                        let message = format!("a write names its lease: {RESOURCE}, {TOKEN}");
                        let body = json!({"error": "fencing_token_required", "message": message});
                        return Ok(answer(StatusCode::PRECONDITION_REQUIRED, body));
                    }
                    return inner.call(request).await;
                }
                Err((_, message)) => return Ok(bad_request(message)),
            };
            if !(layer.allow)(&lease.resource) {
                let message = format!("{RESOURCE} names no resource fenced here");
                return Ok(bad_request(message));
            }
            // This process's writers of the resource queue here, holding no thread; one at a
            // time waits in flock (on a blocking thread) for another process's writer.
            let turn = layer.turns.turn(&lease.resource).await;
            let dir = layer.dir.clone();
            let (resource, token, mode) = (lease.resource.clone(), lease.token, lease.mode);
            let checked = tokio::task::spawn_blocking(move || {
                let held = std::fs::create_dir_all(dir.as_path())
                    .map_err(Error::from)
                    .and_then(|()| Held::lock(&dir, &resource))
                    .and_then(|held| held.admit(token, mode).map(|()| held));
                (turn, held)
            })
            .await;
            let (turn, held) = match checked {
                Ok((turn, Ok(held))) => (turn, held),
                Ok((_, Err(error))) => return Ok(refusal(error)),
                Err(join) => return Ok(refusal(Error::Io(std::io::Error::other(join)))),
            };
            request.extensions_mut().insert(lease);
            let response = inner.call(request).await;
            // The handler's writes are done (its response is ready): the next writer may check.
            drop(held);
            drop(turn);
            response
        })
    }
}
