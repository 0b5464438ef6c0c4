//! The connection to a cluster: endpoints, the leader hint, deadlines and retries.
//!
//! The [`Client`] and how it is made and configured are here; the endpoints become channels
//! in `connect`, one call goes round the endpoints with retries and the leader hint in `call`,
//! and the cluster's RPCs are `Client`'s methods in `rpc`.

mod call;
mod connect;
mod keepalive;
mod rpc;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig};

use crate::error::Error;
use connect::{channels, tls_to, trimmed};

/// The endpoints of `deploy/local-cluster.sh`'s three nodes, as a comma-separated list for
/// [`Client::from_list`]: the CLI's and the examples' default.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103";

/// A handle to a Tenure cluster. Cheap to clone; clones share channels and the leader hint.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<String>,
    channels: Vec<Channel>,
    /// Index of the endpoint to try first: the leader, once a reply named it.
    preferred: AtomicUsize,
    timeout: Duration,
    /// `Bearer TOKEN`, sent on every call when set.
    authorization: Option<MetadataValue<Ascii>>,
    /// The channels use TLS.
    tls: bool,
    /// A token may go in clear to an endpoint off this machine ([`Client::insecure`]).
    insecure: bool,
    /// The `KeepAlive` stream's task, started at the first renewal of a lease or session handle.
    keep_alives: std::sync::OnceLock<keepalive::KeepAlives>,
}

impl Client {
    /// A client for these `HOST:PORT` endpoints (connects lazily), with a 10 s call deadline.
    /// Plain HTTP/2: an `https://` endpoint is refused here, so that a bearer token never goes
    /// out in clear text to a node meant to be reached over TLS ([`Client::new_with_ca`]).
    pub fn new<I, S>(endpoints: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let raw = trimmed(endpoints);
        if let Some(tls) = raw.iter().find(|e| e.starts_with("https://")) {
            return Err(Error::Local(format!(
                "{tls} needs TLS: give the cluster CA (tenure --ca-cert, Client::new_with_ca)"
            )));
        }
        Self::build(raw, None)
    }

    /// A client for these endpoints over TLS, verifying the nodes against `ca_pem`, the
    /// cluster CA (PEM) that signed their certificates (`tenured --tls-ca`).
    pub fn new_with_ca<I, S>(endpoints: I, ca_pem: &[u8]) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::build(trimmed(endpoints), Some(tls_to(ca_pem)))
    }

    fn build(raw: Vec<String>, tls: Option<ClientTlsConfig>) -> Result<Self, Error> {
        let endpoints: Vec<String> = raw
            .iter()
            .map(|e| {
                e.trim_start_matches("http://")
                    .trim_start_matches("https://")
                    .to_string()
            })
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(Error::Local("no endpoints given".into()));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                tls: tls.is_some(),
                channels: channels(&endpoints, tls)?,
                endpoints,
                preferred: AtomicUsize::new(0),
                timeout: Duration::from_secs(10),
                authorization: None,
                insecure: false,
                keep_alives: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Parses a comma-separated endpoint list.
    pub fn from_list(list: &str) -> Result<Self, Error> {
        Self::new(list.split(','))
    }

    /// The same client with another per-call deadline (all retries included).
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        self.rebuilt(|inner| inner.timeout = timeout)
    }

    /// The same client sending `authorization: Bearer TOKEN` on every call. Refused for a
    /// plain-text client with an endpoint off this machine (anyone on the path could read the
    /// token), unless [`Client::insecure`] allowed it: use [`Client::new_with_ca`].
    pub fn with_token(&self, token: &str) -> Result<Self, Error> {
        let inner = &self.inner;
        if !inner.tls && !inner.insecure {
            if let Some(exposed) = inner
                .endpoints
                .iter()
                .find(|e| !tenure_proto::is_loopback(e))
            {
                return Err(Error::Local(format!(
                    "refusing to send a bearer token in clear to {exposed}: give the cluster CA \
                     (tenure --ca-cert, Client::new_with_ca) to use TLS, or allow it with \
                     --insecure (Client::insecure)"
                )));
            }
        }
        let value: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Local("the token must be printable ASCII".into()))?;
        Ok(self.rebuilt(|inner| inner.authorization = Some(value)))
    }

    /// The same client, allowed to send a token in clear to endpoints off this machine
    /// ([`Client::with_token`] refuses that otherwise). For test clusters on private networks.
    pub fn insecure(&self) -> Self {
        self.rebuilt(|inner| inner.insecure = true)
    }

    fn rebuilt(&self, change: impl FnOnce(&mut Inner)) -> Self {
        let inner = &self.inner;
        let mut copy = Inner {
            endpoints: inner.endpoints.clone(),
            channels: inner.channels.clone(),
            preferred: AtomicUsize::new(inner.preferred.load(Ordering::Relaxed)),
            timeout: inner.timeout,
            authorization: inner.authorization.clone(),
            tls: inner.tls,
            insecure: inner.insecure,
            keep_alives: std::sync::OnceLock::new(),
        };
        change(&mut copy);
        Client {
            inner: Arc::new(copy),
        }
    }

    /// The deadline of each call, all its retries included (10 s unless
    /// [`Client::with_timeout`] changed it).
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The endpoints as `HOST:PORT`, without scheme; [`Client::node_status`] and the other
    /// per-node calls take an index into this list.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }
}

#[cfg(test)]
mod tests;
