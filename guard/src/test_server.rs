//! A throwaway PostgreSQL server for tests of guarded writes (this crate's, the guide's, the
//! fault harness's register, and yours): `pg-server.sh` beside this crate's manifest starts a
//! cluster of its own in a temporary directory under /tmp, listening only on a Unix socket
//! there, superuser `tenure`, trust auth, no fsync. It is stopped, and its directory removed,
//! when the [`TestServer`] is dropped.
//!
//! Debian's `postgresql` package provides the server; run as root, the script runs it as the
//! package's `postgres` user.

use std::process::Command;

/// guard/pg-server.sh, which the Python and Node.js tests' script also runs.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pg-server.sh");

/// Why no server started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No PostgreSQL server is installed here (the script exits 2).
    #[error("no PostgreSQL server installed: {0}")]
    NotInstalled(String),
    #[error("starting PostgreSQL: {0}")]
    Failed(String),
}

/// One running server.
pub struct TestServer {
    dir: tempfile::TempDir,
    conn: String,
}

impl TestServer {
    pub fn start() -> Result<Self, StartError> {
        let failed = |e: std::io::Error| StartError::Failed(e.to_string());
        // In /tmp: the socket's path must fit in 107 bytes, whatever TMPDIR is.
        let dir = tempfile::Builder::new()
            .prefix("tenure-pg.")
            .tempdir_in("/tmp")
            .map_err(failed)?;
        let out = Command::new(SCRIPT)
            .arg("start")
            .arg(dir.path())
            .output()
            .map_err(failed)?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        match out.status.code() {
            Some(0) => Ok(TestServer {
                dir,
                conn: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            }),
            Some(2) => Err(StartError::NotInstalled(stderr)),
            _ => Err(StartError::Failed(stderr)),
        }
    }

    /// A server, or `None` with a note on stderr where none is installed, unless
    /// `TENURE_REQUIRE_POSTGRES` is set (`.ci/run` sets it): then, as on any other failure,
    /// a panic.
    pub fn for_test(test: &str) -> Option<Self> {
        match TestServer::start() {
            Ok(server) => Some(server),
            Err(StartError::NotInstalled(why))
                if std::env::var_os("TENURE_REQUIRE_POSTGRES").is_none() =>
            {
                eprintln!("note: skipping {test}: {why}");
                None
            }
            Err(e) => panic!("{test}: {e}"),
        }
    }

    /// Its libpq connection string: `host=DIR user=tenure dbname=postgres`.
    pub fn conn(&self) -> &str {
        &self.conn
    }

    /// Its log, `server.log`.
    pub fn log(&self) -> std::path::PathBuf {
        self.dir.path().join("server.log")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // No panic here: a failed stop while a test unwinds must not abort the run.
        let stopped = Command::new(SCRIPT)
            .arg("stop")
            .arg(self.dir.path())
            .output();
        if !stopped.is_ok_and(|out| out.status.success()) {
            eprintln!("{SCRIPT} stop {} failed", self.dir.path().display());
        }
    }
}
