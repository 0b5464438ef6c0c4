//! The `idle-streams` attack.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::wire::{connect, head};

/// Opens `count` calls as `token`, 1,000 to a connection, and never sends their bodies;
/// holds them until `stop`. Counts the calls the node answered (refused) meanwhile.
pub(super) async fn idle_streams(
    endpoints: Vec<String>,
    count: usize,
    token: String,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
) {
    let mut held = Vec::new();
    let mut pending = futures::stream::FuturesUnordered::new();
    for (i, chunk) in (0..count).collect::<Vec<_>>().chunks(1000).enumerate() {
        let endpoint = &endpoints[i % endpoints.len()];
        let Ok(mut client) = connect(endpoint).await else {
            continue;
        };
        for _ in chunk {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(ready) = client.clone().ready().await else {
                break;
            };
            client = ready;
            let Ok(request) = head(endpoint, "Watch", Some(&token)) else {
                return;
            };
            match client.send_request(request, false) {
                Ok((response, body)) => {
                    held.push(body);
                    pending.push(response);
                    opened.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => break,
            }
        }
    }
    use futures::StreamExt;
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            Some(_) = pending.next() => {
                answered.fetch_add(1, Ordering::Relaxed);
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    drop(held);
}
