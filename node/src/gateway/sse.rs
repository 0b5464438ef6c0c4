//! `Watch` as Server-Sent Events: each `WatchResponse` is one `watch` event whose `id` is its
//! `revision` (every event up to it has been sent) and whose data is its JSON. A client that
//! reconnects, to this node or another, with `Last-Event-ID: R` resumes after revision R, as
//! `start_revision = R` would: no gap, no duplicate. An error after the stream opened is one
//! `error` event with the error's JSON, and the stream ends.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use prost::Message;
use prost_reflect::MessageDescriptor;
use tenure_proto::v1 as pb;

use super::error::{body_of, Failure};
use crate::coord::Node;
use crate::error::ApiError;

/// Opens the watch `encoded` asks for (from `Last-Event-ID` on, when given) as an event
/// stream; an error before it opens is an ordinary JSON error.
pub async fn watch(
    node: &Arc<Node>,
    input: MessageDescriptor,
    encoded: Vec<u8>,
    last_event_id: Option<String>,
    extensions: http::Extensions,
) -> Response {
    let encoded = match last_event_id {
        None => encoded,
        Some(id) => match resumed(&encoded, &id) {
            Ok(encoded) => encoded,
            Err(failure) => return failure.into_response(),
        },
    };
    let Some(output) = input
        .parent_pool()
        .get_message_by_name("tenure.v1.WatchResponse")
    else {
        return Failure(tonic::Status::internal("no WatchResponse descriptor")).into_response();
    };
    let stream = match super::call::watch(node, &encoded, extensions).await {
        Ok(stream) => stream,
        Err(status) => return Failure(status).into_response(),
    };
    let events = stream.map(move |item| match item.map(|r| message(&output, &r)) {
        Ok(Ok(event)) => (event, false),
        Ok(Err(status)) | Err(status) => {
            let (_, body) = body_of(&status);
            (Event::default().event("error").data(body.to_string()), true)
        }
    });
    // Ends after the first error.
    let events = futures::stream::unfold((events, false), |(mut events, done)| async move {
        if done {
            return None;
        }
        let (event, last) = events.next().await?;
        Some((Ok::<_, Infallible>(event), (events, last)))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// One `WatchResponse` as an event; a message that does not convert ends the stream with an
/// error rather than skip its events under a later id.
fn message(
    output: &MessageDescriptor,
    response: &pb::WatchResponse,
) -> Result<Event, tonic::Status> {
    let data = super::json::reply(output, &response.encode_to_vec())
        .map_err(|e| tonic::Status::internal(format!("a watch message to JSON: {e}")))?;
    Ok(Event::default()
        .event("watch")
        .id(response.revision.to_string())
        .data(data.to_string()))
}

/// The watch request with `start_revision` taken from a `Last-Event-ID`.
fn resumed(encoded: &[u8], last_event_id: &str) -> Result<Vec<u8>, Failure> {
    let revision: u64 = last_event_id.trim().parse().map_err(|_| {
        Failure::from(ApiError::invalid(
            "Last-Event-ID",
            format!("{last_event_id:?} is not a revision"),
        ))
    })?;
    let mut request = pb::WatchRequest::decode(encoded)
        .map_err(|e| Failure::from(ApiError::invalid("", e.to_string())))?;
    request.start_revision = revision;
    request.live_only = false;
    Ok(request.encode_to_vec())
}
