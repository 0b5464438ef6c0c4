//! One node, wired: open storage, start Raft, build the [`Node`], serve every gRPC service on
//! one port (and metrics on another), bootstrap the cluster, start the leader's timers; and
//! shut all of it down.

use crate::store::WatchReceiver as _;
use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use tenure_proto::raft::v1::raft_server::RaftServer;
use tenure_proto::v1::cluster_server::ClusterServer;
use tenure_proto::v1::leases_server::LeasesServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
/// The node a [`Running`] holds (its parts and coordination live in `crate::coord`).
pub use crate::coord::Node;
use crate::grpc::cluster::ClusterApi;
use crate::grpc::leases::LeasesApi;
use crate::grpc::raft::RaftApi;
use crate::grpc::{gate, reflection, transport};
use crate::network::{Network, Peers, PEER_MESSAGE_LIMIT};
use crate::store::log::LogStore;
use crate::store::state_machine::StateMachineStore;
use crate::store::{NodeId, Raft, StorageStats};

/// How long a graceful shutdown waits for calls in flight.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The client API's message limit (SPEC §3): larger messages are refused by the transport.
pub const CLIENT_MESSAGE_LIMIT: usize = 4 * 1024 * 1024;

/// A started node; `shutdown` stops it gracefully, `kill` as abruptly as a process can be.
pub struct Running {
    pub node: Arc<Node>,
    /// Where `GET /metrics` is served (`--metrics-listen`), once bound.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Where the HTTP/JSON gateway is served (`--http-listen`), once bound.
    pub http_addr: Option<std::net::SocketAddr>,
    stop: watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    /// The metrics endpoint and the HTTP gateway, when they serve.
    http_servers: Vec<JoinHandle<()>>,
    timers: JoinHandle<()>,
}

fn raft_config(config: &Config) -> anyhow::Result<openraft::Config> {
    let raft_config = openraft::Config {
        cluster_name: "tenure".into(),
        heartbeat_interval: config.heartbeat.as_millis() as u64,
        election_timeout_min: config.election_min.as_millis() as u64,
        election_timeout_max: config.election_max.as_millis() as u64,
        install_snapshot_timeout: 10_000,
        // The node asks for snapshots itself (`store::compaction`).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: config.snapshot_keep_logs,
        // A restarted leader must win an election again: lease time is stamped by a leader's
        // monotonic clock (`lease::lease_clock`), which a restart starts anew, so one leader
        // term never spans two processes.
        enable_leader_restore: Some(false),
        // Replication reads an entry as soon as its append is submitted, while the leader's
        // own flush runs (openraft counts the leader's vote only once that flush is done).
        broadcast_submitted_on_append: Some(true),
        ..Default::default()
    };
    Ok(raft_config.validate()?)
}

/// Starts a node serving on `listener`.
pub async fn start(mut config: Config, listener: TcpListener) -> anyhow::Result<Running> {
    config.validate()?;
    if let Some(lowered) =
        crate::coord::connections::fit_descriptors(&mut config.limits, config.http_listen.is_some())
    {
        tracing::warn!("{lowered}");
    }
    let stats = Arc::new(StorageStats::default());
    let log_store = LogStore::open_with(
        &config.data_dir.join("raft"),
        stats.clone(),
        config.skips_log_sync(),
    )?
    .of_node(config.id);
    let sm = StateMachineStore::open_with(
        config.data_dir.join("snapshots"),
        Some(&config.data_dir.join("archive")),
        stats,
        config.max_rules,
    )?;
    let shared = sm.shared.clone();
    let auth = match &config.token_file {
        Some(path) => crate::auth::Auth::load(path, config.insecure)?,
        None => {
            tracing::warn!(
                "AUTH IS OFF (no --token-file): every caller is the principal `anonymous` with the admin role"
            );
            crate::auth::Auth::off()
        }
    };
    if config.insecure {
        tracing::error!(
            "--insecure: this node accepts what it would refuse on a network (no auth on a \
             non-loopback address, short tokens, a token file others may read)"
        );
    }
    if config.insecure_transport && auth.is_on() && config.tls_cert.is_none() {
        tracing::error!(
            "--insecure-transport: the peer token travels in clear; anyone on the path can act as a node"
        );
    }
    let tls = crate::tls::Tls::load(&config)?;
    let peers = Peers::new(auth.peer_token(), tls.as_ref().map(|t| t.peer_client()))?;
    let config_digest =
        crate::agreement::digest(&auth, config.require_registration, config.ad_hoc_bookable);
    peers.identify(config.id, &config_digest);
    peers.announce(crate::rules::own_range(config.max_rules));
    let raft = Raft::new(
        config.id,
        Arc::new(raft_config(&config)?),
        Network {
            peers: peers.clone(),
            snapshots: shared.clone(),
        },
        log_store,
        sm,
    )
    .await?;

    let node = Arc::new(Node::new(
        config.clone(),
        raft.clone(),
        shared,
        peers,
        tls,
        auth,
        config_digest,
    ));
    if config.skips_log_sync() {
        tracing::error!(
            "fault injection: DELIBERATELY BROKEN: log appends are acknowledged without fdatasync"
        );
    }
    if config.breaks_linearizable_reads() {
        tracing::error!(
            "fault injection: DELIBERATELY BROKEN: linearizable reads are served from local state"
        );
    }
    if config.ungated() {
        tracing::error!(
            "fault injection: DELIBERATELY BROKEN: commands are proposed before the cluster's rules allow them"
        );
    }

    let (stop, stop_rx) = watch::channel(false);
    let mut http_servers = Vec::new();
    let metrics_addr = bind_http(
        &node,
        node.config.metrics_listen.as_deref(),
        "--metrics-listen",
        "serving Prometheus metrics at /metrics",
        (&stop_rx, &mut http_servers),
        crate::metrics::serve,
    )
    .await?;
    let http_addr = bind_http(
        &node,
        node.config.http_listen.as_deref(),
        "--http-listen",
        "serving the HTTP/JSON gateway at /v1/",
        (&stop_rx, &mut http_servers),
        crate::gateway::serve,
    )
    .await?;
    let server = tokio::spawn(serve(node.clone(), listener, stop_rx.clone()));
    tokio::spawn(crate::store::compaction::run(
        raft.clone(),
        node.sm.clone(),
        config.snapshot_every,
        stop_rx.clone(),
    ));
    tokio::spawn(crate::coord::member_ips::resolve_members(
        node.clone(),
        stop_rx.clone(),
    ));
    tokio::spawn(crate::coord::rules::run(node.clone(), stop_rx.clone()));
    let timers = tokio::spawn(crate::coord::timers::run(node.clone(), stop_rx));

    if config.join {
        tracing::info!("--join: waiting to be added to a cluster (tenure cluster add)");
    } else if config.peers.keys().next() == Some(&config.id) {
        let members: BTreeMap<NodeId, BasicNode> = config
            .peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => tracing::info!("initialized a new cluster"),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                tracing::info!("cluster already initialized")
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Running {
        node,
        metrics_addr,
        http_addr,
        http_servers,
        stop,
        server,
        timers,
    })
}

/// Binds `addr` (the setting `flag`), if set, and serves it with `serve` until stopped (its
/// task joins `tasks`); the address bound.
async fn bind_http<F>(
    node: &Arc<Node>,
    addr: Option<&str>,
    flag: &str,
    serving: &str,
    (stop, tasks): (&watch::Receiver<bool>, &mut Vec<JoinHandle<()>>),
    serve: impl FnOnce(Arc<Node>, TcpListener, watch::Receiver<bool>) -> F,
) -> anyhow::Result<Option<std::net::SocketAddr>>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let Some(addr) = addr else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("{flag} {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "{serving}");
    tasks.push(tokio::spawn(serve(node.clone(), listener, stop.clone())));
    Ok(Some(bound))
}

async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    tokio::spawn(crate::grpc::health::report(node.clone(), health));
    // Reflection in both versions tools speak: v1, and v1alpha (grpcurl and older tools).
    let reflection = reflection::Reflection::build(|b| b.build_v1())
        .and_then(|v1| Ok((v1, reflection::Reflection::build(|b| b.build_v1alpha())?)));
    let layer = tower::util::MapResponseLayer::new(
        move |mut response: http::Response<tonic::body::Body>| {
            transport::fix_transport_status(response.headers_mut());
            response
        },
    );

    let limits = &node.config.limits;
    let mutual = node.tls.is_some();
    let mut router = tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_streams_per_connection)
        .concurrency_limit_per_connection(limits.max_requests_per_connection)
        // A node that was paused (or stalled) comes back to a burst of streams its clients
        // already cancelled; h2's default of 20 pending resets would answer that burst with
        // GOAWAY (ENHANCE_YOUR_CALM) and fail calls that were fine.
        .http2_max_pending_accept_reset_streams(Some(limits.max_pending_resets))
        .http2_max_local_error_reset_streams(Some(limits.max_local_error_resets))
        .http2_keepalive_interval(Some(limits.http2_keepalive))
        .http2_keepalive_timeout(Some(limits.http2_keepalive_timeout))
        .max_connection_age(limits.max_connection_age)
        .max_connection_age_grace(limits.max_connection_age_grace)
        .layer(crate::metrics::RpcTimerLayer::new(node.rpc_latency.clone()))
        .layer(layer)
        .layer(gate::GateLayer::new(node.clone(), mutual))
        .add_service(
            LeasesServer::new(LeasesApi { node: node.clone() })
                .max_decoding_message_size(CLIENT_MESSAGE_LIMIT)
                .max_encoding_message_size(CLIENT_MESSAGE_LIMIT),
        )
        .add_service(
            ClusterServer::new(ClusterApi { node: node.clone() })
                .max_decoding_message_size(CLIENT_MESSAGE_LIMIT),
        )
        .add_service(
            RaftServer::new(RaftApi { node: node.clone() })
                .max_decoding_message_size(PEER_MESSAGE_LIMIT)
                .max_encoding_message_size(PEER_MESSAGE_LIMIT),
        )
        .add_service(health_service);
    match reflection {
        Ok((v1, v1alpha)) => router = router.add_service(v1).add_service(v1alpha),
        Err(e) => tracing::warn!("gRPC reflection unavailable: {e}"),
    }
    // Small RPCs must not wait for Nagle + delayed ACK (a 40 ms stall per forwarded call).
    let incoming = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(std::time::Duration::from_secs(10)));
    let stopped = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    // Connections from an address in the cooldown are closed at once; the others can be cut
    // by the gate (`crate::guard`).
    let table = node.connection_table(crate::coord::connections::Port::Grpc);
    let incoming = crate::guard::guard(
        crate::guard::Admitted::new(incoming, node.cooldown.clone()),
        limits.connection_strikes,
        table,
    );
    let served = match &node.tls {
        Some(tls) => {
            let incoming = crate::tls::TlsIncoming::new(
                Box::pin(incoming),
                tls.clone(),
                crate::tls::Speaks::Grpc,
            );
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
        None => router.serve_with_incoming_shutdown(incoming, stopped).await,
    };
    if let Err(e) = &served {
        tracing::error!("the gRPC server stopped: {e}");
    }
    served
}

impl Running {
    /// Stops gracefully: a leader first hands leadership to the most up-to-date other voter
    /// (`TransferLeader`), so the cluster goes on without waiting out an election; then
    /// [`Self::shutdown_in_place`].
    pub async fn shutdown(self) {
        self.hand_over_leadership().await;
        self.shutdown_in_place().await;
    }

    /// A leader with another voter hands leadership over, best effort: if it cannot (the
    /// others are behind or unreachable), the cluster elects a leader once this one is gone,
    /// as after a crash. Bounded by the transfer's own limits (about a second by default).
    async fn hand_over_leadership(&self) {
        let node = &self.node;
        let metrics = node.raft.metrics().borrow_watched().clone();
        let others = metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id != node.id);
        if metrics.current_leader != Some(node.id) || !others {
            return;
        }
        tracing::info!("stopping: handing leadership over first");
        if let crate::coord::membership::AdminReply::Transfer {
            to,
            transferred,
            detail,
            ..
        } = node.transfer_leader(0, None).await
        {
            if transferred {
                tracing::info!(leader = ?to, "stopping: leadership handed over");
            } else {
                tracing::warn!(%detail, "stopping: leadership not handed over; the others will elect a leader");
            }
        }
    }

    /// Stops serving, lets in-flight calls finish, and stops Raft, without handing leadership
    /// over. Watches, blocked waits and owner inboxes end at once (their clients resume
    /// elsewhere): they would never finish by themselves.
    pub async fn shutdown_in_place(self) {
        self.node.inboxes.shut_down();
        self.node.sm.notify.shut_down();
        let _ = self.stop.send(true);
        // Calls in flight get a grace period; streams nobody ends (a gRPC health watch) would
        // hold the shutdown forever.
        let mut server = self.server;
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
            .await
            .is_err()
        {
            tracing::warn!(
                "calls still open after {SHUTDOWN_GRACE:?}: no longer waiting for them (the process exit ends them)"
            );
            server.abort();
        }
        for mut task in self.http_servers {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
        let _ = self.timers.await;
        let _ = self.node.raft.shutdown().await;
    }

    /// Stops at once, as close to `kill -9` as one process can get: no call is finished.
    pub async fn kill(self) {
        self.node.sm.notify.shut_down();
        self.server.abort();
        self.timers.abort();
        for task in &self.http_servers {
            task.abort();
        }
        // Until the aborted server tasks are dropped, they hold the listening sockets: a
        // restart on the same port right after would find them in use.
        let _ = self.server.await;
        for task in self.http_servers {
            let _ = task.await;
        }
        let _ = self.node.raft.shutdown().await;
    }
}
