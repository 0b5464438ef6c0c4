//! The PostgreSQL guard (docs/fencing.md, "PostgreSQL"): a table of one row per resource,
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS tenure_fence (
//!     resource text PRIMARY KEY,
//!     token bigint NOT NULL CHECK (token >= 0),
//!     shared bigint NOT NULL DEFAULT 0 CHECK (shared >= 0)
//! );
//! ```
//!
//! `token` the highest token an exclusive writer has written with, `shared` the highest a
//! shared-mode writer has, and a check made in the caller's transaction before its own
//! statements (spec §1, "fencing token"):
//! - **exclusive** writer with token `t`: accepted if `t` is at least both, and `token`
//!   becomes `t`. One statement, `INSERT … ON CONFLICT (resource) DO UPDATE SET token = t
//!   WHERE token <= t AND shared <= t`, which locks the row whether or not it updates it.
//! - **shared** writer (a co-holder in `READ` or `WRITE` mode) with token `t`: accepted if `t`
//!   is at least `token`, and `shared` rises to `t`. Co-holders' tokens are not ordered
//!   against each other, so one is never refused for another's; but an exclusive writer
//!   whose tenure ended before theirs began is. The first writer of each shared token raises
//!   `shared`, holding the row until it commits; writers of a token already recorded only
//!   lock the row `FOR SHARE`, and write side by side.
//!
//! Either way the row stays locked until the transaction ends, so a writer with a lower token
//! that comes after waits, then sees the higher token and is refused: the check and the write
//! are one step. Under `READ COMMITTED` (PostgreSQL's default) that is all; under `REPEATABLE
//! READ` or `SERIALIZABLE` a writer that raced a newer one fails with a serialization error
//! (SQLSTATE 40001) instead, which refuses it as well. Guard a resource once per transaction,
//! and several resources in one order (sorted by name), or two writers can deadlock
//! (PostgreSQL ends one of them with SQLSTATE 40P01).

use tokio_postgres::{GenericClient, Transaction};

pub use crate::{Error, Mode};

/// The table the guard keeps its tokens in, created if missing by [`create_table`].
pub const TABLE: &str = "CREATE TABLE IF NOT EXISTS tenure_fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL CHECK (token >= 0),
    shared bigint NOT NULL DEFAULT 0 CHECK (shared >= 0)
)";

/// An exclusive writer's check: advance `token` to `$2` unless a higher token has written,
/// and lock the row; returns a row only if `$2` passed.
const EXCLUSIVE: &str = "INSERT INTO tenure_fence AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token AND f.shared <= EXCLUDED.token
RETURNING token";

/// A shared writer's first try: the resource's row, new, with `$2` as its shared token.
const SHARED_NEW: &str = "INSERT INTO tenure_fence (resource, token, shared) VALUES ($1, 0, $2)
ON CONFLICT (resource) DO NOTHING RETURNING token";

/// A shared writer's second: raise `shared` to `$2`, if it is lower and `$2` passes.
const SHARED_RAISE: &str = "UPDATE tenure_fence SET shared = $2
WHERE resource = $1 AND shared < $2 AND token <= $2 RETURNING token";

/// A shared writer's last: `$2` already recorded; lock the row against exclusive writers.
const SHARED_LOCK: &str = "SELECT token FROM tenure_fence WHERE resource = $1 FOR SHARE";

/// The lowest token an exclusive writer would pass with.
const HIGHEST: &str = "SELECT GREATEST(token, shared) FROM tenure_fence WHERE resource = $1";

/// Creates `tenure_fence` if it is missing.
pub async fn create_table(client: &impl GenericClient) -> Result<(), tokio_postgres::Error> {
    client.execute(TABLE, &[]).await.map(drop)
}

/// Checks `token` for `resource` in `txn` before the caller's statements, as the module says.
/// On `Ok` the caller goes on and commits; on `Err` it must not commit (dropping `txn` rolls
/// it back, and nothing the guard did stays).
pub async fn guard(
    txn: &Transaction<'_>,
    resource: &str,
    token: u64,
    mode: Mode,
) -> Result<(), Error> {
    let wanted = crate::valid_token(token)?;
    let highest = match mode {
        Mode::Exclusive => {
            if txn
                .query_opt(EXCLUSIVE, &[&resource, &wanted])
                .await?
                .is_some()
            {
                return Ok(());
            }
            txn.query_one(HIGHEST, &[&resource]).await?.get::<_, i64>(0)
        }
        Mode::Shared => {
            let args: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&resource, &wanted];
            if txn.query_opt(SHARED_NEW, &args).await?.is_some()
                || txn.query_opt(SHARED_RAISE, &args).await?.is_some()
            {
                return Ok(());
            }
            // `shared` was already at least `wanted`, or `token` is above it.
            let fence: i64 = txn.query_one(SHARED_LOCK, &[&resource]).await?.get(0);
            if fence <= wanted {
                return Ok(());
            }
            fence
        }
    };
    Err(Error::Stale {
        resource: resource.to_owned(),
        highest: u64::try_from(highest).unwrap_or_default(),
        got: token,
    })
}

/// The highest token any writer has written `resource` with (0 if none has): the lowest an
/// exclusive writer still passes with.
pub async fn highest(client: &impl GenericClient, resource: &str) -> Result<u64, Error> {
    let row = client.query_opt(HIGHEST, &[&resource]).await?;
    let token = row.map(|r| r.get::<_, i64>(0)).unwrap_or_default();
    Ok(u64::try_from(token).unwrap_or_default())
}
