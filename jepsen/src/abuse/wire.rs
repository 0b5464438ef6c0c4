//! Raw HTTP/2 from the attacker's address: a connection and a gRPC request's head, with no
//! client library in between.

use anyhow::Result;
use bytes::Bytes;

/// A gRPC request's head for `method` of `tenure.v1.Leases`, with `token` if given.
pub(super) fn head(endpoint: &str, method: &str, token: Option<&str>) -> Result<http::Request<()>> {
    let mut request = http::Request::post(format!("http://{endpoint}/tenure.v1.Leases/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    Ok(request.body(())?)
}

/// The attacker's own address: loopback, but not the members' (127.0.0.1), as an attacker
/// elsewhere on the network would not be.
const ATTACKER_IP: &str = "127.0.0.2";

/// An HTTP/2 connection from [`ATTACKER_IP`] to `endpoint` whose driver runs in the
/// background.
pub(super) async fn connect(endpoint: &str) -> Result<h2::client::SendRequest<Bytes>> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::new(ATTACKER_IP.parse()?, 0))?;
    let tcp = socket.connect(endpoint.parse()?).await?;
    tcp.set_nodelay(true)?;
    let (client, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
