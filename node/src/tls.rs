//! TLS (SPEC §6): with `--tls-cert`, `--tls-key` and `--tls-ca`, a node serves clients and
//! peers over TLS only, and its internal `Raft` service takes only callers that present a
//! certificate signed by the cluster CA (mutual TLS between peers). Clients need the CA to
//! verify the node, and no certificate of their own: they authenticate with bearer tokens.
//!
//! A node presents its one certificate both as the server to clients and peers and as the
//! client when it calls a peer, so the certificate must carry the node's address (the host of
//! its `--peers` entry, a DNS name or an IP) as a subject alternative name, and allow both
//! uses (extended key usage serverAuth and clientAuth, or none). Any certificate the CA signed
//! passes as a peer: the CA must be the cluster's own, not one that signs other certificates.
//!
//! The node accepts TLS itself (rustls, [`TlsIncoming`]) rather than through tonic's fixed
//! server config, so that SIGHUP can load new files ([`Tls::reload`]): each connection is
//! accepted with the certificate and CA in force when it arrives; connections already open
//! keep theirs. Calls to peers use the new files from their next connection on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::config::Config;

/// A connection that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Handshakes under way at once; past it, new connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 1024;
/// Handshakes under way at once from one address: past it, its new connections are closed,
/// so that one address's idle sockets cannot hold every place.
const MAX_HANDSHAKES_PER_ADDRESS: usize = 64;

/// Where a connection comes from, for [`MAX_HANDSHAKES_PER_ADDRESS`].
pub trait PeerAddress {
    fn peer_ip(&self) -> Option<std::net::IpAddr>;
}

impl PeerAddress for tokio::net::TcpStream {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.peer_addr().ok().map(|peer| peer.ip().to_canonical())
    }
}

/// This node's TLS settings: the files, and what was last loaded from them.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    server: watch::Sender<Servers>,
    peer: RwLock<ClientTlsConfig>,
}

/// What a connection may speak once the handshake is done (its ALPN protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speaks {
    /// gRPC: HTTP/2.
    Grpc,
    /// The metrics endpoint: HTTP/1.1, for the cluster's own scrapers (a client certificate
    /// the cluster CA signed is required).
    Http1,
    /// The HTTP/JSON gateway: HTTP/1.1 for any client (bearer tokens say who calls; a client
    /// certificate is optional, as on the gRPC port).
    Gateway,
}

/// The server side, one config for each protocol.
#[derive(Clone)]
struct Servers {
    grpc: Arc<rustls::ServerConfig>,
    http1: Arc<rustls::ServerConfig>,
    gateway: Arc<rustls::ServerConfig>,
}

/// What one reading of the three files gives.
struct Loaded {
    server: Servers,
    peer: ClientTlsConfig,
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading the {what} {}", path.display()))
}

fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads and checks the three files: a key that does not match its certificate, or PEM that
/// does not parse, is an error here, not a node that is up and deaf.
fn load(cert: &Path, key: &Path, ca: &Path) -> anyhow::Result<Loaded> {
    let cert_pem = read(cert, "certificate (--tls-cert)")?;
    let key_pem = read(key, "key (--tls-key)")?;
    let ca_pem = read(ca, "cluster CA (--tls-ca)")?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("the certificate (--tls-cert) is not PEM")?;
    anyhow::ensure!(!chain.is_empty(), "no certificate in --tls-cert");
    let private_key =
        PrivateKeyDer::from_pem_slice(&key_pem).context("the key (--tls-key) is not PEM")?;
    let mut roots = rustls::RootCertStore::empty();
    for ca_cert in CertificateDer::pem_slice_iter(&ca_pem) {
        roots
            .add(ca_cert.context("the cluster CA (--tls-ca) is not PEM")?)
            .context("the cluster CA (--tls-ca)")?;
    }
    anyhow::ensure!(!roots.is_empty(), "no certificate in --tls-ca");
    // A client certificate is optional (clients have none), but one that is presented must be
    // signed by the cluster CA.
    let roots = Arc::new(roots);
    // gRPC and the gateway: a client certificate is optional (clients have none; the gate
    // requires one of peers), but one that is presented must be the cluster CA's. Metrics:
    // required, so that TLS does not only hide them but keeps them to the cluster's own
    // scrapers.
    let server = |client_certificate_required: bool, alpn: &[u8]| {
        let mut verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), crypto());
        if !client_certificate_required {
            verifier = verifier.allow_unauthenticated();
        }
        let verifier = verifier.build().context("the cluster CA (--tls-ca)")?;
        let mut config = rustls::ServerConfig::builder_with_provider(crypto())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), private_key.clone_key())
            .context("the TLS certificate and key (--tls-cert, --tls-key)")?;
        config.alpn_protocols = vec![alpn.to_vec()];
        anyhow::Ok(Arc::new(config))
    };
    let server = Servers {
        grpc: server(false, b"h2")?,
        http1: server(true, b"http/1.1")?,
        gateway: server(false, b"http/1.1")?,
    };
    let peer = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca_pem))
        .identity(Identity::from_pem(&cert_pem, &key_pem));
    tonic::transport::Endpoint::from_static("https://127.0.0.1:1")
        .tls_config(peer.clone())
        .context("the TLS identity or CA for calls to peers")?;
    Ok(Loaded { server, peer })
}

impl Tls {
    /// The TLS settings of `config`, read and checked; None when TLS is off (no `--tls-cert`).
    pub fn load(config: &Config) -> anyhow::Result<Option<Arc<Tls>>> {
        let (Some(cert), Some(key), Some(ca)) = (&config.tls_cert, &config.tls_key, &config.tls_ca)
        else {
            return Ok(None);
        };
        let loaded = load(cert, key, ca)?;
        Ok(Some(Arc::new(Tls {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
            server: watch::Sender::new(loaded.server),
            peer: RwLock::new(loaded.peer),
        })))
    }

    /// Reads the files again (SIGHUP). Files that do not load or match leave the settings in
    /// force as they were.
    pub fn reload(&self) -> anyhow::Result<()> {
        let loaded = load(&self.cert, &self.key, &self.ca)?;
        *self.peer.write().unwrap_or_else(|p| p.into_inner()) = loaded.peer;
        self.server.send_replace(loaded.server);
        Ok(())
    }

    /// The side of a node calling a peer: verify it against the cluster CA, and present this
    /// node's certificate.
    pub fn peer_client(&self) -> ClientTlsConfig {
        self.peer.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// An acceptor with the settings in force now.
    fn acceptor(&self, speaks: Speaks) -> TlsAcceptor {
        let servers = self.server.borrow();
        TlsAcceptor::from(match speaks {
            Speaks::Grpc => servers.grpc.clone(),
            Speaks::Http1 => servers.http1.clone(),
            Speaks::Gateway => servers.gateway.clone(),
        })
    }
}

/// A handshake under way: the TLS stream it gave, if any, and the address it came from.
type Handshake<T> =
    Pin<Box<dyn Future<Output = (Option<TlsStream<T>>, Option<std::net::IpAddr>)> + Send>>;

/// TLS connections accepted from a stream of TCP ones, each with the settings in force when it
/// arrived. Up to [`MAX_HANDSHAKES`] run at once ([`MAX_HANDSHAKES_PER_ADDRESS`] from one
/// address), each for [`HANDSHAKE_TIMEOUT`] at most; a failed handshake is dropped (logged at
/// debug). Lives in the task that serves it, so the
/// listener closes when serving stops.
pub struct TlsIncoming<S, T> {
    tcp: S,
    tcp_done: bool,
    tls: Arc<Tls>,
    speaks: Speaks,
    handshakes: FuturesUnordered<Handshake<T>>,
    per_address: std::collections::HashMap<std::net::IpAddr, usize>,
}

impl<S, T> TlsIncoming<S, T> {
    pub fn new(tcp: S, tls: Arc<Tls>, speaks: Speaks) -> Self {
        TlsIncoming {
            tcp,
            tcp_done: false,
            tls,
            speaks,
            handshakes: FuturesUnordered::new(),
            per_address: Default::default(),
        }
    }
}

impl<S, T> Stream for TlsIncoming<S, T>
where
    S: Stream<Item = std::io::Result<T>> + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + PeerAddress + Unpin + Send + 'static,
{
    type Item = std::io::Result<TlsStream<T>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            while !this.tcp_done && this.handshakes.len() < MAX_HANDSHAKES {
                match this.tcp.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(tcp))) => {
                        let from = tcp.peer_ip();
                        if let Some(ip) = from {
                            let pending = this.per_address.entry(ip).or_default();
                            if *pending >= MAX_HANDSHAKES_PER_ADDRESS {
                                tracing::debug!(%ip, "too many TLS handshakes from one address");
                                continue;
                            }
                            *pending += 1;
                        }
                        let acceptor = this.tls.acceptor(this.speaks);
                        this.handshakes.push(handshake(acceptor, tcp, from));
                    }
                    Poll::Ready(Some(Err(e))) => tracing::debug!("accepting a connection: {e}"),
                    Poll::Ready(None) => this.tcp_done = true,
                    Poll::Pending => break,
                }
            }
            // A failed handshake frees a place: accept again before waiting.
            match this.handshakes.poll_next_unpin(cx) {
                Poll::Ready(Some((done, from))) => {
                    if let Some(ip) = from {
                        if let Some(pending) = this.per_address.get_mut(&ip) {
                            *pending -= 1;
                            if *pending == 0 {
                                this.per_address.remove(&ip);
                            }
                        }
                    }
                    match done {
                        Some(tls) => return Poll::Ready(Some(Ok(tls))),
                        None => continue,
                    }
                }
                Poll::Ready(None) if this.tcp_done => return Poll::Ready(None),
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The TLS handshake of one connection.
fn handshake<T>(acceptor: TlsAcceptor, tcp: T, from: Option<std::net::IpAddr>) -> Handshake<T>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(async move {
        let done = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!("TLS handshake not finished in time");
                None
            }
        };
        (done, from)
    })
}
