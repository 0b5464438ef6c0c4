//! The `slow-watch` attack, and the unread Watch streams the noisy neighbour opens too.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tenure_client::pb;

use super::wire::{connect, head};

/// Watch streams over every resource from revision 0, never read: held until dropped.
pub(crate) struct Unread {
    pub opened: u64,
    pub refused: u64,
    _held: Vec<(
        h2::client::SendRequest<Bytes>,
        http::Response<h2::RecvStream>,
    )>,
}

/// Opens `count` Watch streams over every resource from revision 0 as `token`, spread over
/// the nodes, and reads none of them. A stream the node refused at once (its head carries a
/// gRPC status) counts as refused.
pub(crate) async fn unread_watches(endpoints: &[String], count: usize, token: &str) -> Unread {
    let body = {
        let message = pb::WatchRequest {
            prefix: String::new(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
        framed.extend_from_slice(&message);
        Bytes::from(framed)
    };
    let mut unread = Unread {
        opened: 0,
        refused: 0,
        _held: Vec::new(),
    };
    for i in 0..count {
        let endpoint = &endpoints[i % endpoints.len()];
        let Ok(client) = connect(endpoint).await else {
            continue;
        };
        let Ok(mut client) = client.ready().await else {
            continue;
        };
        let Ok(request) = head(endpoint, "Watch", Some(token)) else {
            return unread;
        };
        let Ok((response, mut send)) = client.send_request(request, false) else {
            continue;
        };
        if send.send_data(body.clone(), true).is_err() {
            continue;
        }
        // The response's head, then its body is never read: its window fills and stays full.
        if let Ok(Ok(response)) = tokio::time::timeout(Duration::from_secs(5), response).await {
            if response.headers().contains_key("grpc-status") {
                unread.refused += 1;
            } else {
                unread.opened += 1;
                unread._held.push((client, response));
            }
        }
    }
    unread
}

/// Opens `count` Watch streams over every resource from revision 0 as `token`, and never
/// reads them, until `stop`. Counts the streams the node took.
pub(super) async fn slow_watch(
    endpoints: Vec<String>,
    count: usize,
    token: String,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
) {
    let unread = unread_watches(&endpoints, count, &token).await;
    opened.fetch_add(unread.opened, Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(unread);
}
