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
//! [`dir`] does the same for files in a plain directory: a token file per resource under an
//! OS lock, and the data written to a temporary file renamed into place only if the token
//! passes. [`test_server`] starts a throwaway PostgreSQL for tests of guarded code.
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

pub mod dir;
pub mod http;
pub mod postgres;
pub mod test_server;

/// How the writer holds its lease (its `mode` in Tenure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The one holder of the resource: checked against every token written so far, and its
    /// token becomes the exclusive one.
    Exclusive,
    /// A co-holder in a shared mode (`READ`, `WRITE`): checked against the exclusive token,
    /// and raises the shared one (which only exclusive writers are checked against).
    Shared,
}

/// Why a guarded write did not go through.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A later tenure has already written: the caller's lease is gone, whatever it believes.
    /// Nothing of its write was applied (a transaction must be rolled back: dropping it does).
    #[error(
        "stale fencing token for {resource:?}: the store has seen {highest}, this write carries {got}"
    )]
    Stale {
        /// The guarded resource.
        resource: String,
        /// The token that fenced it out: for an exclusive writer the highest any writer has
        /// written with, for a shared one the highest an exclusive writer has.
        highest: u64,
        /// The refused write's token.
        got: u64,
    },
    /// Not a token Tenure grants (they start at 1 and fit in a `bigint`).
    #[error("fencing token {0} is out of range (1 to 9223372036854775807)")]
    Token(u64),
    /// A name the directory guard does not write (see [`dir::write`]).
    #[error("{0}")]
    Name(String),
    /// The database's own error.
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
    /// The file system's.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The highest tokens a store has seen writes of one resource with, and the rule that admits
/// a write (spec §1, "fencing token"): an exclusive writer must be at or above both, a shared
/// one at or above the exclusive one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fence {
    pub(crate) exclusive: u64,
    pub(crate) shared: u64,
}

impl Fence {
    /// Records a write of `token` in `mode`, or returns the token that fences it out.
    pub(crate) fn admit(&mut self, token: u64, mode: Mode) -> Result<(), u64> {
        match mode {
            Mode::Exclusive => {
                let highest = self.exclusive.max(self.shared);
                if token < highest {
                    return Err(highest);
                }
                self.exclusive = token;
            }
            Mode::Shared => {
                if token < self.exclusive {
                    return Err(self.exclusive);
                }
                self.shared = self.shared.max(token);
            }
        }
        Ok(())
    }

    /// The lowest token an exclusive writer still passes with.
    pub(crate) fn highest(&self) -> u64 {
        self.exclusive.max(self.shared)
    }
}

/// `token` as a `bigint`, if Tenure could have granted it: from 1 to `i64::MAX`.
pub(crate) fn valid_token(token: u64) -> Result<i64, Error> {
    match i64::try_from(token) {
        Ok(t) if t > 0 => Ok(t),
        _ => Err(Error::Token(token)),
    }
}
