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

use std::path::Path;

use anyhow::Context;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::config::Config;

/// The certificates as a node start checks them: a key that does not match its certificate,
/// or PEM that does not parse, stops the node at start instead of leaving it up and deaf.
pub fn check(tls: &Tls) -> anyhow::Result<()> {
    tonic::transport::Server::builder()
        .tls_config(tls.server())
        .context("the TLS certificate, key or CA (--tls-cert, --tls-key, --tls-ca)")?;
    tonic::transport::Endpoint::from_static("https://127.0.0.1:1")
        .tls_config(tls.peer_client())
        .context("the TLS identity or CA for calls to peers")?;
    Ok(())
}

/// This node's certificate and key, and the cluster CA.
#[derive(Clone)]
pub struct Tls {
    identity: Identity,
    ca: Certificate,
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading the {what} {}", path.display()))
}

impl Tls {
    /// The TLS settings of `config`; None when TLS is off (no `--tls-cert`).
    pub fn load(config: &Config) -> anyhow::Result<Option<Tls>> {
        let (Some(cert), Some(key), Some(ca)) = (&config.tls_cert, &config.tls_key, &config.tls_ca)
        else {
            return Ok(None);
        };
        Ok(Some(Tls {
            identity: Identity::from_pem(
                read(cert, "certificate (--tls-cert)")?,
                read(key, "key (--tls-key)")?,
            ),
            ca: Certificate::from_pem(read(ca, "cluster CA (--tls-ca)")?),
        }))
    }

    /// The server side: this node's certificate; a client certificate is optional (clients
    /// have none), but one that is presented must be signed by the cluster CA.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
            .client_auth_optional(true)
            // A connection that never finishes its handshake is dropped.
            .timeout(std::time::Duration::from_secs(10))
    }

    /// The side of a node calling a peer: verify it against the cluster CA, and present this
    /// node's certificate.
    pub fn peer_client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
    }
}
