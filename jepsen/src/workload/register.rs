//! The `fenced` workload's register: the data a lease protects, in a real PostgreSQL, written
//! through the guard (tenure-guard) as a service would write it. One row per resource holds
//! the register (its `version` counts the writes that took effect, in the order they did), and
//! every write leaves a line in a log with the version it made, its token and its op; the
//! checker reads that log after the run (`checker::register`).
//!
//! A write is one transaction: the guard's check of the token (refused: the transaction is
//! rolled back, nothing written), then, at times, a stall as long as a paused process's (the
//! row the guard locked stays locked), then the register's update and the log line. The planted
//! bug `--broken unguarded-writes` leaves the guard out: a holder that stalled past its ttl
//! then writes after the next tenure's writes, which the checker must catch.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tenure_guard::postgres::{self as guard, Mode};
use tenure_guard::test_server::TestServer;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

use super::{Env, Tenancy};
use crate::history::{Call, Outcome, RegisterWrite, Value};

const SCHEMA: &str = "
DROP TABLE IF EXISTS fenced_log, fenced_register;
CREATE TABLE fenced_register (
    resource text PRIMARY KEY,
    version bigint NOT NULL,
    token bigint NOT NULL,
    holder text NOT NULL
);
CREATE TABLE fenced_log (
    resource text NOT NULL,
    version bigint NOT NULL,
    token bigint NOT NULL,
    holder text NOT NULL,
    op bigint NOT NULL,
    PRIMARY KEY (resource, version)
);
TRUNCATE tenure_fence;";

/// A throwaway PostgreSQL server for one run (`tenure_guard::test_server`: Unix socket
/// only, in a directory under /tmp), stopped and removed when dropped.
pub struct PgServer(TestServer);

impl PgServer {
    pub fn start() -> anyhow::Result<Self> {
        let server = TestServer::start()
            .context("the `fenced` workload needs PostgreSQL (Debian's postgresql package)")?;
        Ok(PgServer(server))
    }

    /// Its libpq connection string.
    pub fn conn(&self) -> &str {
        self.0.conn()
    }

    /// Keeps the server's log beside the run's other logs.
    pub fn keep_log(&self, out_dir: &Path) {
        let _ = std::fs::copy(self.0.log(), out_dir.join("postgres.log"));
    }
}

/// The register and one connection per client.
pub struct Register {
    conns: Vec<Mutex<Client>>,
    guarded: bool,
}

async fn connect(conn: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(conn, NoTls)
        .await
        .with_context(|| format!("connecting to PostgreSQL ({conn})"))?;
    tokio::spawn(connection);
    Ok(client)
}

impl Register {
    /// Makes the tables afresh (the register at version 0 for each of `resources`) and opens
    /// a connection for each of `clients`.
    pub async fn open(
        conn: &str,
        clients: u64,
        resources: &[String],
        guarded: bool,
    ) -> anyhow::Result<Self> {
        let admin = connect(conn).await?;
        guard::create_table(&admin).await?;
        admin.batch_execute(SCHEMA).await?;
        for resource in resources {
            admin
                .execute(
                    "INSERT INTO fenced_register VALUES ($1, 0, 0, '')",
                    &[resource],
                )
                .await?;
        }
        let mut conns = vec![Mutex::new(admin)];
        for _ in 1..clients.max(1) {
            conns.push(Mutex::new(connect(conn).await?));
        }
        Ok(Register { conns, guarded })
    }

    /// One write of `token` by `holder` (op `op`), stalling `stall` inside its transaction
    /// (after the guard's check, before the write): its outcome. A failure before the commit
    /// rolled the transaction back (nothing written); a failed commit may have committed.
    async fn write(
        &self,
        process: u64,
        (resource, token, holder): (&str, u64, &str),
        op: u64,
        stall: Option<Duration>,
    ) -> Outcome {
        let failed = |error: String| Outcome::Fail {
            reason: format!("postgres: {error}"),
        };
        let mut conn = self.conns[process as usize % self.conns.len()].lock().await;
        let txn = match conn.transaction().await {
            Ok(txn) => txn,
            Err(e) => return failed(e.to_string()),
        };
        if self.guarded {
            match guard::guard(&txn, resource, token, Mode::Exclusive).await {
                Ok(()) => {}
                // Dropping the transaction rolls it back.
                Err(guard::Error::Stale { highest, .. }) => {
                    return Outcome::Ok {
                        value: Value::StoreRejected { highest },
                    }
                }
                Err(e) => return failed(e.to_string()),
            }
        }
        if let Some(stall) = stall {
            tokio::time::sleep(stall).await;
        }
        let (Ok(token), Ok(op)) = (i64::try_from(token), i64::try_from(op)) else {
            return failed(format!("token {token} or op {op} is not a bigint"));
        };
        let version = txn
            .query_one(
                "UPDATE fenced_register SET version = version + 1, token = $2, holder = $3
                 WHERE resource = $1 RETURNING version",
                &[&resource, &token, &holder],
            )
            .await;
        let version: i64 = match version {
            Ok(row) => row.get(0),
            Err(e) => return failed(e.to_string()),
        };
        let logged = txn
            .execute(
                "INSERT INTO fenced_log VALUES ($1, $2, $3, $4, $5)",
                &[&resource, &version, &token, &holder, &op],
            )
            .await;
        if let Err(e) = logged {
            return failed(e.to_string());
        }
        match txn.commit().await {
            Ok(()) => Outcome::Ok {
                value: Value::StoreAccepted,
            },
            Err(e) => Outcome::Unknown {
                error: format!("postgres commit: {e}"),
            },
        }
    }

    /// Every write the register took, by resource and version.
    pub async fn log(&self) -> anyhow::Result<Vec<RegisterWrite>> {
        let conn = self.conns[0].lock().await;
        let rows = conn
            .query(
                "SELECT resource, version, token, holder, op FROM fenced_log
                 ORDER BY resource, version",
                &[],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(RegisterWrite {
                    resource: row.try_get(0)?,
                    version: u64::try_from(row.try_get::<_, i64>(1)?)?,
                    token: u64::try_from(row.try_get::<_, i64>(2)?)?,
                    holder: row.try_get(3)?,
                    op: u64::try_from(row.try_get::<_, i64>(4)?)?,
                })
            })
            .collect()
    }
}

impl Env {
    /// A write with `lease`'s token to the register, recorded as a `register` write: accepted,
    /// refused by the guard (with the token it had seen), failed (PostgreSQL failed it before
    /// the commit), or unknown (the commit's answer was lost).
    pub async fn register_write(
        &self,
        process: u64,
        lease: &Tenancy,
        stall: Option<Duration>,
    ) -> Option<Value> {
        let register = self.register.as_ref()?;
        let call = Call::Write {
            resource: lease.resource.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            shared: false,
            register: true,
        };
        let pending = self.recorder.invoke(process, call);
        let id = pending.id();
        let target = (lease.resource.as_str(), lease.token, lease.holder.as_str());
        let outcome = register.write(process, target, id, stall).await;
        match self.recorder.complete(pending, outcome) {
            Outcome::Ok { value } => Some(value),
            _ => None,
        }
    }
}
