//! The node's configuration (SPEC §6): flags, each also read from its environment variable,
//! and a TOML file (`--config FILE`) for whatever neither sets. A flag beats its variable,
//! which beats the file, which beats the default.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser};

#[derive(Clone, Debug, Parser)]
#[command(
    name = "tenured",
    version,
    about = "Tenure node: Raft-replicated leases with log-index fencing tokens",
    after_help = "Every flag can also be set by its environment variable (shown in brackets) or \
                  in the --config file, as `flag_name = value` (underscores for dashes).\n\n\
                  `tenured restore --help`: seed a data directory from a backup (a snapshot file).",
    args_override_self = true
)]
pub struct Config {
    /// A TOML file of settings, `name = value` with each flag's name in snake_case, e.g.
    /// `id = 1`, `peers = "1=10.0.0.1:7101,2=…"` (or a [peers] table of id = "HOST:PORT"),
    /// `election_max = "300ms"`, `join = true`. Flags and environment variables win over it.
    #[arg(long, env = "TENURED_CONFIG")]
    pub config: Option<PathBuf>,

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

    /// Raft heartbeat interval. Default: 100ms. openraft also uses it as the timeout of every
    /// AppendEntries RPC (0.9 and 0.10 alike), so it must exceed a loaded follower's append +
    /// fsync.
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

    /// Threads of the node's async runtime (tokio workers). Default: one per CPU. Fewer than
    /// the CPUs leaves room for the log's flusher and what else runs on the machine.
    #[arg(long, env = "TENURED_WORKER_THREADS")]
    pub worker_threads: Option<usize>,

    /// Bearer tokens, one per line: `TOKEN PRINCIPAL ROLE` (ROLE = admin | client | peer, the
    /// token nodes present to each other). Without it, auth is off and every caller is the
    /// admin `anonymous`.
    #[arg(long, env = "TENURED_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// Serve Prometheus metrics (`GET /metrics`) on this address, e.g. 127.0.0.1:9101, or
    /// just a port (9101: loopback). Over TLS with the node's certificate when TLS is on;
    /// plain HTTP, and so only on loopback unless --insecure, when it is off. Default: off.
    #[arg(long, env = "TENURED_METRICS_LISTEN", value_parser = parse_metrics_listen)]
    pub metrics_listen: Option<String>,

    /// Serve the HTTP/JSON gateway (every client call as a route under /v1/, Watch as
    /// Server-Sent Events, /v1/openapi.json) on this address, e.g. 127.0.0.1:8080, or just a
    /// port (loopback). The same bearer tokens as gRPC; over TLS with the node's certificate
    /// when TLS is on. Default: off.
    #[arg(long, env = "TENURED_HTTP_LISTEN", value_parser = parse_metrics_listen)]
    pub http_listen: Option<String>,

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

    /// Run without the safeguards of a node reachable from a network, on purpose: serve a
    /// non-loopback address without --token-file (every caller an admin, the internal Raft
    /// service open to anyone), and accept tokens shorter than 32 bytes or a token file
    /// that group or others may read. Logged loudly at start. For tests and throwaway
    /// clusters only.
    #[arg(long, env = "TENURED_INSECURE")]
    pub insecure: bool,

    /// Send the peer token in clear: auth on (--token-file), TLS off and a peer on a
    /// non-loopback address. Anyone on the path could read the token and act as a node.
    /// Logged loudly at start. Use TLS (--tls-cert, --tls-key, --tls-ca) instead.
    #[arg(long, env = "TENURED_INSECURE_TRANSPORT")]
    pub insecure_transport: bool,

    #[command(flatten)]
    pub limits: crate::limits::Limits,

    /// Refuse acquires of resources no admin registered (`resource_not_found`), instead of
    /// running them ad hoc under the default policy.
    #[arg(long, env = "TENURED_REQUIRE_REGISTRATION")]
    pub require_registration: bool,

    /// Let holders book windows of ad-hoc resources (registered ones follow their policy's
    /// `bookable`). Off: a booking of an ad-hoc resource is refused `not_bookable`, so that
    /// nobody can reserve a name another client uses ad hoc. Every member must agree.
    #[arg(long, env = "TENURED_AD_HOC_BOOKABLE")]
    pub ad_hoc_bookable: bool,

    /// The highest rules version this node agrees to (docs/operations.md, "Upgrade"): the
    /// cluster raises its rules only to a version every member supports, so a node started
    /// with this release's previous version keeps the way back to the previous release open.
    /// A node refuses data written under higher rules than this. Default: the highest this
    /// release applies.
    #[arg(long, env = "TENURED_MAX_RULES", default_value_t = crate::rules::RELEASE.max,
          value_parser = clap::value_parser!(u32).range(i64::from(crate::rules::RELEASE.min)..=i64::from(crate::rules::RELEASE.max)))]
    pub max_rules: u32,

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

    /// Test-only (feature `fault-injection`), DELIBERATELY BROKEN: acknowledge log appends
    /// once written to the operating system, without the fdatasync that makes them survive
    /// power loss ("fsync lies"), so that the fault harness can show its power cuts catch it.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "TENURED_FI_ACK_BEFORE_SYNC")]
    pub fi_ack_before_sync: bool,

    /// Test-only (feature `fault-injection`), DELIBERATELY BROKEN: propose commands of rules
    /// the cluster has not reached (no `rules_not_reached`), so that the fault harness can
    /// show its mixed-version runs catch an ungated command.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "TENURED_FI_UNGATED")]
    pub fi_ungated: bool,
}

/// The cluster's members by id.
pub type Peers = BTreeMap<u64, String>;

/// The `--config` file named on the command line or by `TENURED_CONFIG`: clap's own reading
/// of that one flag, with every other argument (required ones too) left for later.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    Config::command()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok()?
        .get_one::<PathBuf>("config")
        .cloned()
}

/// A TOML settings file as flags, leaving out each setting whose environment variable is set
/// (the variable wins). Unknown names are an error: a typo must not pass silently.
fn file_args(text: &str) -> Result<Vec<OsString>, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let command = Config::command();
    let mut flags = Vec::new();
    for (name, value) in table {
        let long = name.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .ok_or_else(|| format!("unknown setting `{name}` (see tenured --help)"))?;
        if arg
            .get_env()
            .is_some_and(|env| std::env::var_os(env).is_some())
        {
            continue;
        }
        let text = match value {
            toml::Value::String(text) => text,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(true) => {
                flags.push(format!("--{long}").into());
                continue;
            }
            toml::Value::Boolean(false) => continue,
            // `[peers]` with `1 = "HOST:PORT"` lines.
            toml::Value::Table(entries) if long == "peers" => entries
                .iter()
                .map(|(id, addr)| match addr {
                    toml::Value::String(addr) => Ok(format!("{id}={addr}")),
                    other => Err(format!("peer {id}: expected \"HOST:PORT\", got {other}")),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            other => return Err(format!("`{name}`: unsupported value {other}")),
        };
        flags.push(format!("--{long}={text}").into());
    }
    Ok(flags)
}

/// A metrics or gateway address: `HOST:PORT`, or a bare port on loopback.
fn parse_metrics_listen(text: &str) -> Result<String, String> {
    let text = text.trim().trim_start_matches(':');
    Ok(match text.parse::<u16>() {
        Ok(port) => format!("127.0.0.1:{port}"),
        Err(_) => text.to_string(),
    })
}

/// Parses `ID=HOST:PORT,…`.
pub fn parse_peers(text: &str) -> Result<Peers, String> {
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
    /// The configuration of this process: its flags, environment and `--config` file.
    /// `--help`, `--version` and a bad command line end the process here, as clap does.
    pub fn load() -> anyhow::Result<Config> {
        Self::load_from(std::env::args_os()).map_err(|e| match e.downcast::<clap::Error>() {
            Ok(usage) => usage.exit(),
            Err(other) => other,
        })
    }

    /// The configuration of command line `args` (program name first), with the environment,
    /// and the `--config` file (named in `args` or by `TENURED_CONFIG`).
    pub fn load_from<I, T>(args: I) -> anyhow::Result<Config>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let Some(path) = config_path(&args) else {
            return Ok(Config::try_parse_from(args)?);
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading --config {}: {e}", path.display()))?;
        let file =
            file_args(&text).map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))?;
        // The file's settings come first, so that the command line's own flags override them.
        let mut merged = args[..1.min(args.len())].to_vec();
        merged.extend(file);
        merged.extend(args.into_iter().skip(1));
        Ok(Config::try_parse_from(merged)?)
    }

    /// Checks what clap cannot: this node in its peer list, sane Raft timing.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.worker_threads != Some(0),
            "--worker-threads must be at least 1"
        );
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
        self.check_exposure()?;
        self.limits.validate()
    }

    /// Refuses what would leave this node open to a network: a non-loopback address with
    /// auth off (unless `--insecure`), or the peer token in clear to a non-loopback peer
    /// (unless `--insecure-transport`).
    fn check_exposure(&self) -> anyhow::Result<()> {
        if let Some(http) = self.http_listen.as_deref() {
            let open = !tenure_proto::is_loopback(http);
            anyhow::ensure!(
                !open || self.token_file.is_some() || self.insecure,
                "refusing to serve the HTTP gateway on {http} without auth: anyone who reaches \
                 it could make every admin call. Add --token-file FILE, bind it to loopback \
                 (e.g. --http-listen 8080), or pass --insecure to run open on purpose"
            );
            anyhow::ensure!(
                !open
                    || self.token_file.is_none()
                    || self.tls_cert.is_some()
                    || self.insecure_transport,
                "refusing to take bearer tokens in clear on {http}: anyone on the path could \
                 read them and call as their owners. Add --tls-cert, --tls-key and --tls-ca \
                 (the gateway then speaks HTTPS), or pass --insecure-transport"
            );
        }
        let exposed = std::iter::once(self.listen.as_str())
            .chain(self.peers.values().map(String::as_str))
            .find(|addr| !tenure_proto::is_loopback(addr));
        if let Some(metrics) = &self.metrics_listen {
            anyhow::ensure!(
                tenure_proto::is_loopback(metrics) || self.tls_cert.is_some() || self.insecure,
                "refusing to serve metrics on {metrics} in plain HTTP: anyone who reaches it \
                 reads the cluster's state. Bind it to loopback (e.g. --metrics-listen 9101), \
                 turn TLS on (--tls-cert, --tls-key, --tls-ca: metrics are then served over \
                 TLS), or pass --insecure"
            );
        }
        let Some(exposed) = exposed else {
            return Ok(());
        };
        if self.token_file.is_none() {
            anyhow::ensure!(
                self.insecure,
                "refusing to serve {exposed} without auth: anyone who reaches it could call \
                 the internal Raft service and every admin call. Add --token-file FILE \
                 (`TOKEN PRINCIPAL ROLE` per line, mode 0600; docs/operations.md, \
                 \"Secure a cluster\"), or pass --insecure to run open on purpose"
            );
        } else if self.tls_cert.is_none() {
            anyhow::ensure!(
                self.insecure_transport,
                "refusing to send the peer token in clear to {exposed}: anyone on the path \
                 could act as a node. Add --tls-cert, --tls-key and --tls-ca \
                 (docs/operations.md, \"Secure a cluster\"), or pass --insecure-transport"
            );
        }
        Ok(())
    }

    /// Whether this node was told to break linearizable reads (fault-injection builds only).
    pub fn breaks_linearizable_reads(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.fi_stale_reads;
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// Whether this node was told to skip the log's fdatasync (fault-injection builds only).
    pub fn skips_log_sync(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.fi_ack_before_sync;
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// Whether this node was told to propose ungated commands (fault-injection builds only).
    pub fn ungated(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.fi_ungated;
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

#[cfg(test)]
mod tests;
