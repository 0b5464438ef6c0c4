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
//! directory is `500`, the handler not called.

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
}

impl FenceLayer {
    /// Fences kept in `dir` (made if missing; its `.tenure-fence/` holds them).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FenceLayer {
            dir: Arc::new(dir.into()),
            required: true,
        }
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

/// The lease a request names.
struct Lease {
    resource: String,
    token: u64,
    mode: Mode,
}

/// The request's lease (`None`: it names none), or the answer to a malformed one.
fn lease(headers: &HeaderMap) -> Result<Option<Lease>, (StatusCode, String)> {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().map_err(|_| bad(format!("{name} is not text"))))
            .transpose()
    };
    let (resource, token, mode) = (text(RESOURCE)?, text(TOKEN)?, text(MODE)?);
    let (resource, token) = match (resource, token) {
        (None, None) => return Ok(None),
        (Some(resource), Some(token)) if !resource.is_empty() => (resource, token),
        _ => return Err(bad(format!("{RESOURCE} and {TOKEN} go together"))),
    };
    let token = token
        .trim()
        .parse()
        .map_err(|_| bad(format!("{TOKEN} is not a fencing token: {token:?}")))?;
    let mode = match mode.map(str::trim) {
        None | Some("exclusive") => Mode::Exclusive,
        Some("shared") => Mode::Shared,
        Some(other) => return Err(bad(format!("{MODE} is exclusive or shared: {other:?}"))),
    };
    Ok(Some(Lease {
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
            // flock blocks: on a blocking thread, which waits there for the writer before.
            let dir = layer.dir.clone();
            let checked = tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(dir.as_path())?;
                let held = Held::lock(&dir, &lease.resource)?;
                held.admit(lease.token, lease.mode)?;
                Ok::<_, Error>(held)
            })
            .await;
            let held = match checked {
                Ok(Ok(held)) => held,
                Ok(Err(error)) => return Ok(refusal(error)),
                Err(join) => return Ok(refusal(Error::Io(std::io::Error::other(join)))),
            };
            let response = inner.call(request).await;
            // The handler's writes are done (its response is ready): the next writer may check.
            drop(held);
            response
        })
    }
}
