//! The gateway's connections: HTTP/1.1 on guarded TCP (or TLS over it) with the gRPC port's
//! protections. Each connection is wrapped by [`crate::guard`] (its calls refused for their
//! credentials spend strikes; one out of strikes is cut and its address kept out for the
//! cooldown), at most [`MAX_CONNECTIONS`] are open at once, a request's head must arrive
//! within [`HEAD_TIMEOUT`], and TCP_NODELAY is on (an event stream's small messages must not
//! wait for Nagle).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::Connected;
use tower::ServiceExt;

use crate::coord::Node;
use crate::guard::Connection;

/// Gateway connections open at once, at most; a connection past it is closed at once.
pub const MAX_CONNECTIONS: usize = 4096;

/// A request's head (line and headers) must arrive within this.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection a request came on, in its extensions (to strike).
#[derive(Clone)]
pub struct OnConnection(pub Arc<Connection>);

/// Serves the gateway on `listener` until `stop`.
pub async fn serve(node: Arc<Node>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let app = super::router(node.clone());
    let tcp = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(10)));
    let guarded = crate::guard::guard(
        crate::guard::Admitted::new(tcp, node.cooldown.clone()),
        node.config.limits.connection_strikes,
    );
    let places = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    match node.tls.clone() {
        Some(tls) => {
            let incoming =
                crate::tls::TlsIncoming::new(Box::pin(guarded), tls, crate::tls::Speaks::Gateway);
            accept(incoming, app, places, &mut stop, |io| {
                io.get_ref().0.connect_info().connection
            })
            .await
        }
        None => {
            accept(Box::pin(guarded), app, places, &mut stop, |io| {
                io.connect_info().connection
            })
            .await
        }
    }
}

/// Serves each connection `incoming` yields, while there is a place for it, until `stop`.
async fn accept<S, IO>(
    mut incoming: S,
    app: axum::Router,
    places: Arc<tokio::sync::Semaphore>,
    stop: &mut watch::Receiver<bool>,
    connection_of: impl Fn(&IO) -> Arc<Connection>,
) where
    S: futures::Stream<Item = std::io::Result<IO>> + Unpin,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // The connections live in this task: aborting it (a node killed) ends them all, as
    // tonic's server ends the gRPC port's.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let next = tokio::select! {
            next = incoming.next() => next,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = stopped(stop) => {
                // Each finishes its calls under way, within its own grace.
                while connections.join_next().await.is_some() {}
                return;
            }
        };
        let io = match next {
            Some(Ok(io)) => io,
            Some(Err(e)) => {
                tracing::debug!("the HTTP gateway could not accept a connection: {e}");
                continue;
            }
            None => return,
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            tracing::warn!(
                "the HTTP gateway has {MAX_CONNECTIONS} connections open: closing a new one"
            );
            continue;
        };
        let connection = connection_of(&io);
        let app = app.clone();
        let mut stop = stop.clone();
        connections.spawn(async move {
            let service =
                tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                    request
                        .extensions_mut()
                        .insert(OnConnection(connection.clone()));
                    app.clone().oneshot(request.map(axum::body::Body::new))
                });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
            tokio::pin!(served);
            tokio::select! {
                _ = served.as_mut() => {}
                () = stopped(&mut stop) => {
                    // Calls under way finish; no new one starts on this connection.
                    served.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(super::BODY_TIMEOUT, served).await;
                }
            }
            drop(place);
        });
    }
}

/// Resolves once `stop` says so (holding no borrow of it across an await).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}
