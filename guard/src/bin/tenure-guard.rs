//! `tenure-guard`: guarded writes from a shell (docs/fencing.md). `pg-write` runs SQL in one
//! PostgreSQL transaction behind the fencing check of `tenure_guard::postgres`; a refused
//! write exits 3 and names both tokens, and nothing of its SQL is applied.
//!
//! ```text
//! tenure-guard pg-init --url "host=/run/postgresql dbname=app"
//! tenure-guard pg-write --url "…" --resource billing/ledger --token 1207 \
//!     "UPDATE ledger SET total = total + 10 WHERE id = 1"
//! tenure-guard pg-highest --url "…" --resource billing/ledger
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tenure_guard::postgres::{create_table, guard, highest, Error, Mode};

#[derive(Parser)]
#[command(
    version,
    about = "Guarded writes: SQL that commits only with a current fencing token"
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
        /// The statements, run in the guarded transaction (several may be given, `;`-separated;
        /// none may end the transaction: a `COMMIT` in them is refused as an error, but what
        /// ran after it was not guarded).
        sql: String,
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
            resource,
            token,
            shared,
            sql,
        } => {
            let mut client = db.connect().await?;
            let txn = client.transaction().await?;
            let mode = if shared {
                Mode::Shared
            } else {
                Mode::Exclusive
            };
            guard(&txn, &resource, token, mode).await?;
            // A setting local to this transaction: gone if the SQL ended it.
            txn.batch_execute(&format!("SET LOCAL {OPEN} = 'yes'"))
                .await?;
            txn.batch_execute(&sql).await?;
            let open: Option<String> = txn.query_one(STILL_OPEN, &[]).await?.get(0);
            if open.as_deref() != Some("yes") {
                return Err(Failure::Ended);
            }
            Ok(txn.commit().await?)
        }
        Command::Highest { db, resource } => {
            println!("{}", highest(&db.connect().await?, &resource).await?);
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
                Failure::Guard(Error::Token(_)) => ExitCode::from(2),
                Failure::Guard(Error::Postgres(_)) | Failure::Ended => ExitCode::FAILURE,
            }
        }
    }
}
