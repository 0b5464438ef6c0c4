//! The command line of `tenure-jepsen` (a module of the binary, not of the library): its
//! subcommands and their flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tenure-jepsen",
    version,
    about = "Fault-injection tests for Tenure (runs as root)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Start a cluster on network-namespace hosts, run clients and faults, check the history.
    Test {
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        time_limit: Duration,
        /// Comma-separated: partition, kill, pause, clock, loss, member, power, upgrade (empty:
        /// none). `power` puts each node's data directory on a FUSE filesystem that forgets
        /// what was not synced, and cuts the power of one node, a minority or all at once.
        /// `upgrade` starts the nodes on the release before this build and swaps them one at
        /// a time to this build and back, then finishes the upgrade and the rules' raise.
        #[arg(long, default_value = "partition,kill,pause,clock,loss,member")]
        nemesis: String,
        /// What a power cut keeps of the writes not synced, one drawn per cut: drop (nothing),
        /// tear (a prefix of each file's, the last torn at a 512-byte boundary), reorder (any
        /// subset).
        #[arg(long, default_value = "drop,tear,reorder")]
        power_modes: String,
        /// Seed of the fault schedule and the clients' choices (default: random, printed).
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 12)]
        clients: u64,
        /// Ad-hoc exclusive resources (workload `exclusive`).
        #[arg(long, default_value_t = 8)]
        resources: u64,
        /// Comma-separated resource kinds the clients use: exclusive (ad-hoc r0…), shared
        /// (READ/WRITE with a unit pool, s0…), transfer (transferable, x0…), waiting (acquired
        /// with on_conflict=WAIT, w0…), many (two or three at a time with one waiting
        /// AcquireMany, m0…), sessions (leases on sessions, e0…); and, not in the default,
        /// fenced (exclusive f0… whose holders write to a register in a PostgreSQL the run
        /// starts, through the guard; the register's record is checked to hold the writes in
        /// token order).
        #[arg(
            long,
            default_value = "exclusive,shared,transfer,waiting,many,sessions"
        )]
        workload: String,
        /// Tasks that keep Watch streams open (every resource, one kind's prefix, one
        /// resource, in turn) and whose events are checked against the cluster's history.
        #[arg(long, default_value_t = 3)]
        watchers: u64,
        /// Where history.jsonl, summary.json, report.html and node logs go.
        #[arg(long)]
        out: Option<PathBuf>,
        /// A run with fewer checked grants fails.
        #[arg(long, default_value_t = 200)]
        min_grants: usize,
        /// A run with fewer leader changes fails.
        #[arg(long, default_value_t = 1)]
        min_leader_changes: usize,
        /// A run with fewer waits admitted from the waiting room fails.
        #[arg(long, default_value_t = 0)]
        min_admissions: usize,
        /// A run with fewer power cuts of a majority of the nodes at once fails.
        #[arg(long, default_value_t = 0)]
        min_majority_power_cuts: usize,
        /// Largest clock-rate change the clock nemesis injects (0.02 = 2 %).
        #[arg(long, default_value_t = 0.02)]
        clock_epsilon: f64,
        /// Deliberately broken node: `stale-reads` serves linearizable reads from local state;
        /// `fsync-lies` acknowledges log appends without syncing them; `ungated` (with the
        /// `upgrade` nemesis) proposes commands before the cluster's rules allow them;
        /// `unguarded-writes` (with the `fenced` workload) is not a node: its clients write to
        /// the register without the guard.
        #[arg(long)]
        broken: Option<String>,
        /// The release before's tenured for the `upgrade` nemesis (default: built from the
        /// commit CHANGELOG.md names, in a git worktree, into target/releases/).
        #[arg(long, env = "TENURED_OLD_BIN")]
        old_bin: Option<PathBuf>,
        /// With the `upgrade` nemesis: one rolling upgrade (every node onto this build, one at
        /// a time with the leader last, from a quarter of the run on) instead of swaps both
        /// ways; the run fails if any client call fails but for refusals of rules not reached
        /// yet, or if no call that needs the raised rules is served.
        #[arg(long)]
        rolling_upgrade: bool,
        /// Clients hold their leases without stalls past their ttl, without transfers and
        /// without leaving any to expire, with ttls of 6 to 8 s: lock cycles in which every
        /// call should succeed.
        #[arg(long)]
        calm: bool,
        /// The tenured binary (default: next to this one; needs feature fault-injection).
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
        /// Auth and TLS on, as in production: a token file, a cluster CA and node
        /// certificates made for the run; the workload's clients use TLS and a client
        /// token whose principal has small quotas (leases, waiters), and the checker judges
        /// every quota refusal; setup, nemeses and watchers use an admin token.
        #[arg(long)]
        secure: bool,
    },
    /// Check a saved history again and write its report next to it.
    Check {
        history: PathBuf,
        #[arg(long)]
        clock_epsilon: Option<f64>,
    },
    /// Remove namespaces, links and processes left by a run that was killed.
    Teardown,
    /// Build (once) the release before this build's `tenured`, from the commit CHANGELOG.md
    /// names, in a git worktree under target/releases/, and print its path.
    PreviousRelease {
        /// This build's tenured (default: next to this binary): its target directory and
        /// profile are used.
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
    },
    /// HTTP/2 and connection abuse against a local three-node Tenure cluster (loopback, auth
    /// on) beside honest lock cycles: rapid reset, idle streams and connections, Watch
    /// streams never read, waits rejoined, writes a quota refuses. Prints a Markdown table;
    /// exit 1 if an attack cost the honest clients more than 20 % of their quiet throughput
    /// or a node more than twice its quiet memory or its descriptor bound.
    Abuse {
        /// Length of each phase (quiet baseline, then each attack).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        phase: Duration,
        /// Honest clients running lock cycles throughout.
        #[arg(long, default_value_t = 16)]
        honest: usize,
        /// Connections the rapid-reset attack uses at once.
        #[arg(long, default_value_t = 4)]
        reset_connections: usize,
        /// Calls the idle-streams attack opens without sending their bodies.
        #[arg(long, default_value_t = 10_000)]
        idle_streams: usize,
        /// Watch streams over every resource that the slow-watch attack never reads.
        #[arg(long, default_value_t = 4)]
        slow_watchers: usize,
        /// Silent connections the idle-connections attack keeps open to node 1 (and the
        /// idle-gateway attack to its gateway), from 64 loopback addresses.
        #[arg(long, default_value_t = 16_000)]
        idle_connections: usize,
        /// WAIT acquires of one held resource by one holder that the rejoin attack sends.
        #[arg(long, default_value_t = 10_000)]
        rejoins: usize,
        /// Report the figures without failing on a missed target (short smoke runs).
        #[arg(long)]
        report_only: bool,
        /// Run the nodes with auth off (`--insecure`, no token file): every caller is
        /// `anonymous`, the tokens the clients send are not looked at.
        #[arg(long)]
        auth_off: bool,
        /// Comma-separated attacks to run, each followed by a quiet phase (default: every
        /// HTTP/2 and connection attack: rapid-reset, rapid-reset-auth, idle-streams,
        /// slow-watch, rejoin, idle-connections, idle-gateway, health-watch, quota-flood).
        #[arg(long, default_value = "")]
        attacks: String,
        /// A flag for every tenured, e.g. `--tenured-arg=--max-in-flight=1000` (repeatable).
        #[arg(long = "tenured-arg", allow_hyphen_values = true)]
        tenured_args: Vec<String>,
        /// Where abuse.md, abuse.json and the node logs go (default abuse-runs/<unix time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The tenured binary (default: next to this one; build it with --release).
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
    },
    /// Benchmark a local three-node Tenure cluster side by side with a local three-node etcd
    /// cluster (loopback, no root needed) and print a Markdown table with ratios.
    Bench {
        /// Comma-separated: tenure, etcd (etcd needs the `etcd` feature; see jepsen/bench.sh),
        /// tenure-http (Tenure through its HTTP/JSON gateway: acquire and read only).
        #[arg(long, default_value = "tenure,etcd")]
        systems: String,
        /// Comma-separated: acquire, lock, contended, handoff, renew, read, failover; renew-unary
        /// (Tenure only); and `noisy` (Tenure
        /// only, not in the default): 16 honest principals running lock cycles beside one
        /// noisy neighbour that attacks within its quotas, in turn, each attack `--duration`
        /// long between quiet phases (see docs/benchmarks.md).
        #[arg(
            long,
            default_value = "acquire,lock,contended,handoff,renew,read,failover"
        )]
        workloads: String,
        /// Comma-separated client counts for every workload but `acquire` (1 client) and
        /// `handoff` (1 pair).
        #[arg(long, default_value = "1,16,64")]
        clients: String,
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        warmup: Duration,
        /// Measured time of each cell.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Leader kills in the failover workload.
        #[arg(long, default_value_t = 5)]
        kills: usize,
        /// Clients running lock cycles while the leader is killed.
        #[arg(long, default_value_t = 16)]
        failover_clients: usize,
        /// Comma-separated active-lease counts for the Tenure scale run, e.g.
        /// 1000,100000,1000000 (empty: none).
        #[arg(long, default_value = "")]
        scale: String,
        /// After each scale size's load, wait until this long after the load ended, renew
        /// for a while (entries that let the leader forget the load's exactly-once records)
        /// and read each node's RSS again, e.g. `--scale-hold 11m`: the memory of a node that
        /// holds the leases once its load is older than the 10-minute window (0: not done).
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        scale_hold: Duration,
        /// Sessions for the Tenure sessions run (0: none): that many sessions, each holding
        /// --session-leases leases, kept alive for --session-hold; then the leader's CPU, RSS
        /// per node, and expiry-to-reclaim times of 100 sessions left to expire.
        #[arg(long, default_value_t = 0)]
        sessions: usize,
        #[arg(long, default_value_t = 100)]
        session_leases: usize,
        /// Each session's ttl; it is renewed every ttl/3.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        session_ttl: Duration,
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        session_hold: Duration,
        /// Where results.md and results.json go (default bench-runs/<unix time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The tenured binary (default: next to this one; build it with --release).
        #[arg(long, env = "TENURED_BIN")]
        bin: Option<PathBuf>,
        /// A flag for every tenured, e.g. `--tenured-arg=--election-min=150ms` (repeatable).
        #[arg(long = "tenured-arg", allow_hyphen_values = true)]
        tenured_args: Vec<String>,
    },
}
