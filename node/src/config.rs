//! The node's command line (SPEC §6). Every flag can also come from the environment.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Clone, Debug, Parser)]
#[command(
    name = "tenured",
    version,
    about = "Tenure node: Raft-replicated leases with log-index fencing tokens"
)]
pub struct Config {
    /// This node's id: a positive integer, unique in the cluster and never reused.
    #[arg(long, env = "TENURED_ID")]
    pub id: u64,

    /// Address to serve gRPC on (clients and peers), e.g. 0.0.0.0:7101.
    #[arg(long, env = "TENURED_LISTEN")]
    pub listen: String,

    /// Directory for the Raft log (sled) and snapshots. Created if missing.
    #[arg(long, env = "TENURED_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Every member as ID=HOST:PORT, this node included: 1=10.0.0.1:7101,2=…
    /// The lowest id initializes a new cluster (idempotently).
    #[arg(long, env = "TENURED_PEERS", value_parser = parse_peers)]
    pub peers: Peers,

    /// Join a running cluster instead of founding one: never initialize, wait until an admin
    /// adds this node (`tenure cluster add ID HOST:PORT`, then `promote`). `--peers` then
    /// needs only this node's own entry. A wiped node rejoins this way, under a new id.
    #[arg(long, env = "TENURED_JOIN")]
    pub join: bool,

    /// How often the leader commits a Tick while any lease is live. Default: 500ms.
    #[arg(long, env = "TENURED_TICK_INTERVAL", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub tick_interval: Duration,

    /// Raft heartbeat interval. Default: 100ms. openraft 0.9 also uses it as the timeout of
    /// every AppendEntries RPC, so it must exceed a loaded follower's append + fsync.
    #[arg(long, env = "TENURED_HEARTBEAT", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub heartbeat: Duration,

    /// Raft election timeout, lower bound. Default: 150ms. openraft adds its leader lease
    /// (= the upper bound) once a leader is known, so a follower campaigns after 450–600 ms
    /// without a heartbeat (plus up to a tick, 1.5 heartbeats); a follower that finds the
    /// leader's port closed campaigns when the lease ends (`succession`). Measured under load
    /// in docs/benchmarks.md: no election without cause.
    #[arg(long, env = "TENURED_ELECTION_MIN", default_value = "150ms", value_parser = humantime::parse_duration)]
    pub election_min: Duration,

    /// Raft election timeout, upper bound, and openraft's leader lease. Default: 300ms.
    #[arg(long, env = "TENURED_ELECTION_MAX", default_value = "300ms", value_parser = humantime::parse_duration)]
    pub election_max: Duration,

    /// Build a snapshot (and purge the log behind it) after at least this many entries, once
    /// the log has also grown by an eighth of the last snapshot's size. Default: 5000.
    #[arg(long, env = "TENURED_SNAPSHOT_EVERY", default_value_t = 5000)]
    pub snapshot_every: u64,

    /// Log entries kept behind a snapshot for lagging followers. Default: 1000.
    #[arg(long, env = "TENURED_SNAPSHOT_KEEP_LOGS", default_value_t = 1000)]
    pub snapshot_keep_logs: u64,

    /// Longest a client call waits for a leader and a commit before `unavailable`. Default: 10s.
    #[arg(long, env = "TENURED_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,

    /// Bearer tokens, one per line: `TOKEN PRINCIPAL ROLE` (ROLE = admin | client). Without
    /// it, auth is off and every caller is the admin `anonymous`.
    #[arg(long, env = "TENURED_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// Serve Prometheus metrics (`GET /metrics`, plain HTTP) on this address, e.g.
    /// 0.0.0.0:9101. Default: off.
    #[arg(long, env = "TENURED_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,

    /// This node's TLS certificate chain (PEM). With --tls-key and --tls-ca, clients and
    /// peers reach this node over TLS only, and peers over mutual TLS. The certificate must
    /// name the host of this node's --peers entry (DNS name or IP) as a subject alternative
    /// name. Default: TLS off.
    #[arg(long, env = "TENURED_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// This node's TLS private key (PEM), for --tls-cert.
    #[arg(long, env = "TENURED_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// The cluster CA (PEM): it signed every node's certificate. Nodes verify each other
    /// with it in both directions, and the internal Raft service refuses callers without a
    /// certificate it signed. Clients verify nodes with it (`tenure --ca-cert`).
    #[arg(long, env = "TENURED_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// Refuse acquires of resources no admin registered (`resource_not_found`), instead of
    /// running them ad hoc under the default policy.
    #[arg(long, env = "TENURED_REQUIRE_REGISTRATION")]
    pub require_registration: bool,

    /// Test-only (feature `fault-injection`): start with both clocks stepped by this many ms.
    #[cfg(feature = "fault-injection")]
    #[arg(
        long,
        env = "TENURED_FI_CLOCK_OFFSET_MS",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub fi_clock_offset_ms: i64,

    /// Test-only (feature `fault-injection`): start with both clocks running this many ppm fast.
    #[cfg(feature = "fault-injection")]
    #[arg(
        long,
        env = "TENURED_FI_CLOCK_RATE_PPM",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub fi_clock_rate_ppm: i64,

    /// Test-only (feature `fault-injection`), DELIBERATELY BROKEN: answer linearizable reads
    /// from this node's local state without the leader's quorum round, so that the fault
    /// harness can show it catches stale reads.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "TENURED_FI_STALE_READS")]
    pub fi_stale_reads: bool,
}

/// The cluster's members by id.
pub type Peers = BTreeMap<u64, String>;

fn parse_peers(text: &str) -> Result<Peers, String> {
    let mut peers = Peers::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("peer `{item}` is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("peer id `{id}` is not a positive integer"))?;
        if id == 0 {
            return Err("peer id 0 is reserved".into());
        }
        if peers.insert(id, addr.trim().to_string()).is_some() {
            return Err(format!("peer id {id} appears twice"));
        }
    }
    Ok(peers)
}

impl Config {
    /// Checks what clap cannot: this node in its peer list, sane Raft timing.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.peers.contains_key(&self.id),
            "--peers must include this node's id {} (ID=HOST:PORT)",
            self.id
        );
        anyhow::ensure!(
            self.heartbeat < self.election_min && self.election_min < self.election_max,
            "need heartbeat < election-min < election-max"
        );
        anyhow::ensure!(
            self.tick_interval >= Duration::from_millis(10),
            "--tick-interval must be at least 10ms"
        );
        let tls = [&self.tls_cert, &self.tls_key, &self.tls_ca];
        anyhow::ensure!(
            tls.iter().all(|f| f.is_some()) || tls.iter().all(|f| f.is_none()),
            "TLS needs all three of --tls-cert, --tls-key and --tls-ca"
        );
        Ok(())
    }

    /// Whether this node was told to break linearizable reads (fault-injection builds only).
    pub fn breaks_linearizable_reads(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.fi_stale_reads;
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// The address peers and clients reach this node at.
    pub fn advertised_addr(&self) -> &str {
        self.peers
            .get(&self.id)
            .map_or(self.listen.as_str(), String::as_str)
    }
}
