//! From endpoints to channels: the addresses as given, and a lazily connecting channel to
//! each, over TLS when the cluster CA is given.

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::error::Error;

/// TLS to nodes whose certificates `ca_pem` signed.
pub(super) fn tls_to(ca_pem: &[u8]) -> ClientTlsConfig {
    ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem))
}

/// The endpoints as given, trimmed.
pub(super) fn trimmed<I, S>(endpoints: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    endpoints
        .into_iter()
        .map(|e| e.as_ref().trim().to_string())
        .collect()
}

/// A lazily connecting channel per endpoint, over TLS when `tls` is given.
pub(super) fn channels(
    endpoints: &[String],
    tls: Option<ClientTlsConfig>,
) -> Result<Vec<Channel>, Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    endpoints
        .iter()
        .map(|addr| {
            let bad =
                |e: tonic::transport::Error| Error::Local(format!("bad endpoint {addr}: {e}"));
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}")).map_err(bad)?;
            if let Some(tls) = &tls {
                endpoint = endpoint.tls_config(tls.clone()).map_err(bad)?;
            }
            Ok(endpoint
                .connect_timeout(Duration::from_secs(1))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(Duration::from_secs(5))
                .connect_lazy())
        })
        .collect()
}
