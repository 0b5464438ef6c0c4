//! Fencing where the data lives (docs/fencing.md). A fencing token protects nothing unless
//! the store that keeps the data checks it in the same step as the write: a holder that
//! paused past its lease, or lost it in a partition, still believes it holds it, and only the
//! store can tell that a later tenure has already written.
//!
//! [`postgres`] does that in PostgreSQL: one row per resource in `tenure_fence` keeps the
//! highest tokens exclusive and shared writers have written with, and [`postgres::guard`]
//! checks and advances them inside the caller's transaction, holding the row's lock until
//! that transaction ends. The caller's statements then commit with the check, or not at all.
//!
//! ```no_run
//! # async fn run(client: &mut tokio_postgres::Client, token: u64) -> Result<(), tenure_guard::postgres::Error> {
//! use tenure_guard::postgres::{guard, Mode};
//! let txn = client.transaction().await?;
//! guard(&txn, "billing/ledger", token, Mode::Exclusive).await?; // refused: Error::Stale
//! txn.execute("UPDATE ledger SET total = total + 10 WHERE id = 1", &[]).await?;
//! txn.commit().await?;
//! # Ok(()) }
//! ```

pub mod postgres;
