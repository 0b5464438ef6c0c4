//! A `Watch` that outlives the node serving it: when the stream breaks (a node dies, a
//! connection drops), it opens a new one on the next endpoint from the last revision it
//! delivered, so the events it yields have no gap and no duplicate (SPEC §4.12).

use futures::stream::BoxStream;
use tenure_proto::contract::Reason;
use tenure_proto::v1 as pb;

use crate::client::Client;
use crate::error::Error;
use crate::retry::Reconnects;

/// The messages of a resuming watch; it ends after the first error it cannot retry.
pub type WatchMessages = BoxStream<'static, Result<pb::WatchResponse, Error>>;

struct Resuming {
    client: Client,
    /// The next request: `start_revision` follows the revision of every message delivered.
    request: pb::WatchRequest,
    stream: Option<tonic::Streaming<pb::WatchResponse>>,
    reconnects: Reconnects,
    ended: bool,
}

impl Client {
    /// `Watch` that reconnects (to any endpoint, backing off from 20 ms to about 1 s, for as
    /// long as it takes) after a transport failure, `unavailable`, or `slow_watcher` (the node
    /// cut off a reader that fell behind), resuming after the last revision received. Any
    /// other error, `compacted` included, is yielded once and ends the stream.
    pub fn watch_resuming(&self, request: pb::WatchRequest) -> WatchMessages {
        let state = Resuming {
            client: self.clone(),
            request,
            stream: None,
            reconnects: Reconnects::new(),
            ended: false,
        };
        Box::pin(futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        }))
    }
}

impl Resuming {
    async fn next(&mut self) -> Option<Result<pb::WatchResponse, Error>> {
        while !self.ended {
            let error = match self.stream.as_mut() {
                None => match self.client.watch(self.request.clone()).await {
                    Ok(stream) => {
                        self.stream = Some(stream);
                        continue;
                    }
                    Err(error) => Some(error),
                },
                Some(stream) => match stream.message().await {
                    Ok(Some(message)) => {
                        self.reconnects.reset();
                        if message.revision > self.request.start_revision {
                            self.request.start_revision = message.revision;
                            self.request.live_only = false;
                        }
                        return Some(Ok(message));
                    }
                    // The node ended the stream (it is shutting down): resume elsewhere.
                    Ok(None) => None,
                    Err(status) => Some(Error::from(status)),
                },
            };
            self.stream = None;
            if let Some(error) = error {
                if !error.is_retryable() && error.reason() != Some(Reason::SlowWatcher) {
                    self.ended = true;
                    return Some(Err(error));
                }
                tracing::debug!(%error, revision = self.request.start_revision, "watch broke; resuming");
            }
            self.reconnects.wait().await;
        }
        None
    }
}
