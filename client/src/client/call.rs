//! One call: the preferred endpoint, then the others in turn, with retries until the
//! deadline, the leader hint followed, and the token on every request.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backon::Retryable;
use tenure_proto::contract::{Reason, LEADER_HEADER};
use tokio::time::Instant;
use tonic::transport::Channel;

use super::Client;
use crate::error::Error;
use crate::retry;

impl Client {
    /// Runs `call` against the preferred endpoint, then the others in turn, until it is
    /// answered or the deadline passes. Only `unavailable` answers and transport failures are
    /// retried (same request, so same `request_id`), after a delay of [`retry::CALL`] that
    /// would not end past the deadline.
    pub(super) async fn call<T, F, Fut>(&self, deadline: Instant, mut call: F) -> Result<T, Error>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let inner = &self.inner;
        let first = inner.preferred.load(Ordering::Relaxed);
        let attempts = AtomicUsize::new(0);
        // What each endpoint last answered, to name them when none answered in time; empty
        // (no allocation) until a call fails.
        let seen_errors = std::sync::Mutex::new(Vec::<Option<String>>::new());
        let last_errors = &seen_errors;
        let endpoint = |attempt: usize| (first + attempt) % inner.channels.len();
        let attempt = || {
            let index = endpoint(attempts.fetch_add(1, Ordering::Relaxed));
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = (!left.is_zero()).then(|| call(inner.channels[index].clone(), left));
            async move {
                let Some(answer) = answer else {
                    return Err(Error::Status {
                        code: tonic::Code::DeadlineExceeded,
                        reason: Reason::Unavailable.as_str().into(),
                        message: "deadline passed before any node answered; the outcome is unknown"
                            .into(),
                    });
                };
                let result = answer.await;
                if let Err(status) = &result {
                    let mut seen = last_errors.lock().unwrap_or_else(|e| e.into_inner());
                    seen.resize(inner.channels.len(), None);
                    seen[index] = Some(tenure_proto::describe(status));
                }
                self.follow_leader_hint(match &result {
                    Ok(response) => response.metadata(),
                    Err(status) => status.metadata(),
                });
                result.map(tonic::Response::into_inner).map_err(Error::from)
            }
        };
        attempt
            .retry(retry::CALL)
            .when(Error::is_retryable)
            .adjust(|_, delay| delay.filter(|delay| Instant::now() + *delay < deadline))
            .notify(|error, _| {
                let endpoint = &inner.endpoints[endpoint(attempts.load(Ordering::Relaxed) - 1)];
                tracing::debug!(%endpoint, %error, "retrying elsewhere");
            })
            .await
            .map_err(|error| {
                let seen = seen_errors.into_inner().unwrap_or_else(|e| e.into_inner());
                name_the_endpoints(error, &inner.endpoints, &seen)
            })
    }

    /// The leader hint, which is ours and not the retry schedule's: a reply, granted or
    /// refused, whose `tenure-leader` header (SPEC §3.3) names one of our endpoints makes it the
    /// endpoint every later call tries first, since the leader answers without forwarding.
    pub(super) fn follow_leader_hint(&self, metadata: &tonic::metadata::MetadataMap) {
        let inner = &self.inner;
        let Some(leader) = metadata.get(LEADER_HEADER).and_then(|h| h.to_str().ok()) else {
            return;
        };
        if let Some(pos) = leader
            .split_once('=')
            .and_then(|(_, addr)| inner.endpoints.iter().position(|e| e == addr))
        {
            inner.preferred.store(pos, Ordering::Relaxed);
        }
    }

    pub(super) fn deadline(&self) -> Instant {
        Instant::now() + self.inner.timeout
    }

    /// A request with the time left as its gRPC deadline, and the token if there is one.
    pub(crate) fn request<T>(&self, message: T, left: Duration) -> tonic::Request<T> {
        let mut request = self.authorized(message);
        request.set_timeout(left);
        request
    }

    /// A request with the token if there is one, and no deadline (for streams).
    pub(crate) fn authorized<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.inner.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request
    }

    /// Every endpoint's channel once, the preferred one (the leader, once named) first.
    pub(crate) fn channels(&self) -> impl Iterator<Item = Channel> + '_ {
        let channels = &self.inner.channels;
        let start = self.inner.preferred.load(Ordering::Relaxed);
        (0..channels.len()).map(move |k| channels[(start + k) % channels.len()].clone())
    }

    /// Opens a stream on the first endpoint that answers, trying each once; only
    /// `unavailable` answers and transport failures move on to the next.
    pub(crate) async fn open_stream<T, F, Fut>(&self, mut open: F) -> Result<T, Error>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = None;
        for channel in self.channels() {
            match open(channel).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => {
                    let error = Error::from(status);
                    if !error.is_retryable() {
                        return Err(error);
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Local("no endpoints".into())))
    }

    /// The channel of one endpoint, by its index in the endpoint list.
    pub(super) fn channel_of(&self, endpoint: usize) -> Result<Channel, Error> {
        self.inner
            .channels
            .get(endpoint)
            .cloned()
            .ok_or_else(|| Error::Local("no such endpoint".into()))
    }
}

/// A call that gave up with no node answering says which endpoints it tried and what each
/// last did, so an address that is wrong or down is named, not only "unavailable".
fn name_the_endpoints(error: Error, endpoints: &[String], seen: &[Option<String>]) -> Error {
    let Error::Status {
        code,
        reason,
        message,
    } = error
    else {
        return error;
    };
    if Reason::Unavailable != reason.as_str() {
        return Error::Status {
            code,
            reason,
            message,
        };
    }
    if seen.iter().all(Option::is_none) {
        // Also when `seen` is empty: no attempt ended in an error of its own.
        return Error::Status {
            code,
            reason,
            message,
        };
    }
    let tried: Vec<String> = endpoints
        .iter()
        .zip(seen)
        .map(|(endpoint, seen)| match seen {
            Some(error) => format!("{endpoint}: {error}"),
            None => format!("{endpoint}: not tried"),
        })
        .collect();
    Error::Status {
        code,
        reason,
        message: format!(
            "no node answered in time; the outcome is unknown ({})",
            tried.join("; ")
        ),
    }
}
