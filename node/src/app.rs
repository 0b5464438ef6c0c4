//! One node: open storage, start Raft, serve every gRPC service on one port, bootstrap the
//! cluster, run the leader's timers; and shut all of it down.

use std::collections::BTreeMap;

use anyhow::Context;
use std::sync::Arc;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use tenure_proto::raft::v1::raft_server::RaftServer;
use tenure_proto::v1::cluster_server::ClusterServer;
use tenure_proto::v1::leases_server::LeasesServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::cluster::ClusterApi;
use crate::api::leases::LeasesApi;
use crate::api::raft::RaftApi;
use crate::api::{gate, transport};
use crate::clock::NodeClock;
use crate::config::Config;
use crate::network::{Network, Peers, PEER_MESSAGE_LIMIT};
use crate::store::log::LogStore;
use crate::store::state_machine::{Shared, StateMachineStore};
use crate::store::{NodeId, Raft, StorageStats};

/// How long a graceful shutdown waits for calls in flight.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The client API's message limit (SPEC §3): larger messages are refused by the transport.
pub const CLIENT_MESSAGE_LIMIT: usize = 4 * 1024 * 1024;

/// A running node's parts, shared by every service.
pub struct Node {
    pub id: NodeId,
    pub addr: String,
    pub raft: Raft,
    pub sm: Arc<Shared>,
    pub peers: Peers,
    pub clock: Arc<NodeClock>,
    pub config: Config,
    /// TLS settings (None: TLS off); SIGHUP loads the files again ([`Node::reload`]).
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// The token table in force: SIGHUP loads the token file again ([`Node::reload_auth`]).
    auth: watch::Sender<Arc<crate::auth::Auth>>,
    /// Client requests in flight, node-wide (`--max-in-flight`).
    pub in_flight: crate::limits::Gauge,
    /// Client requests in flight by principal (`--max-in-flight-per-principal`).
    pub in_flight_per_principal: crate::limits::PerPrincipal,
    /// Each principal's reads, paced (`--read-rate-per-principal`).
    pub read_pacer: crate::limits::ReadPacer,
    /// Watch, Serve and waiting Acquire calls open, node-wide (`--max-open-streams`).
    pub streams: crate::limits::Gauge,
    /// Health Watch and reflection streams open, node-wide (`--max-public-streams`).
    pub public_streams: crate::limits::Gauge,
    /// Watches, Serve inboxes and watches of every resource open on this node, by
    /// principal: their quotas.
    watches: crate::limits::PerPrincipal,
    all_watches: crate::limits::PerPrincipal,
    serving: crate::limits::PerPrincipal,
    /// The digest of what every member must share (`crate::agreement`); a reload of the
    /// token file renews it.
    config_digest: std::sync::RwLock<String>,
    /// The members' IP addresses (their names resolved), never kept out.
    member_ips: std::sync::RwLock<Vec<std::net::IpAddr>>,
    /// Addresses whose connection was cut for abuse, kept out for a while (`crate::guard`).
    pub cooldown: Arc<crate::guard::Cooldown>,
    /// Connections cut for abuse since start.
    pub connections_cut: std::sync::atomic::AtomicU64,
    /// Checks the snapshot a leader is sending, chunk by chunk (`store::snapshot::ChunkCheck`).
    pub receiving_snapshot: std::sync::Mutex<crate::store::snapshot::ChunkCheck>,
    /// Calls refused, by cause.
    pub refusals: crate::metrics::Refusals,
    /// The highest log index this process has committed as leader (0: none yet). A leader
    /// restarted in its old term reuses its old blank entry, so until it commits an entry of
    /// its own its read index may lag writes it acknowledged before the restart.
    pub own_commit: Arc<std::sync::atomic::AtomicU64>,
    /// The owner inboxes opened on this node (`Serve`, SPEC §4.9).
    pub inboxes: crate::api::owner::Inboxes,
    /// Shares each leader ReadIndex round among the linearizable reads that arrived before it.
    pub reads: crate::api::read_barrier::ReadBarrier<crate::api::forward::ReadRound>,
    /// Gathers the commands that arrive while entries are being committed into one entry.
    pub batcher: crate::api::batch::Batcher,
    /// Starts an election early when the leader's address refuses connections.
    pub succession: Arc<crate::succession::Succession>,
    /// gRPC latency by method (`crate::metrics`).
    pub rpc_latency: crate::metrics::RpcLatency,
    /// This leader is handing leadership over (`TransferLeader`): it takes no writes or
    /// linearizable reads, which would renew the followers' lease on it.
    pub handing_over: std::sync::atomic::AtomicBool,
}

/// A started node; `shutdown` stops it gracefully, `kill` as abruptly as a process can be.
pub struct Running {
    pub node: Arc<Node>,
    /// Where `GET /metrics` is served (`--metrics-listen`), once bound.
    pub metrics_addr: Option<std::net::SocketAddr>,
    stop: watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
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
        ..Default::default()
    };
    Ok(raft_config.validate()?)
}

/// Starts a node serving on `listener`.
pub async fn start(config: Config, listener: TcpListener) -> anyhow::Result<Running> {
    config.validate()?;
    let stats = Arc::new(StorageStats::default());
    let log_store = LogStore::open(&config.data_dir.join("raft"), stats.clone())?;
    let sm = StateMachineStore::open(config.data_dir.join("snapshots"), stats)?;
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
    let raft = Raft::new(
        config.id,
        Arc::new(raft_config(&config)?),
        Network {
            peers: peers.clone(),
        },
        log_store,
        sm,
    )
    .await?;

    let clock = Arc::new(NodeClock::default());
    #[cfg(feature = "fault-injection")]
    if config.fi_clock_offset_ms != 0 || config.fi_clock_rate_ppm != 0 {
        tracing::warn!(
            offset_ms = config.fi_clock_offset_ms,
            rate_ppm = config.fi_clock_rate_ppm,
            "fault injection: this node's clocks are skewed"
        );
        clock.apply_skew(crate::clock::ClockSkew {
            step_ms: config.fi_clock_offset_ms,
            rate_ppm: config.fi_clock_rate_ppm,
        });
    }

    if config.breaks_linearizable_reads() {
        tracing::error!(
            "fault injection: DELIBERATELY BROKEN: linearizable reads are served from local state"
        );
    }
    let own_commit = Arc::<std::sync::atomic::AtomicU64>::default();
    let node = Arc::new(Node {
        id: config.id,
        addr: config.advertised_addr().to_string(),
        raft: raft.clone(),
        sm: shared,
        peers,
        clock: clock.clone(),
        config: config.clone(),
        tls: tls.clone(),
        auth: watch::Sender::new(Arc::new(auth)),
        in_flight: crate::limits::Gauge::new(
            crate::limits::Cap::InFlight,
            config.limits.max_in_flight,
        ),
        in_flight_per_principal: crate::limits::PerPrincipal::new(
            config.limits.max_in_flight_per_principal,
        ),
        read_pacer: crate::limits::ReadPacer::new(config.limits.read_rate_per_principal),
        streams: crate::limits::Gauge::new(
            crate::limits::Cap::Streams,
            config.limits.max_open_streams,
        ),
        public_streams: crate::limits::Gauge::new(
            crate::limits::Cap::PublicStreams,
            config.limits.max_public_streams,
        ),
        watches: crate::limits::PerPrincipal::new(usize::MAX),
        all_watches: crate::limits::PerPrincipal::new(usize::MAX),
        serving: crate::limits::PerPrincipal::new(usize::MAX),
        config_digest: std::sync::RwLock::new(config_digest),
        member_ips: Default::default(),
        cooldown: Default::default(),
        connections_cut: Default::default(),
        receiving_snapshot: Default::default(),
        refusals: Default::default(),
        own_commit: own_commit.clone(),
        inboxes: Default::default(),
        batcher: crate::api::forward::batcher(raft.clone(), clock.clone(), own_commit),
        reads: crate::api::forward::read_barrier(raft.clone(), config.request_timeout),
        succession: Arc::new(crate::succession::Succession::new(
            raft.clone(),
            config.id,
            config.election_min,
            config.election_max,
        )),
        rpc_latency: crate::metrics::rpc_latency(),
        handing_over: Default::default(),
    });

    let (stop, stop_rx) = watch::channel(false);
    let mut metrics_addr = None;
    if let Some(addr) = &node.config.metrics_listen {
        let metrics = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("--metrics-listen {addr}: {e}"))?;
        let bound = metrics.local_addr()?;
        tracing::info!(addr = %bound, "serving Prometheus metrics at /metrics");
        metrics_addr = Some(bound);
        tokio::spawn(crate::metrics::serve(
            node.clone(),
            metrics,
            stop_rx.clone(),
        ));
    }
    let server = tokio::spawn(serve(node.clone(), listener, stop_rx.clone()));
    tokio::spawn(crate::store::compaction::run(
        raft.clone(),
        node.sm.clone(),
        config.snapshot_every,
        stop_rx.clone(),
    ));
    tokio::spawn(resolve_members(node.clone(), stop_rx.clone()));
    let timers = tokio::spawn(crate::timers::run(node.clone(), stop_rx));

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
        stop,
        server,
        timers,
    })
}

async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    tokio::spawn(report_health(node.clone(), health));
    // Reflection in both versions tools speak: v1, and v1alpha (grpcurl and older tools).
    let reflection = gate::Reflection::build(|b| b.build_v1())
        .and_then(|v1| Ok((v1, gate::Reflection::build(|b| b.build_v1alpha())?)));
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
    let incoming = crate::guard::guard(
        crate::guard::Admitted::new(incoming, node.cooldown.clone()),
        limits.connection_strikes,
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

impl Node {
    /// A place for one more watch or Serve inbox (`quota`) of `caller` on this node, with
    /// the node-wide place `open_stream`; past the principal's quota, `resource_exhausted`.
    /// An admin's are counted, not limited (as in the state machine).
    pub fn open_stream_of(
        &self,
        caller: &crate::auth::Caller,
        quota: crate::lease::quota::Quota,
        open_stream: crate::limits::Permit,
    ) -> Result<crate::limits::Permit, crate::error::ApiError> {
        let principal = caller.principal.as_str();
        let limit = match caller.admin {
            true => u64::MAX,
            false => self.sm.read().state.quotas.limits(principal).get(quota),
        };
        let tally = self.tally(quota);
        let place = tally
            .enter_up_to(principal, usize::try_from(limit).unwrap_or(usize::MAX))
            .ok_or_else(|| crate::lease::Rejection::QuotaExceeded {
                quota: quota.name().to_string(),
                limit,
                principal: principal.to_string(),
            })?;
        Ok(open_stream.with(place))
    }

    fn tally(&self, quota: crate::lease::quota::Quota) -> &crate::limits::PerPrincipal {
        match quota {
            crate::lease::quota::Quota::Inboxes => &self.serving,
            crate::lease::quota::Quota::AllResourceWatches => &self.all_watches,
            _ => &self.watches,
        }
    }

    /// How many watches or inboxes (`quota`) `principal` has open on this node.
    pub fn streams_of(&self, principal: &str, quota: crate::lease::quota::Quota) -> u64 {
        let tally = self.tally(quota);
        tally.held_by(principal) as u64
    }

    /// The token table in force.
    pub fn auth(&self) -> Arc<crate::auth::Auth> {
        self.auth.borrow().clone()
    }

    /// SIGHUP: loads the token file and the TLS files again. Each that does not load stays as
    /// it was; the errors say which.
    pub fn reload(&self) -> anyhow::Result<()> {
        let auth = if self.config.token_file.is_some() {
            self.reload_auth()
                .context("the token file was not reloaded")
        } else {
            Ok(())
        };
        let tls = match &self.tls {
            Some(tls) => tls
                .reload()
                .map(|()| {
                    self.peers.set_tls(tls.peer_client());
                    tracing::info!("reloaded the TLS certificate, key and CA");
                })
                .context("the TLS files were not reloaded"),
            None => Ok(()),
        };
        match (auth, tls) {
            (Err(a), Err(t)) => Err(a.context(format!("{t:#}"))),
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    /// Loads the token file again (SIGHUP): a token no longer in it is refused from its next
    /// call on, and the streams it opened end ([`Node::revoked`]). A file that does not load
    /// leaves the table in force as it was. Auth cannot be turned on or off this way.
    pub fn reload_auth(&self) -> anyhow::Result<()> {
        let Some(path) = &self.config.token_file else {
            anyhow::bail!("no --token-file to reload: auth stays off");
        };
        let auth = crate::auth::Auth::load(path, self.config.insecure)?;
        anyhow::ensure!(
            auth.peer_token() == self.auth().peer_token(),
            "the peer token this node sends (the lexically first `peer` line) would change: \
             that takes a restart; a reload may add or remove any other token"
        );
        let digest = crate::agreement::digest(
            &auth,
            self.config.require_registration,
            self.config.ad_hoc_bookable,
        );
        self.peers.identify(self.id, &digest);
        *self
            .config_digest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = digest.clone();
        self.auth.send_replace(Arc::new(auth));
        tracing::info!(file = %path.display(), config_digest = %digest, "reloaded the token file");
        Ok(())
    }

    /// The members' IP addresses, their names resolved (kept up to date by
    /// [`resolve_members`]).
    pub fn member_ips(&self) -> Vec<std::net::IpAddr> {
        self.member_ips
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The digest of what every member must share (`crate::agreement`).
    pub fn config_digest(&self) -> String {
        self.config_digest
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Resolves once a reload revoked `credential` (never when auth is off).
    pub async fn revoked(&self, credential: Option<crate::auth::Credential>) {
        let Some(credential) = credential else {
            return std::future::pending().await;
        };
        let mut changes = self.auth.subscribe();
        loop {
            if !changes.borrow_and_update().admits(&credential) {
                return;
            }
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// Resolves the members' addresses whenever the membership changes, and every 30 s (names
/// may move), into [`Node::member_ips`].
async fn resolve_members(node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    let mut metrics = node.raft.metrics();
    let mut refresh = tokio::time::interval(std::time::Duration::from_secs(30));
    let mut resolved_for: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            // The first tick comes at once.
            _ = refresh.tick() => resolved_for.clear(),
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let addrs: Vec<String> = metrics
            .borrow_and_update()
            .membership_config
            .membership()
            .nodes()
            .map(|(_, member)| member.addr.clone())
            .collect();
        if addrs == resolved_for {
            continue;
        }
        let mut ips = Vec::new();
        for addr in &addrs {
            if let Ok(resolved) = tokio::net::lookup_host(addr.as_str()).await {
                ips.extend(resolved.map(|socket| socket.ip().to_canonical()));
            }
        }
        ips.sort();
        ips.dedup();
        *node
            .member_ips
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ips;
        resolved_for = addrs;
    }
}

/// `grpc.health.v1`: SERVING while this node knows a leader.
async fn report_health(node: Arc<Node>, health: tonic_health::server::HealthReporter) {
    let mut metrics = node.raft.metrics();
    loop {
        let has_leader = metrics.borrow_and_update().current_leader.is_some();
        let status = if has_leader {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        health.set_service_status("", status).await;
        health.set_service_status("tenure.v1.Leases", status).await;
        if metrics.changed().await.is_err() {
            return;
        }
    }
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
        let metrics = node.raft.metrics().borrow().clone();
        let others = metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id != node.id);
        if metrics.current_leader != Some(node.id) || !others {
            return;
        }
        tracing::info!("stopping: handing leadership over first");
        if let crate::api::membership::AdminReply::Transfer {
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
        let _ = self.timers.await;
        let _ = self.node.raft.shutdown().await;
    }

    /// Stops at once, as close to `kill -9` as one process can get: no call is finished.
    pub async fn kill(self) {
        self.node.sm.notify.shut_down();
        self.server.abort();
        self.timers.abort();
        // Until the aborted server task is dropped, it holds the listening socket: a restart
        // on the same port right after would find it in use.
        let _ = self.server.await;
        let _ = self.node.raft.shutdown().await;
    }
}
