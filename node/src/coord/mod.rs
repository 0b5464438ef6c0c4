//! The node's coordination: [`Node`], the parts of one running node every service shares,
//! and everything it does beyond a single call's parsing and reply: proposing through the
//! leader (`forward`), batching the leader's entries (`batch`), the read barrier
//! (`read_barrier`), waiting acquires (`wait`), membership changes (`membership`), starting an
//! election when the leader is gone (`succession`), the leader's timers (`timers`) and the
//! clocks it stamps entries with (`stamp_clock`), and the owner inboxes this node holds
//! (`inbox`). Also: what the node reports of the cluster (`views`), the quotas of its open
//! streams (`streams`), what SIGHUP reloads (`reload`), the members' addresses it resolves
//! (`member_ips`), and a proposal's form on its way to the leader (`unstamped`).
//!
//! The gRPC adapters (`crate::grpc`) call into it; it does not call them.

pub mod batch;
pub mod connections;
pub mod forward;
pub mod in_flight;
pub mod inbox;
pub mod member_ips;
pub mod membership;
pub mod read_barrier;
mod reload;
pub mod rules;
pub mod stamp_clock;
mod streams;
pub mod succession;
pub mod timers;
pub mod unstamped;
pub mod views;
pub mod wait;

use std::sync::Arc;

use tokio::sync::watch;

use crate::auth::Auth;
use crate::config::Config;
use crate::network::Peers;
use crate::store::state_machine::Shared;
use crate::store::{NodeId, Raft};
use stamp_clock::NodeClock;

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
    /// Long-lived calls open by principal (`--max-open-streams-per-principal`).
    streams_per_principal: crate::limits::PerPrincipal,
    /// The places among the open streams of the waits blocked calls wait for here: one a
    /// wait, however many calls rejoin it.
    waits: streams::WaitPlaces,
    /// Each principal's watch buffer (`grpc::watch`): what its watches hold read and not yet
    /// written.
    watch_buffers: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Health Watch and reflection streams open, node-wide (`--max-public-streams`).
    pub public_streams: crate::limits::Gauge,
    /// The same, by address (`--max-public-streams-per-address`; members have no share).
    pub public_streams_per_address: crate::limits::PerPrincipal,
    /// Watches, Serve inboxes and watches of every resource open on this node, by
    /// principal: their quotas.
    watches: crate::limits::PerPrincipal,
    all_watches: crate::limits::PerPrincipal,
    serving: crate::limits::PerPrincipal,
    /// `KeepAlive` streams open on this node, by principal (at most
    /// [`crate::limits::KEEP_ALIVE_STREAMS_PER_PRINCIPAL`] each).
    pub keep_alive_streams: crate::limits::PerPrincipal,
    /// The digest of what every member must share (`crate::agreement`); a reload of the
    /// token file renews it.
    config_digest: std::sync::RwLock<String>,
    /// The members' IP addresses (their names resolved), never kept out.
    member_ips: std::sync::RwLock<Vec<std::net::IpAddr>>,
    /// Addresses whose connection was cut for abuse, kept out for a while (`crate::guard`).
    pub cooldown: Arc<crate::guard::Cooldown>,
    /// Connections cut for abuse since start.
    pub connections_cut: std::sync::atomic::AtomicU64,
    /// Writes this node refused as leader without proposing them (`forward`).
    pub refused_before_proposing: std::sync::atomic::AtomicU64,
    /// The highest rules version a peer's call said its applied state runs
    /// (`tenure-rules-cluster`): committed, so the cluster has reached it even where this
    /// node has not applied the raise yet (`Node::gate`).
    pub(crate) rules_heard: std::sync::atomic::AtomicU32,
    /// Held while a `Tick` brings a stale state up to date before a refusal (`forward`): the
    /// writes that find it stale at once wait for the one `Tick`.
    pub(crate) refreshing: tokio::sync::Mutex<()>,
    /// (principal, request id) of the writes this node serves as leader and has not answered
    /// yet, with how many copies: a retry that finds its first copy still on its way is
    /// proposed (apply answers it from the first's record), never refused before it.
    pub(crate) writes_on_their_way:
        std::sync::Mutex<std::collections::HashMap<(String, String), u32>>,
    /// The connection tables of the ports serving (`connections`).
    connection_tables: std::sync::Mutex<Vec<Arc<crate::guard::Table>>>,
    /// Checks the snapshot a leader is sending, chunk by chunk (`store::snapshot::ChunkCheck`).
    pub receiving_snapshot: std::sync::Mutex<crate::store::snapshot::ChunkCheck>,
    /// Calls refused, by cause.
    pub refusals: crate::metrics::Refusals,
    /// The highest log index this process has committed as leader (0: none yet). A leader
    /// restarted in its old term reuses its old blank entry, so until it commits an entry of
    /// its own its read index may lag writes it acknowledged before the restart.
    pub own_commit: Arc<std::sync::atomic::AtomicU64>,
    /// The owner inboxes opened on this node (`Serve`, SPEC §4.9).
    pub inboxes: inbox::Inboxes,
    /// Shares each leader ReadIndex round among the linearizable reads that arrived before it.
    pub reads: read_barrier::ReadBarrier<forward::ReadRound>,
    /// Gathers the commands that arrive while entries are being committed into one entry.
    pub batcher: batch::Batcher,
    /// Starts an election early when the leader's address refuses connections.
    pub succession: Arc<succession::Succession>,
    /// gRPC latency by method (`crate::metrics`).
    pub rpc_latency: crate::metrics::RpcLatency,
    /// This leader is handing leadership over (`TransferLeader`): it takes no writes or
    /// linearizable reads, which would renew the followers' lease on it.
    pub handing_over: std::sync::atomic::AtomicBool,
    /// This node's rules range as its answers to peers carry it (`crate::rules::HEADER`).
    pub rules_header: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    /// Held by a raise of the rules and by a membership change: a member added while a raise
    /// is decided would miss the check of its rules.
    pub(crate) members_or_rules: tokio::sync::Mutex<()>,
}

impl Node {
    /// A node's parts around its started `raft`: `auth` is the token table in force,
    /// `config_digest` its digest (`crate::agreement`), `tls` None when TLS is off.
    pub fn new(
        config: Config,
        raft: Raft,
        sm: Arc<Shared>,
        peers: Peers,
        tls: Option<Arc<crate::tls::Tls>>,
        auth: Auth,
        config_digest: String,
    ) -> Node {
        let clock = Arc::new(NodeClock::default());
        #[cfg(feature = "fault-injection")]
        if config.fi_clock_offset_ms != 0 || config.fi_clock_rate_ppm != 0 {
            tracing::warn!(
                offset_ms = config.fi_clock_offset_ms,
                rate_ppm = config.fi_clock_rate_ppm,
                "fault injection: this node's clocks are skewed"
            );
            clock.apply_skew(stamp_clock::ClockSkew {
                step_ms: config.fi_clock_offset_ms,
                rate_ppm: config.fi_clock_rate_ppm,
            });
        }
        let own_commit = Arc::<std::sync::atomic::AtomicU64>::default();
        let limits = &config.limits;
        Node {
            id: config.id,
            addr: config.advertised_addr().to_string(),
            raft: raft.clone(),
            sm,
            peers,
            clock: clock.clone(),
            tls,
            auth: watch::Sender::new(Arc::new(auth)),
            in_flight: crate::limits::Gauge::new(
                crate::limits::Cap::InFlight,
                limits.max_in_flight,
            ),
            in_flight_per_principal: crate::limits::PerPrincipal::new(
                crate::limits::Cap::PrincipalInFlight,
                limits.max_in_flight_per_principal,
            ),
            read_pacer: crate::limits::ReadPacer::new(limits.read_rate_per_principal),
            streams: crate::limits::Gauge::new(
                crate::limits::Cap::Streams,
                limits.max_open_streams,
            ),
            public_streams: crate::limits::Gauge::new(
                crate::limits::Cap::PublicStreams,
                limits.max_public_streams,
            ),
            public_streams_per_address: crate::limits::PerPrincipal::new(
                crate::limits::Cap::AddressPublicStreams,
                limits.max_public_streams_per_address,
            ),
            streams_per_principal: crate::limits::PerPrincipal::new(
                crate::limits::Cap::PrincipalStreams,
                limits.max_open_streams_per_principal,
            ),
            waits: Default::default(),
            watch_buffers: Default::default(),
            watches: streams::counted(),
            all_watches: streams::counted(),
            serving: streams::counted(),
            keep_alive_streams: streams::counted(),
            config_digest: std::sync::RwLock::new(config_digest),
            member_ips: Default::default(),
            cooldown: Default::default(),
            connections_cut: Default::default(),
            refused_before_proposing: Default::default(),
            rules_heard: Default::default(),
            refreshing: Default::default(),
            writes_on_their_way: Default::default(),
            connection_tables: Default::default(),
            receiving_snapshot: Default::default(),
            refusals: Default::default(),
            own_commit: own_commit.clone(),
            inboxes: Default::default(),
            batcher: forward::batcher(raft.clone(), clock, own_commit),
            reads: forward::read_barrier(raft.clone(), config.request_timeout),
            succession: Arc::new(succession::Succession::new(
                raft,
                config.id,
                config.election_min,
                config.election_max,
            )),
            rpc_latency: crate::metrics::rpc_latency(),
            handing_over: Default::default(),
            rules_header: crate::rules::own_range(config.max_rules)
                .to_string()
                .parse()
                .unwrap_or_else(|_| tonic::metadata::MetadataValue::from_static("1-1")),
            members_or_rules: Default::default(),
            config,
        }
    }
}
