//! `tenure`: the command line for a Tenure cluster.
//!
//! Exit codes: 0 when the operation succeeded (granted, valid); 1 when it was answered but
//! not granted or not valid; 2 when it failed (the reason is printed).

mod bench;
mod bookings;
mod cluster;
mod elect;
mod leases;
mod listing;
mod output;
mod resources;
mod sessions;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tenure_client::{pb, Client, Error, DEFAULT_ENDPOINTS};

use output::Output;

#[derive(Parser)]
#[command(
    name = "tenure",
    version,
    about = "Leases with fencing tokens on a Tenure cluster"
)]
struct Cli {
    /// Comma-separated HOST:PORT list of cluster nodes.
    #[arg(long, global = true, env = "TENURE_ENDPOINTS", default_value = DEFAULT_ENDPOINTS)]
    endpoints: String,
    /// Bearer token sent with every call (prefer the environment: flags show in `ps`).
    /// Named --auth-token because --token is a lease's fencing token.
    #[arg(long, global = true, env = "TENURE_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// The cluster CA (PEM) to verify the nodes with: connect over TLS (`tenured --tls-ca`).
    #[arg(long, global = true, env = "TENURE_CA_CERT")]
    ca_cert: Option<std::path::PathBuf>,
    /// Send --auth-token in clear to endpoints off this machine (refused otherwise: use
    /// --ca-cert). For test clusters on private networks only.
    #[arg(long, global = true, env = "TENURE_INSECURE")]
    insecure: bool,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Deadline of each call, retries included.
    #[arg(long, global = true, default_value = "10s", allow_hyphen_values = true, value_parser = crate::duration)]
    timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire RESOURCE for a holder; prints the lease and its fencing token. With --wait,
    /// queue and block until granted or the wait ends.
    Acquire(leases::AcquireArgs),
    /// Acquire every RESOURCE for a holder in one step, all or none (one fencing token for
    /// all). With --wait, queue in every waiting room and block until all are granted at once.
    AcquireMany(leases::AcquireManyArgs),
    /// Take a holder out of RESOURCE's waiting room (exit 1 if it was not waiting).
    CancelWait(leases::CancelWaitArgs),
    /// Renew a lease: replaces its expiry with now + ttl.
    Renew(leases::RenewArgs),
    /// Release a lease at once.
    Release(leases::LeaseRef),
    /// Hand a lease to another holder: expiry kept, new fencing token, old one dead.
    Transfer(leases::TransferArgs),
    /// Is this fencing token (or lease id) the live tenure of RESOURCE?
    Validate(leases::ValidateArgs),
    /// Show RESOURCE: policy and active leases (the same as `resources get`).
    Status {
        resource: String,
        /// Read a node's local state instead of a linearizable read.
        #[arg(long)]
        stale: bool,
    },
    /// Register, show and list resources.
    Resources {
        #[command(subcommand)]
        command: resources::ResourcesCommand,
    },
    /// The live leases of a holder or a principal, across resources.
    Leases(listing::LeasesArgs),
    /// Sessions: one heartbeat for many leases (`acquire --session`), all ended together.
    Session {
        #[command(subcommand)]
        command: sessions::SessionCommand,
    },
    /// The lifecycle events of RESOURCE, newest first unless --order asc.
    History(listing::HistoryArgs),
    /// Stream the events of RESOURCE (or of a --prefix): retained history, then live; resumes
    /// on another node from the last revision when one fails.
    Watch(watch::WatchArgs),
    /// Reserve a future window of RESOURCE for a holder: others' leases may not extend into it.
    Book(bookings::BookArgs),
    /// Cancel a holder's booking, named by its start.
    CancelBooking(bookings::CancelBookingArgs),
    /// Run a command only while leading KEY (like `consul lock`): campaign, run it with
    /// TENURE_FENCING_TOKEN set, kill it if leadership is lost, resign when it exits, exit
    /// with its code.
    Elect(elect::ElectArgs),
    /// Is each endpoint serving (grpc.health.v1: it knows a leader)? Exit 0 if all are, 1 if
    /// one is not, 2 if one did not answer. For container health checks.
    Health,
    /// Cluster administration.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Quotas per principal (admin): what one caller may hold at once.
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// Measure latency from this client: acquire and release (sequential, distinct
    /// resources), or with --handoff, release → blocked waiter granted.
    Bench(bench::BenchArgs),
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Every endpoint's view: role, term, leader, indexes, members, storage counters.
    Status,
    /// Add node ID at ADDR as a learner (start it first with `tenured --join`); waits until it
    /// has caught up unless --no-wait.
    Add {
        id: u64,
        /// HOST:PORT where the other members reach it.
        addr: String,
        /// Answer as soon as the learner is added.
        #[arg(long)]
        no_wait: bool,
    },
    /// Make learners voters (each once it has caught up).
    Promote {
        #[arg(required = true)]
        ids: Vec<u64>,
    },
    /// Take members (voters or learners) out of the cluster; the leader may remove itself.
    Remove {
        #[arg(required = true)]
        ids: Vec<u64>,
    },
    /// Hand leadership to voter ID (default: the most up-to-date other voter). Best effort;
    /// exits 1 if leadership did not move there.
    TransferLeader { id: Option<u64> },
    /// Build a snapshot now on every endpoint given.
    Snapshot {
        /// Also write it whole (history and exactly-once records included) to the node's
        /// DATA_DIR/backups/: the file to copy off as a backup, which `tenured restore` reads.
        #[arg(long)]
        backup: bool,
    },
}

#[derive(Subcommand)]
enum QuotaCommand {
    /// Set limits of PRINCIPAL, e.g. `tenure quota set alice leases=5000 watches=default`.
    /// Quotas: leases, ad_hoc_resources, waiters, bookings, metadata_bytes,
    /// exactly_once_bytes, watches, inboxes, all_resource_watches, sessions; `default` puts one back
    /// to the default.
    Set {
        principal: String,
        /// QUOTA=LIMIT or QUOTA=default.
        #[arg(required = true, value_name = "QUOTA=LIMIT")]
        limits: Vec<String>,
    },
    /// Set the limits of every principal without a limit of its own (`default` puts one back
    /// to the compiled default).
    SetDefault {
        /// QUOTA=LIMIT or QUOTA=default.
        #[arg(required = true, value_name = "QUOTA=LIMIT")]
        limits: Vec<String>,
    },
    /// The limits of PRINCIPAL (or the defaults) and what it holds.
    Get { principal: Option<String> },
}

/// A lease mode on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    Exclusive,
    Read,
    Write,
}

impl Mode {
    pub fn pb(self) -> pb::LeaseMode {
        match self {
            Mode::Exclusive => pb::LeaseMode::Exclusive,
            Mode::Read => pb::LeaseMode::Read,
            Mode::Write => pb::LeaseMode::Write,
        }
    }
}

/// A duration argument (`30s`, `1m 30s`, `2h`, `1day`). Such arguments take values that begin
/// with `-`, so `--ttl -5s` is answered by this rule rather than taken for an unknown flag.
pub fn duration(text: &str) -> Result<Duration, String> {
    if let Some(rest) = text.trim().strip_prefix('-') {
        return Err(format!(
            "a duration cannot be negative: write it as {rest} (units: ms, s, m, h, day)"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}: write a duration such as 500ms, 30s, 1m 30s, 2h or 1day"))
}

/// `--stale` → the read's consistency.
pub fn consistency(stale: bool) -> pb::Consistency {
    if stale {
        pb::Consistency::Stale
    } else {
        pb::Consistency::Linearizable
    }
}

impl Command {
    /// A call that answers at once when a node is up: no waiting room, stream, election,
    /// catch-up or benchmark. Only such a call says so when no node answers for a while.
    fn answers_at_once(&self) -> bool {
        match self {
            Command::Acquire(args) => args.terms.answers_at_once(),
            Command::AcquireMany(args) => args.terms.answers_at_once(),
            Command::Watch(_) | Command::Elect(_) | Command::Bench(_) => false,
            Command::Cluster { command } => matches!(command, ClusterCommand::Status),
            Command::Session { command } => command.answers_at_once(),
            _ => true,
        }
    }
}

/// How long a call that answers at once goes unanswered before the CLI says it is still trying.
const STILL_TRYING_AFTER: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let client = match connect(&cli) {
        Ok(client) => client,
        Err(e) => return output::fail(cli.output, &e),
    };
    let ran = run(&cli, &client);
    tokio::pin!(ran);
    let answered = if cli.command.answers_at_once() && cli.timeout > STILL_TRYING_AFTER {
        tokio::select! {
            answered = &mut ran => answered,
            () = tokio::time::sleep(STILL_TRYING_AFTER) => {
                // On stderr: scripts reading stdout see only the answer.
                eprintln!(
                    "tenure: no node has answered for {}s; trying {} until --timeout {}",
                    STILL_TRYING_AFTER.as_secs(),
                    cli.endpoints,
                    humantime::format_duration(cli.timeout),
                );
                ran.await
            }
        }
    } else if matches!(cli.command, Command::Elect(_)) {
        // Passes SIGINT and SIGTERM on to the command it runs.
        ran.await
    } else {
        // Runs until Ctrl-C (a watch, a wait, a bench): stop at SIGINT even when started with
        // it ignored (a background job of a script), dropping the call so that the node
        // ends the wait or the stream at once.
        tokio::select! {
            answered = &mut ran => answered,
            _ = tokio::signal::ctrl_c() => return ExitCode::from(130),
        }
    };
    match answered {
        Ok(code) => code,
        Err(e) => output::fail(cli.output, &e),
    }
}

fn connect(cli: &Cli) -> Result<Client, Error> {
    let client = match &cli.ca_cert {
        Some(path) => {
            let ca = std::fs::read(path)
                .map_err(|e| Error::Local(format!("reading --ca-cert {}: {e}", path.display())))?;
            Client::new_with_ca(cli.endpoints.split(','), &ca)?
        }
        None => Client::from_list(&cli.endpoints)?,
    }
    .with_timeout(cli.timeout);
    let client = if cli.insecure {
        client.insecure()
    } else {
        client
    };
    match cli.auth_token.as_deref() {
        Some(token) if !token.is_empty() => client.with_token(token),
        _ => Ok(client),
    }
}

async fn run(cli: &Cli, client: &Client) -> Result<ExitCode, Error> {
    let out = cli.output;
    match &cli.command {
        Command::Acquire(args) => leases::acquire(out, client, args).await,
        Command::AcquireMany(args) => leases::acquire_many(out, client, args).await,
        Command::CancelWait(args) => leases::cancel_wait(out, client, args).await,
        Command::Renew(args) => leases::renew(out, client, args).await,
        Command::Release(lease) => leases::release(out, client, lease).await,
        Command::Transfer(args) => leases::transfer(out, client, args).await,
        Command::Validate(args) => leases::validate(out, client, args).await,
        Command::Status { resource, stale } => resources::get(out, client, resource, *stale).await,
        Command::Resources { command } => resources::run(out, client, command).await,
        Command::Leases(args) => listing::leases(out, client, args).await,
        Command::Session { command } => sessions::run(out, client, command).await,
        Command::History(args) => listing::history(out, client, args).await,
        Command::Watch(args) => watch::watch(out, client, args).await,
        Command::Book(args) => bookings::book(out, client, args).await,
        Command::CancelBooking(args) => bookings::cancel_booking(out, client, args).await,
        Command::Elect(args) => elect::elect(client, args).await,
        Command::Health => cluster::health(out, client).await,
        Command::Cluster { command } => match command {
            ClusterCommand::Status => cluster::status(out, client).await,
            ClusterCommand::Add { id, addr, no_wait } => {
                cluster::add(out, client, *id, addr, !no_wait).await
            }
            ClusterCommand::Promote { ids } => {
                cluster::change(out, client, ids.clone(), Vec::new()).await
            }
            ClusterCommand::Remove { ids } => {
                cluster::change(out, client, Vec::new(), ids.clone()).await
            }
            ClusterCommand::TransferLeader { id } => {
                cluster::transfer_leader(out, client, id.unwrap_or(0)).await
            }
            ClusterCommand::Snapshot { backup } => cluster::snapshot(out, client, *backup).await,
        },
        Command::Quota { command } => match command {
            QuotaCommand::Set { principal, limits } => {
                cluster::set_quota(out, client, Some(principal), limits).await
            }
            QuotaCommand::SetDefault { limits } => {
                cluster::set_quota(out, client, None, limits).await
            }
            QuotaCommand::Get { principal } => {
                cluster::get_quota(out, client, principal.as_deref()).await
            }
        },
        Command::Bench(args) if args.handoff => {
            // One client per participant, each on its own connections.
            let clients = (0..=args.waiters)
                .map(|_| connect(cli))
                .collect::<Result<Vec<_>, _>>()?;
            bench::handoff(out, clients, args).await
        }
        Command::Bench(args) => bench::cycles(out, client, args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_or_malformed_duration_says_how_to_write_one() {
        for flag in ["--ttl -5s", "--ttl=-5s"] {
            let args = ["tenure", "acquire", "r", "--holder", "h"]
                .into_iter()
                .chain(flag.split(' '));
            let error = Cli::try_parse_from(args)
                .err()
                .expect("refused")
                .to_string();
            assert!(
                error.contains("cannot be negative: write it as 5s"),
                "{flag}: {error}"
            );
        }
        let error = duration("5 parsecs").expect_err("not a duration");
        assert!(error.contains("such as 500ms, 30s"), "{error}");
        assert_eq!(duration("1m 30s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
