//! `--secure`: the run's cluster as a production cluster runs, with auth and TLS on. The run
//! makes a token file (a client token for the workload's principal [`CLIENT_PRINCIPAL`], an
//! admin token for the harness itself, a peer token for the nodes, 64 hex digits each, mode
//! 0600) and a cluster CA with one certificate that names every host address. Everything
//! speaks TLS. The workload's clients send the client token, so the quotas the run sets for
//! that principal hold for them; what needs an admin (registering resources, setting quotas,
//! membership changes and node status, watches of every resource, reading the histories after
//! the run) sends the admin token; the clock nemesis reaches the internal service as a peer
//! does: the peer token over mutual TLS. Without `--secure` the nodes run with `--insecure`
//! (their addresses exist only in the run's namespaces) and every caller is an admin.

use std::path::Path;
use std::sync::Arc;

use rand::Rng;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tenure_client::Client;
use tenure_proto::raft::v1::raft_client::RaftClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The principal the workload's clients call as in a `--secure` run (role `client`).
pub const CLIENT_PRINCIPAL: &str = "jepsen-client";

/// The run's secrets.
pub struct Secure {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    admin_token: String,
    client_token: String,
    peer_token: String,
}

fn token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `text` readable by its owner only, as a node requires of its token file.
fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

impl Secure {
    /// Makes the secrets for nodes on `hosts` (IP addresses) under `dir`, and returns them
    /// with the flags every node needs.
    pub fn generate(dir: &Path, hosts: &[String]) -> anyhow::Result<(Secure, Vec<String>)> {
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tenure-jepsen cluster CA");
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let node_key = KeyPair::generate()?;
        let node = CertificateParams::new(hosts.to_vec())?.signed_by(&node_key, &issuer)?;
        let secure = Secure {
            ca_pem: ca.pem(),
            cert_pem: node.pem(),
            key_pem: node_key.serialize_pem(),
            admin_token: token(),
            client_token: token(),
            peer_token: token(),
        };
        write_secret(
            &dir.join("tokens"),
            &format!(
                "{} jepsen admin\n{} {CLIENT_PRINCIPAL} client\n{} nodes peer\n",
                secure.admin_token, secure.client_token, secure.peer_token
            ),
        )?;
        write_secret(&dir.join("node.key"), &secure.key_pem)?;
        std::fs::write(dir.join("node.pem"), &secure.cert_pem)?;
        std::fs::write(dir.join("ca.pem"), &secure.ca_pem)?;
        let path = |name: &str| dir.join(name).display().to_string();
        let flags = vec![
            format!("--token-file={}", path("tokens")),
            format!("--tls-cert={}", path("node.pem")),
            format!("--tls-key={}", path("node.key")),
            format!("--tls-ca={}", path("ca.pem")),
        ];
        Ok((secure, flags))
    }
}

/// How the harness reaches the nodes: plainly, or as `--secure` says.
#[derive(Clone, Default)]
pub struct Connect(Option<Arc<Secure>>);

impl Connect {
    pub fn secure(secure: Secure) -> Self {
        Connect(Some(Arc::new(secure)))
    }

    /// An admin client of `endpoints` (with TLS and the admin token when secure).
    pub fn client<I, S>(&self, endpoints: I) -> Result<Client, tenure_client::Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.client_as(endpoints, |secure| &secure.admin_token)
    }

    /// A client of `endpoints` for the workload: with TLS and the token of
    /// [`CLIENT_PRINCIPAL`] when secure (held to its quotas), else as [`Connect::client`].
    pub fn workload_client<I, S>(&self, endpoints: I) -> Result<Client, tenure_client::Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.client_as(endpoints, |secure| &secure.client_token)
    }

    fn client_as<I, S>(
        &self,
        endpoints: I,
        token: fn(&Secure) -> &String,
    ) -> Result<Client, tenure_client::Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        match &self.0 {
            None => Client::new(endpoints),
            Some(secure) => {
                Client::new_with_ca(endpoints, secure.ca_pem.as_bytes())?.with_token(token(secure))
            }
        }
    }

    /// The principal the workload calls as, when it is not an admin (secure runs).
    pub fn workload_principal(&self) -> Option<&'static str> {
        self.0.as_ref().map(|_| CLIENT_PRINCIPAL)
    }

    /// A client of `endpoint`'s internal service, and the token to call it with.
    pub async fn raft(
        &self,
        endpoint: &str,
    ) -> anyhow::Result<(RaftClient<Channel>, Option<String>)> {
        let Some(secure) = &self.0 else {
            let client = RaftClient::connect(format!("http://{endpoint}")).await?;
            return Ok((client, None));
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&secure.ca_pem))
            .identity(Identity::from_pem(&secure.cert_pem, &secure.key_pem));
        let channel = Endpoint::from_shared(format!("https://{endpoint}"))?
            .tls_config(tls)?
            .connect()
            .await?;
        Ok((
            RaftClient::new(channel),
            Some(format!("Bearer {}", secure.peer_token)),
        ))
    }
}
