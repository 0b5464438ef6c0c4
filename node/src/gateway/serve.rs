//! The HTTP ports' connections: HTTP/1.1 on guarded TCP (or TLS over it) with the gRPC port's
//! protections, for the gateway and the metrics endpoint alike ([`serve_http`]). Each
//! connection is wrapped by [`crate::guard`] (its calls refused for their credentials spend
//! strikes; one out of strikes is cut and its address kept out for the cooldown) and has a
//! place in its port's [`Table`] (how many are open, from one address, and how long one may
//! stay quiet), a request's head must arrive within [`HEAD_TIMEOUT`], and TCP_NODELAY is on
//! (an event stream's small messages must not wait for Nagle).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::Connected;
use tower::ServiceExt;

use crate::coord::Node;
use crate::guard::{Connection, Table};

/// A request's head (line and headers) must arrive within this.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection a request came on, in its extensions (to strike).
#[derive(Clone)]
pub struct OnConnection(pub Arc<Connection>);

/// Serves the gateway on `listener` until `stop`.
pub async fn serve(node: Arc<Node>, listener: TcpListener, stop: watch::Receiver<bool>) {
    let app = super::router(node.clone());
    let table = node.connection_table(crate::coord::connections::Port::Http);
    let tls = node
        .tls
        .clone()
        .map(|tls| (tls, crate::tls::Speaks::Gateway));
    serve_http(&node, app, listener, (tls, table), stop).await
}

/// Serves `app` over HTTP/1.1 on `listener` until `stop`, each connection with a place in
/// `table`: after a TLS handshake of the kind `Speaks` says when `tls` is given.
pub async fn serve_http(
    node: &Arc<Node>,
    app: axum::Router,
    listener: TcpListener,
    (tls, table): (
        Option<(Arc<crate::tls::Tls>, crate::tls::Speaks)>,
        Arc<Table>,
    ),
    mut stop: watch::Receiver<bool>,
) {
    let tcp = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(10)));
    let guarded = crate::guard::guard(
        crate::guard::Admitted::new(tcp, node.cooldown.clone()),
        node.config.limits.connection_strikes,
        table,
    );
    match tls {
        Some((tls, speaks)) => {
            let incoming = crate::tls::TlsIncoming::new(Box::pin(guarded), tls, speaks);
            accept(incoming, app, &mut stop, |io| {
                io.get_ref().0.connect_info().connection
            })
            .await
        }
        None => {
            accept(Box::pin(guarded), app, &mut stop, |io| {
                io.connect_info().connection
            })
            .await
        }
    }
}

/// Serves each connection `incoming` yields until `stop`.
async fn accept<S, IO>(
    mut incoming: S,
    app: axum::Router,
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
        let connection = connection_of(&io);
        let app = app.clone();
        let mut stop = stop.clone();
        connections.spawn(async move {
            let service =
                tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                    // The request is open on its connection until its response's body is done;
                    // one read just before the connection was closed is not begun.
                    let open = connection.try_call();
                    request
                        .extensions_mut()
                        .insert(OnConnection(connection.clone()));
                    let app = app.clone();
                    async move {
                        let Some(open) = open else {
                            let mut closed = http::Response::new(axum::body::Body::empty());
                            *closed.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                            closed.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                            return Ok(closed);
                        };
                        let response = app.oneshot(request.map(axum::body::Body::new)).await?;
                        Ok::<_, std::convert::Infallible>(response.map(|body| {
                            axum::body::Body::new(body.map_frame(move |frame| {
                                let _open = &open;
                                frame
                            }))
                        }))
                    }
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
        });
    }
}

/// Resolves once `stop` says so (holding no borrow of it across an await).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}
