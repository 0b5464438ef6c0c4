//! The auth gate: a tower layer in front of every service that knows the caller from the
//! request headers alone, before a byte of the body is read.
//!
//! - The internal `tenure.raft.v1.Raft` service takes only peers: the peer token when auth
//!   is on (no token or an unknown one: `unauthenticated`; a client's or admin's token:
//!   `permission_denied`), with TLS on a certificate the cluster CA signed, and the same
//!   configuration digest as this node's (`crate::agreement`; else `config_mismatch`).
//! - The client API (`Leases`, `Cluster`) takes a known bearer token; the caller goes into the
//!   request's extensions for the handlers ([`crate::auth::caller_of`]). Then the node-wide
//!   cap on client requests in flight applies (`too_many_requests`). Argument validation
//!   and every check that needs the body come after, in SPEC §3's order.
//! - Health answers anyone (load balancers and Kubernetes probes carry no token).
//!   Reflection answers anyone, but describes the internal service only to a caller with a
//!   known token ([`Reflection`](super::reflection::Reflection)). Their streams (Health Watch, reflection) have a node-wide
//!   cap of their own, held as long as the stream's body (`--max-public-streams`).
//!
//! Only a caller that passed the gate learns the leader from the `tenure-leader` header.
//! Every refusal, the gate's and the handlers', is counted by cause
//! (`tenure_refusals_total`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::auth::PeerCall;
use crate::coord::Node;
use crate::error::{ApiError, Reason};
use crate::guard::{Connection, GuardInfo};
use crate::lease::Rejection;

/// What a path asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Door {
    Peer,
    Client,
    Health,
    Reflection,
}

fn door(path: &str) -> Door {
    if path.starts_with("/tenure.raft.") {
        Door::Peer
    } else if path.starts_with("/grpc.health.") {
        Door::Health
    } else if path.starts_with("/grpc.reflection.") {
        Door::Reflection
    } else {
        Door::Client
    }
}

/// What tonic knows of a TLS connection the node guards.
type TlsInfo = TlsConnectInfo<GuardInfo<TcpConnectInfo>>;

/// Whether the connection presented a client certificate (the TLS handshake verified it
/// against the cluster CA).
fn has_peer_certificate<B>(request: &http::Request<B>) -> bool {
    request
        .extensions()
        .get::<TlsInfo>()
        .and_then(|info| info.peer_certs())
        .is_some_and(|certs| !certs.is_empty())
}

/// The connection `request` came on, to strike (`crate::guard`).
fn connection<B>(request: &http::Request<B>) -> Option<Arc<Connection>> {
    let extensions = request.extensions();
    extensions
        .get::<GuardInfo<TcpConnectInfo>>()
        .map(|info| info.connection.clone())
        .or_else(|| {
            extensions
                .get::<TlsInfo>()
                .map(|info| info.get_ref().connection.clone())
        })
}

/// Calls cancelled (dropped unanswered, or their request body reset) sooner than this after
/// they were sent are a strike (rapid reset): an honest client cancels when its deadline
/// passes.
const QUICK_CANCEL: Duration = Duration::from_millis(10);

/// Strikes the connection of a call dropped (cancelled by its client) before it was answered,
/// when that came at once.
struct CancelWatch {
    gate: Option<(Arc<Node>, Arc<Connection>)>,
    started: Instant,
    answered: bool,
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        if let Some((node, connection)) = &self.gate {
            if !self.answered && self.started.elapsed() < QUICK_CANCEL {
                strike(
                    node,
                    connection,
                    "calls cancelled as soon as they were sent",
                );
            }
        }
    }
}

/// Spends a strike of `connection`; one out of strikes is cut, and its address kept out.
pub fn strike(node: &Node, connection: &Connection, why: &str) {
    let limits = &node.config.limits;
    if connection.is_over() || !connection.strike(limits.connection_strikes) {
        return;
    }
    if !connection.cut() {
        return;
    }
    node.connections_cut
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A member's address is never kept out (on loopback, every member and client shares
    // one): its calls to this node must go on.
    let kept_out = connection
        .remote()
        .map(|remote| remote.ip().to_canonical())
        .filter(|ip| !limits.abuse_cooldown.is_zero() && !node.member_ips().contains(ip));
    if let Some(ip) = kept_out {
        node.cooldown.start(ip, limits.abuse_cooldown);
    }
    tracing::warn!(
        remote = ?connection.remote(),
        cooldown = ?limits.abuse_cooldown,
        "closed a connection for abuse ({why}); its address may not connect for the cooldown"
    );
}

/// Admits a call to the client API from its headers alone (the gRPC gate's, and the HTTP
/// gateway's): the caller its bearer token names, then a place among the calls in flight.
/// The caller, its credential and the place go into `extensions` for the handlers.
pub fn admit_client(
    node: &Node,
    headers: &http::HeaderMap,
    extensions: &mut http::Extensions,
) -> Result<crate::limits::InFlight, ApiError> {
    let auth = node.auth();
    let (caller, credential) = auth.client(headers)?;
    let in_flight = node.enter_in_flight(&caller, auth.is_on())?;
    extensions.insert(in_flight.clone());
    extensions.insert(caller);
    if let Some(credential) = credential {
        extensions.insert(credential);
    }
    Ok(in_flight)
}

#[derive(Clone)]
pub struct GateLayer {
    node: Arc<Node>,
    tls: bool,
}

impl GateLayer {
    pub fn new(node: Arc<Node>, tls: bool) -> Self {
        GateLayer { node, tls }
    }
}

impl<S> tower::Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Gate<S> {
        Gate {
            inner,
            node: self.node.clone(),
            tls: self.tls,
        }
    }
}

#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    node: Arc<Node>,
    tls: bool,
}

/// Held while an admitted call runs.
enum Admitted {
    Open,
    /// A stream open to callers without a token: its place is held as long as its body.
    Public(crate::limits::Permit),
    Peer,
    Client(crate::limits::InFlight),
}

impl<S> Gate<S> {
    /// Refuses a peer of another Raft protocol (`agreement::RAFT_PROTOCOL`), or whose
    /// configuration digest differs from this node's.
    fn same_configuration(&self, headers: &http::HeaderMap) -> Result<(), ApiError> {
        use crate::agreement::{PROTOCOL_HEADER, RAFT_PROTOCOL};
        let ours = self.node.config_digest();
        let peer = match headers.get(crate::agreement::FROM_HEADER) {
            Some(id) => format!("node {}", String::from_utf8_lossy(id.as_bytes())),
            None => "a peer".to_string(),
        };
        let protocol = headers.get(PROTOCOL_HEADER).map(|p| p.as_bytes());
        let digest = headers.get(crate::agreement::DIGEST_HEADER);
        // A node of protocol 1 (openraft 0.9) sends a digest and no protocol; a call with
        // neither is not a node's (a tool's, a test's), and the body decides.
        let other_protocol = match protocol {
            Some(theirs) => theirs != RAFT_PROTOCOL.as_bytes(),
            None => digest.is_some(),
        };
        if other_protocol {
            let theirs = protocol.map_or("1".into(), String::from_utf8_lossy);
            let record = format!("raft protocol {theirs}");
            if self.node.peers.mismatches.record(&peer, &record) {
                tracing::error!(
                    %peer, their_protocol = %theirs, our_protocol = RAFT_PROTOCOL,
                    "refusing a peer of another release's Raft protocol: stop every node and start them all on one release"
                );
            }
            return Err(ApiError::ConfigMismatch {
                detail: format!(
                    "node {} refuses {peer}: it speaks Raft protocol {theirs}, this node \
                     protocol {RAFT_PROTOCOL} (openraft 0.10): the two do not mix in one cluster; \
                     stop every node and start them all on one release",
                    self.node.id
                ),
                ours,
            });
        }
        let Some(theirs) = digest else {
            return Ok(());
        };
        if theirs.as_bytes() == ours.as_bytes() {
            return Ok(());
        }
        let theirs = String::from_utf8_lossy(theirs.as_bytes());
        if self.node.peers.mismatches.record(&peer, &theirs) {
            tracing::error!(
                %peer, their_digest = %theirs, our_digest = %ours,
                "refusing a peer whose configuration differs (token file or --require-registration): give every node the same"
            );
        }
        Err(ApiError::ConfigMismatch {
            detail: format!(
                "node {} refuses {peer}: configuration digest {theirs} differs from its own {ours} \
                 (the token file or --require-registration): every node needs the same",
                self.node.id
            ),
            ours,
        })
    }

    /// A place for a stream open to callers without a token: its address's share first (a
    /// member's address has none), then the node's.
    fn public_stream(
        &self,
        request: &http::Request<Body>,
    ) -> Result<crate::limits::Permit, ApiError> {
        let ip = connection(request)
            .and_then(|c| c.remote())
            .map(|remote| remote.ip().to_canonical())
            .filter(|ip| !self.node.member_ips().contains(ip));
        let share = match ip {
            Some(ip) => Some(
                self.node
                    .public_streams_per_address
                    .enter(&ip.to_string())?,
            ),
            None => None,
        };
        let place = self.node.public_streams.enter()?;
        Ok(match share {
            Some(share) => place.with(share),
            None => place,
        })
    }

    /// Checks `request`'s headers and marks it with who is calling.
    fn admit(&self, request: &mut http::Request<Body>) -> Result<Admitted, ApiError> {
        let auth = self.node.auth();
        let path = request.uri().path();
        match door(path) {
            Door::Health if !path.ends_with("/Watch") => Ok(Admitted::Open),
            Door::Health => Ok(Admitted::Public(self.public_stream(request)?)),
            Door::Reflection => {
                if let Ok(caller) = auth.caller(request.headers()) {
                    request.extensions_mut().insert(caller);
                }
                Ok(Admitted::Public(self.public_stream(request)?))
            }
            Door::Peer => {
                auth.check_peer(request.headers())?;
                if self.tls && !has_peer_certificate(request) {
                    return Err(Rejection::InsufficientPermissions(
                        "the internal Raft service takes only cluster members (a certificate signed by the cluster CA)".into(),
                    )
                    .into());
                }
                self.same_configuration(request.headers())?;
                request.extensions_mut().insert(PeerCall);
                Ok(Admitted::Peer)
            }
            Door::Client => {
                let mut extensions = std::mem::take(request.extensions_mut());
                let admitted = admit_client(&self.node, request.headers(), &mut extensions);
                *request.extensions_mut() = extensions;
                Ok(Admitted::Client(admitted?))
            }
        }
    }
}

impl<S> tower::Service<http::Request<Body>> for Gate<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let node = self.node.clone();
        let connection = connection(&request);
        // The call is open on its connection until its response's body is done. One read
        // just before its connection was closed (quiet, or to make room) is not begun: nothing
        // is done for it, and its client retries on a new connection.
        let open = match connection.as_ref().map(|c| c.try_call()) {
            Some(None) => {
                let response = tonic::Status::unavailable(
                    "this connection was closed; retry on a new one (nothing was done)",
                )
                .into_http::<Body>();
                return Box::pin(std::future::ready(Ok(response)));
            }
            open => open.flatten(),
        };
        let peer = door(request.uri().path()) == Door::Peer;
        match self.admit(&mut request) {
            Err(refused) => {
                let credentials = matches!(
                    refused.reason_and_code().0,
                    Reason::Unauthenticated | Reason::InsufficientPermissions
                );
                if let (true, Some(connection)) = (credentials, &connection) {
                    strike(&node, connection, "calls refused for their credentials");
                }
                let response = tonic::Status::from(refused).into_http::<Body>();
                node.refusals.count(response.headers());
                // The body is never read: the transport resets the stream, so a client still
                // sending stops at its flow-control window.
                drop(request);
                Box::pin(std::future::ready(Ok(response)))
            }
            Ok(admitted) => {
                if let (Admitted::Client(_) | Admitted::Peer, Some(connection)) =
                    (&admitted, &connection)
                {
                    connection.prove();
                }
                // Peers are known by their token and certificate: their calls are not watched.
                let watched = connection.filter(|_| !peer).map(|c| (node.clone(), c));
                let started = Instant::now();
                // A request body that breaks off (its stream reset by the client) as soon as
                // it was sent is a rapid reset, however the handler then answers.
                if let Some((node, connection)) = watched.clone() {
                    request = request.map(|body| {
                        Body::new(body.map_err(move |error| {
                            if started.elapsed() < QUICK_CANCEL {
                                strike(&node, &connection, "calls reset as soon as they were sent");
                            }
                            error
                        }))
                    });
                }
                let response = self.inner.call(request);
                let watch = CancelWatch {
                    gate: watched,
                    started,
                    answered: false,
                };
                Box::pin(async move {
                    // The whole watch lives in the call's future: dropping it unanswered is a
                    // cancellation.
                    let mut watch = watch;
                    let response = response.await;
                    watch.answered = true;
                    let mut response = response?;
                    node.refusals.count(response.headers());
                    let (tell_leader, public) = match admitted {
                        Admitted::Open => (false, None),
                        Admitted::Public(permit) => (false, Some(permit)),
                        Admitted::Peer => (true, None),
                        Admitted::Client(in_flight) => {
                            in_flight.release();
                            (true, None)
                        }
                    };
                    if tell_leader {
                        if let Some(value) = super::transport::leader_header(node.leader()) {
                            response
                                .headers_mut()
                                .insert(super::transport::LEADER_HEADER, value);
                        }
                    }
                    // The call stays open (and a public stream keeps its place) as long as its
                    // response's body.
                    Ok(response.map(|body| {
                        Body::new(body.map_frame(move |frame| {
                            let _held = (&open, &public);
                            frame
                        }))
                    }))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_sorted_to_their_doors() {
        assert_eq!(door("/tenure.raft.v1.Raft/AppendEntries"), Door::Peer);
        assert_eq!(door("/tenure.v1.Leases/Acquire"), Door::Client);
        assert_eq!(door("/tenure.v1.Cluster/Status"), Door::Client);
        assert_eq!(door("/made.up/Path"), Door::Client);
        assert_eq!(door("/grpc.health.v1.Health/Check"), Door::Health);
        assert_eq!(
            door("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            Door::Reflection
        );
        assert_eq!(
            door("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            Door::Reflection
        );
    }
}
