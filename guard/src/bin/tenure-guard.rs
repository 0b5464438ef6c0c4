//! `tenure-guard`: guarded writes from a shell (docs/fencing.md). `pg-write` runs SQL in one
//! PostgreSQL transaction behind the fencing check of `tenure_guard::postgres`, `dir-write`
//! writes a file into a directory behind `tenure_guard::dir`'s; a refused write exits 3 and
//! names both tokens, and nothing of it is applied.
//!
//! ```text
//! tenure-guard pg-init --url "host=/run/postgresql dbname=app"
//! tenure-guard pg-write --url "…" --resource billing/ledger --token 1207 \
//!     "UPDATE ledger SET total = total + 10 WHERE id = 1"
//! tenure-guard pg-highest --url "…" --resource billing/ledger
//! tenure-guard dir-write --dir /srv/reports --resource reports/daily --token 1207 daily.csv < daily.csv
//! ```
//!
//! A write that commits prints `committed: RESOURCE (fencing token N)`.

use std::io::Read;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tenure_guard::postgres::{create_table, guard, highest, Error, Mode};

#[derive(Parser)]
#[command(
    version,
    about = "Guarded writes: SQL that commits, or a file that lands, only with a current fencing token"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the `tenure_fence` table if it is missing.
    #[command(name = "pg-init")]
    Init {
        #[command(flatten)]
        db: Db,
    },
    /// Run SQL behind the guard: committed if the token is current, else rolled back (exit 3).
    #[command(name = "pg-write")]
    Write {
        #[command(flatten)]
        db: Db,
        #[command(flatten)]
        lease: Lease,
        /// Wait this long before the write (`2s`, `500ms`): the work a holder does between
        /// reading its token and writing what came of it. A demonstration pauses a holder
        /// there (SIGSTOP) past its ttl, as a GC pause or a stopped VM would.
        #[arg(long, value_parser = humantime::parse_duration)]
        delay: Option<std::time::Duration>,
        /// The statements, run in the guarded transaction (several may be given, `;`-separated;
        /// none may end the transaction: a `COMMIT` in them is refused as an error, but what
        /// ran after it was not guarded).
        sql: String,
    },
    /// Write a file into a directory behind the guard (its contents from stdin): renamed into
    /// place if the token is current, else nothing written (exit 3).
    #[command(name = "dir-write")]
    DirWrite {
        /// The guarded directory (the tokens live in its `.tenure-fence/`).
        #[arg(long)]
        dir: std::path::PathBuf,
        #[command(flatten)]
        lease: Lease,
        /// The file's name in the directory.
        name: String,
    },
    /// Print the highest token any writer has written the resource with in the directory.
    #[command(name = "dir-highest")]
    DirHighest {
        #[arg(long)]
        dir: std::path::PathBuf,
        #[arg(long)]
        resource: String,
    },
    /// Print the highest token any writer has written the resource with (0: none).
    #[command(name = "pg-highest")]
    Highest {
        #[command(flatten)]
        db: Db,
        /// The resource.
        #[arg(long)]
        resource: String,
    },
}

/// A setting local to the guarded transaction, and the query that reads it back: gone if the
/// caller's SQL ended the transaction.
const OPEN: &str = "tenure_guard.open";
const STILL_OPEN: &str = "SELECT current_setting('tenure_guard.open', true)";

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Guard(#[from] Error),
    #[error("the SQL ended the guarded transaction (COMMIT or ROLLBACK in it): what ran after that was not guarded")]
    Ended,
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::Guard(error.into())
    }
}

/// The lease a guarded write is made under.
#[derive(clap::Args)]
struct Lease {
    /// The resource the lease is on.
    #[arg(long)]
    resource: String,
    /// The lease's fencing token.
    #[arg(long)]
    token: u64,
    /// The lease is held in a shared mode (`READ`, `WRITE`): checked against exclusive
    /// writers' tokens only, and recorded for the exclusive writers after it.
    #[arg(long)]
    shared: bool,
}

impl Lease {
    fn mode(&self) -> Mode {
        if self.shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        }
    }
}

#[derive(clap::Args)]
struct Db {
    /// A libpq connection string (`host=… user=… dbname=…`) or URL (`postgresql://…`).
    #[arg(long, env = "TENURE_GUARD_PG")]
    url: String,
}

impl Db {
    async fn connect(&self) -> Result<tokio_postgres::Client, Failure> {
        let (client, connection) =
            tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                eprintln!("tenure-guard: connection: {error}");
            }
        });
        Ok(client)
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Init { db } => Ok(create_table(&db.connect().await?).await?),
        Command::Write {
            db,
            lease,
            delay,
            sql,
        } => {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            let mut client = db.connect().await?;
            let txn = client.transaction().await?;
            guard(&txn, &lease.resource, lease.token, lease.mode()).await?;
            // A setting local to this transaction: gone if the SQL ended it.
            txn.batch_execute(&format!("SET LOCAL {OPEN} = 'yes'"))
                .await?;
            txn.batch_execute(&sql).await?;
            let open: Option<String> = txn.query_one(STILL_OPEN, &[]).await?.get(0);
            if open.as_deref() != Some("yes") {
                return Err(Failure::Ended);
            }
            txn.commit().await?;
            println!(
                "committed: {} (fencing token {})",
                lease.resource, lease.token
            );
            Ok(())
        }
        Command::Highest { db, resource } => {
            println!("{}", highest(&db.connect().await?, &resource).await?);
            Ok(())
        }
        Command::DirWrite { dir, lease, name } => {
            let mut contents = Vec::new();
            std::io::stdin()
                .read_to_end(&mut contents)
                .map_err(Error::from)?;
            let (resource, token) = (&lease.resource, lease.token);
            tenure_guard::dir::write(&dir, resource, token, lease.mode(), &name, &contents)?;
            println!("written: {name} ({resource}, fencing token {token})");
            Ok(())
        }
        Command::DirHighest { dir, resource } => {
            println!("{}", tenure_guard::dir::highest(&dir, &resource)?);
            Ok(())
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tenure-guard: {error}");
            match error {
                Failure::Guard(Error::Stale { .. }) => ExitCode::from(3),
                Failure::Guard(Error::Token(_) | Error::Name(_)) => ExitCode::from(2),
                Failure::Guard(Error::Postgres(_) | Error::Io(_)) | Failure::Ended => {
                    ExitCode::FAILURE
                }
            }
        }
    }
}
