//! TLS (SPEC §6): with `--tls-cert/--tls-key/--tls-ca` a cluster forms over mutual TLS and
//! serves clients that verify it with the cluster CA. Refused: a client without TLS, a client
//! that does not trust the cluster CA, a peer call without a certificate, a peer whose
//! certificate another CA signed, and (auth on) a non-admin calling the Cluster service.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use tenure_client::{Client, Error};
use tenure_proto::raft::v1::raft_client::RaftClient;
use tenure_proto::raft::v1::RaftBytes;
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::{granted, refused, started_with, ELECTION};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

const TTL: Duration = Duration::from_secs(60);
const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef012345";
pub(crate) const CLIENT_TOKEN: &str = "client-token-0123456789abcdef01234";
const PEER_TOKEN: &str = "peer-token-0123456789abcdef0123456";

/// A CA and one certificate it signed for 127.0.0.1 (every in-process node listens there).
#[derive(Clone)]
pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

pub(crate) fn pki(name: &str) -> Pki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("node key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("node params");
    let cert = params.signed_by(&key, &issuer).expect("node cert");
    Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// Writes the PKI and the token file under `dir` and returns every node's flags.
pub(crate) fn flags(dir: &Path, pki: &Pki) -> Vec<String> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path.display().to_string()
    };
    vec![
        "--tls-cert".into(),
        write("node.pem", &pki.cert_pem),
        "--tls-key".into(),
        write("node.key", &pki.key_pem),
        "--tls-ca".into(),
        write("ca.pem", &pki.ca_pem),
        "--token-file".into(),
        {
            let path = dir.join("tokens");
            tenure_tests::write_secret(
                &path,
                &format!(
                    "{ADMIN_TOKEN} ops admin\n{CLIENT_TOKEN} app client\n{PEER_TOKEN} nodes peer\n"
                ),
            );
            path.display().to_string()
        },
    ]
}

/// A TLS channel to `addr` trusting `ca`, presenting `identity` if given.
fn tls_channel(addr: &str, ca: &str, identity: Option<&Pki>) -> Channel {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
    if let Some(pki) = identity {
        tls = tls.identity(Identity::from_pem(&pki.cert_pem, &pki.key_pem));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect_lazy()
}

/// An AppendEntries call as a peer would make it (the peer token, an empty body).
async fn peer_call(channel: Channel) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(RaftBytes { data: vec![] });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {PEER_TOKEN}").parse().expect("ascii"),
    );
    RaftClient::new(channel)
        .append_entries(request)
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_serves_clients_with_its_ca_and_refuses_everyone_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_pki = pki("cluster");
    let node_flags = flags(dir.path(), &cluster_pki);
    let extra: BTreeMap<u64, Vec<String>> = (1..=3).map(|id| (id, node_flags.clone())).collect();
    let cluster = InProcessCluster::start(3, extra).await.expect("cluster");
    // The nodes elected a leader and replicate: they reach each other over mutual TLS.
    cluster
        .leader(ELECTION)
        .await
        .expect("a leader over mutual TLS");

    let admin = Client::new_with_ca(cluster.addrs.values(), cluster_pki.ca_pem.as_bytes())
        .expect("tls client")
        .with_token(ADMIN_TOKEN)
        .expect("token");
    let lease = granted(&admin, "tls/one", "h", TTL).await;
    assert!(lease.fencing_token > 0);
    admin
        .node_status(0)
        .await
        .expect("an admin reads the status");

    // A client of the same cluster that is not an admin: the Cluster service refuses it.
    let app = admin.with_token(CLIENT_TOKEN).expect("token");
    granted(&app, "tls/two", "h", TTL).await;
    refused(
        "a non-admin adds a learner",
        app.add_learner(9, "127.0.0.1:9", false).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );
    refused(
        "a non-admin moves leadership",
        app.transfer_leader(0).await,
        Code::PermissionDenied,
        "insufficient_permissions",
    );

    // Without TLS, or trusting another CA, a client gets nowhere (a transport failure, retried
    // until its deadline, reported as unavailable).
    let short = Duration::from_millis(500);
    let plain = cluster.client().with_timeout(short);
    let stranger = pki("other");
    let untrusting = Client::new_with_ca(cluster.addrs.values(), stranger.ca_pem.as_bytes())
        .expect("tls client")
        .with_timeout(short);
    for (what, client) in [("plain", plain), ("another CA", untrusting)] {
        match client
            .acquire(tenure_tests::acquire_request("tls/no", "h", TTL))
            .await
        {
            Err(Error::Status { code, .. }) if code != Code::Ok => {}
            other => panic!("{what} client was served: {other:?}"),
        }
    }

    let addr = &cluster.addrs[&1];
    // A peer call over TLS with the peer token but no certificate: refused by the service.
    let status = peer_call(tls_channel(addr, &cluster_pki.ca_pem, None))
        .await
        .expect_err("a peer call without a certificate");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("cluster CA"), "{status:?}");
    // A certificate another CA signed: the node ends the handshake (an `UnknownCA` alert, or
    // with TLS 1.3 sometimes just a closed connection): a transport error, no service answer.
    let status = peer_call(tls_channel(addr, &cluster_pki.ca_pem, Some(&stranger)))
        .await
        .expect_err("a peer certificate from another CA");
    let transport = std::error::Error::source(&status)
        .is_some_and(|e| e.downcast_ref::<tonic::transport::Error>().is_some());
    assert!(transport, "{status:?}");
    // The cluster's own certificate gets through the TLS check (to the body decoder, which
    // refuses an empty body): so the refusals above are the certificate's doing.
    let status = peer_call(tls_channel(addr, &cluster_pki.ca_pem, Some(&cluster_pki)))
        .await
        .expect_err("an empty body");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    cluster.shutdown().await;
}

#[tokio::test]
async fn a_key_that_does_not_match_its_certificate_stops_the_node_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mine, other) = (pki("mine"), pki("other"));
    let mismatched = Pki {
        ca_pem: mine.ca_pem.clone(),
        cert_pem: mine.cert_pem.clone(),
        key_pem: other.key_pem.clone(),
    };
    let extra = BTreeMap::from([(1, flags(dir.path(), &mismatched))]);
    let error = match InProcessCluster::start(1, extra).await {
        Ok(_) => panic!("a node started with a key that is not its certificate's"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("--tls-cert"), "{error}");
}

#[tokio::test]
async fn a_tls_endpoint_without_the_ca_is_refused_rather_than_sent_a_token_in_clear() {
    let refused = tenure_client::Client::new(["https://127.0.0.1:7101"]);
    assert!(matches!(refused, Err(Error::Local(ref why)) if why.contains("needs TLS")));
    let ca = pki("cluster").ca_pem;
    let tls = Client::new_with_ca(["https://127.0.0.1:7101"], ca.as_bytes()).expect("a TLS client");
    assert_eq!(tls.endpoints(), ["127.0.0.1:7101"]);
}

/// Writes `pki`'s certificate, key and CA over the files `flags` named.
fn rewrite(dir: &Path, pki: &Pki) {
    for (name, text) in [
        ("node.pem", &pki.cert_pem),
        ("node.key", &pki.key_pem),
        ("ca.pem", &pki.ca_pem),
    ] {
        std::fs::write(dir.join(name), text).expect("write");
    }
}

/// An acquire through a client that trusts `ca`, with a short deadline.
async fn acquire_trusting(
    cluster: &InProcessCluster,
    ca: &str,
    resource: &str,
) -> Result<tenure_client::pb::AcquireResponse, Error> {
    Client::new_with_ca(cluster.addrs.values(), ca.as_bytes())
        .expect("tls client")
        .with_token(ADMIN_TOKEN)
        .expect("token")
        .with_timeout(Duration::from_secs(5))
        .acquire(tenure_tests::acquire_request(resource, "h", TTL))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_reloaded_on_sighup_serve_new_connections_and_the_peers_keep_a_quorum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = pki("first");
    let node_flags = flags(dir.path(), &first);
    let extra: BTreeMap<u64, Vec<String>> = (1..=3).map(|id| (id, node_flags.clone())).collect();
    let (mut cluster, _) = started_with(3, extra).await;
    acquire_trusting(&cluster, &first.ca_pem, "reload/a")
        .await
        .expect("served under the first CA");

    // A new CA and certificate on every node: what SIGHUP does (`Node::reload`).
    let second = pki("second");
    rewrite(dir.path(), &second);
    for id in 1..=3 {
        cluster.node(id).reload().expect("the new files load");
    }
    acquire_trusting(&cluster, &second.ca_pem, "reload/b")
        .await
        .expect("served under the second CA");
    assert!(
        acquire_trusting(&cluster, &first.ca_pem, "reload/c")
            .await
            .is_err(),
        "a client that trusts only the old CA is refused on a new connection"
    );
    // The peers reach each other with the new certificates: a new leader is elected and
    // commits.
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    cluster.kill(leader).await;
    cluster
        .leader(ELECTION)
        .await
        .expect("a new leader over the new certificates");
    acquire_trusting(&cluster, &second.ca_pem, "reload/d")
        .await
        .expect("the new leader commits");

    // Files that do not match are refused, and the node keeps what it had.
    let mismatched = Pki {
        key_pem: pki("third").key_pem,
        ..second.clone()
    };
    rewrite(dir.path(), &mismatched);
    let live = cluster.live_ids()[0];
    let error = cluster
        .node(live)
        .reload()
        .expect_err("a key that does not match");
    assert!(format!("{error:#}").contains("TLS"), "{error:#}");
    acquire_trusting(&cluster, &second.ca_pem, "reload/e")
        .await
        .expect("still served under the second CA");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_on_metrics_are_served_over_tls_to_scrapers_with_a_cluster_certificate_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_pki = pki("cluster");
    let mut node_flags = flags(dir.path(), &cluster_pki);
    node_flags.extend(["--metrics-listen".to_string(), "127.0.0.1:0".to_string()]);
    let (cluster, _) = started_with(1, BTreeMap::from([(1, node_flags)])).await;
    let addr = cluster.metrics_addr(1).expect("metrics bound");

    let builder = trusting(&cluster_pki);
    // A scraper without a certificate of the cluster CA gets nothing.
    let anonymous = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        builder.clone().with_no_client_auth(),
    ));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let refused = match anonymous.connect(name.clone(), tcp).await {
        Err(_) => true,
        Ok(mut tls) => {
            let _ = tls
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
                .await;
            let mut answer = Vec::new();
            tls.read_to_end(&mut answer).await.is_err() || answer.is_empty()
        }
    };
    assert!(
        refused,
        "metrics served to a scraper without a client certificate"
    );
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(cluster_pki.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(cluster_pki.key_pem.as_bytes())
        .expect("key");
    let config = builder
        .with_client_auth_cert(chain, key)
        .expect("client cert");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut tls = connector.connect(name, tcp).await.expect("a TLS handshake");
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut text = String::new();
    tls.read_to_string(&mut text).await.expect("response");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("tenure_raft_term"), "{text}");

    // Plain HTTP gets no metrics.
    let mut plain = tokio::net::TcpStream::connect(addr).await.expect("connect");
    plain
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("tenure_raft_term"),
        "metrics in plain HTTP"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_on_the_http_gateway_speaks_https_to_clients_without_a_certificate() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_pki = pki("cluster");
    let mut node_flags = flags(dir.path(), &cluster_pki);
    node_flags.extend(["--http-listen".to_string(), "127.0.0.1:0".to_string()]);
    let (cluster, _) = started_with(1, BTreeMap::from([(1, node_flags)])).await;
    let addr = cluster.http_addr(1).expect("gateway bound");

    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        trusting(&cluster_pki).with_no_client_auth(),
    ));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut tls = connector.connect(name, tcp).await.expect("a TLS handshake");
    tls.write_all(b"GET /v1/openapi.json HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut text = String::new();
    tls.read_to_string(&mut text).await.expect("response");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"openapi\""), "{text}");

    // Plain HTTP gets nothing.
    let mut plain = tokio::net::TcpStream::connect(addr).await.expect("connect");
    plain
        .write_all(b"GET /v1/openapi.json HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("\"openapi\""),
        "the gateway in plain HTTP"
    );
    cluster.shutdown().await;
}

/// A TLS client configuration that trusts `pki`'s CA (its client identity still to choose).
fn trusting(
    pki: &Pki,
) -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls::pki_types::CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).expect("CA");
    roots.add(ca).expect("root");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
}
