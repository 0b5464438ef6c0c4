//! The one runner of the `tenure` CLI in the tests: the real binary, run as a script would
//! run it (endpoints in `TENURE_ENDPOINTS`, no `TENURE_TOKEN` from the environment), judged
//! by its exit code, its `--output json` and its text. A blocking verb runs as a child whose
//! output lines are awaited; a guard turns a hang into a failure.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout};

use crate::process::tenure_bin;

/// How long a run may go without the line or the exit a test waits for.
pub const GUARD: Duration = Duration::from_secs(60);

/// The CLI pointed at one cluster's endpoints, or at none.
#[derive(Clone, Default)]
pub struct Cli {
    /// `TENURE_ENDPOINTS`, comma-separated; `None` leaves it unset.
    pub endpoints: Option<String>,
    /// The working directory (`None`: the test's).
    dir: Option<std::path::PathBuf>,
    /// Variables set for the run, as a script's `NAME=value tenure …` would.
    env: Vec<(String, String)>,
    /// Another program to run in the same way (`curl`, for the guides' HTTP examples).
    program: Option<String>,
}

/// A finished run.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A run still going: its stdout read line by line, its stdin open until dropped (or taken).
pub struct Running {
    pub child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Cli {
    /// The CLI pointed at `addrs`.
    pub fn of<S: AsRef<str>>(addrs: impl IntoIterator<Item = S>) -> Cli {
        let addrs: Vec<String> = addrs.into_iter().map(|a| a.as_ref().to_string()).collect();
        Cli {
            endpoints: Some(addrs.join(",")),
            ..Cli::default()
        }
    }

    /// The CLI without endpoints in the environment (flags may give some).
    pub fn offline() -> Cli {
        Cli::default()
    }

    /// Runs in `dir` (where relative paths in arguments point).
    pub fn in_dir(mut self, dir: &std::path::Path) -> Cli {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Sets `name` to `value` in the run's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Cli {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Runs `program` (found on `PATH`) instead of `tenure`.
    pub fn running(mut self, program: &str) -> Cli {
        self.program = Some(program.into());
        self
    }

    /// `tenure ARGS`, running; stdin open (see [`Running::close_stdin`]).
    pub fn spawn_args<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Running {
        let mut command = match &self.program {
            Some(program) => tokio::process::Command::new(program),
            None => tokio::process::Command::new(tenure_bin()),
        };
        command
            .args(args)
            .env_remove("TENURE_TOKEN")
            .env_remove("TENURE_CA_CERT");
        match &self.endpoints {
            Some(endpoints) => command.env("TENURE_ENDPOINTS", endpoints),
            None => command.env_remove("TENURE_ENDPOINTS"),
        };
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.program.as_deref().unwrap_or("tenure")));
        let stdout = child.stdout.take().expect("stdout");
        Running {
            child,
            stdout: BufReader::new(stdout),
        }
    }

    /// `tenure LINE`, its words split at spaces, running.
    pub fn spawn(&self, line: &str) -> Running {
        self.spawn_args(&line.split_whitespace().collect::<Vec<_>>())
    }

    /// `tenure ARGS` with its stdin closed, run to its end.
    pub async fn run_args(&self, args: &[&str]) -> Ran {
        let mut running = self.spawn_args(args);
        running.close_stdin();
        running.finish().await
    }

    /// `tenure LINE`, its words split at spaces, run to its end.
    pub async fn run(&self, line: &str) -> Ran {
        self.run_args(&line.split_whitespace().collect::<Vec<_>>())
            .await
    }

    /// `tenure --output json ARGS`: the exit code and the one JSON value it printed.
    pub async fn json_args(&self, args: &[&str]) -> (Option<i32>, Value) {
        let ran = self.run_args(&[&["--output", "json"], args].concat()).await;
        (ran.code, ran.json())
    }

    /// `tenure --output json LINE`: the exit code and the one JSON value it printed.
    pub async fn json(&self, line: &str) -> (Option<i32>, Value) {
        self.json_args(&line.split_whitespace().collect::<Vec<_>>())
            .await
    }
}

impl Ran {
    /// Asserts the exit code, showing the output if it differs.
    #[track_caller]
    pub fn exits(self, code: i32) -> Ran {
        assert_eq!(
            self.code,
            Some(code),
            "stdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The one JSON value it printed.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("{e}\nstdout: {}\nstderr: {}", self.stdout, self.stderr))
    }
}

impl Running {
    /// Closes its stdin: what it reads from there ends.
    pub fn close_stdin(&mut self) {
        drop(self.child.stdin.take());
    }

    /// The next line of its stdout, without the newline.
    pub async fn line(&mut self) -> String {
        let line = self.next_line().await.expect("a line in time");
        line.expect("a line before the end of stdout")
    }

    /// The next line of its stdout, without the newline; `Ok(None)` at its end; `Err` when
    /// none came within [`GUARD`].
    pub async fn next_line(&mut self) -> Result<Option<String>, String> {
        let mut line = String::new();
        let read = tokio::time::timeout(GUARD, self.stdout.read_line(&mut line))
            .await
            .map_err(|_| format!("no line within {GUARD:?}"))?
            .expect("read stdout");
        if read == 0 {
            return Ok(None);
        }
        line.truncate(line.trim_end_matches(['\n', '\r']).len());
        Ok(Some(line))
    }

    /// Whether it has exited already, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("poll the child")
    }

    /// Sends it SIGINT, as Ctrl-C in a terminal would.
    pub fn interrupt(&self) {
        let pid = self.child.id().expect("a running child") as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        )
        .expect("SIGINT");
    }

    /// Sends SIGINT until it exits (within [`GUARD`]). A command started with SIGINT ignored
    /// (what a non-interactive shell does to its background jobs, such as a CI run) loses a
    /// SIGINT that arrives before it has set up its own handler; the next one reaches it. A
    /// program with no handler of its own (curl) keeps ignoring it: after 2 s it gets SIGTERM,
    /// as a closed terminal would send. Its output stays in the pipes for [`Running::end`].
    pub async fn interrupt_until_exited(&mut self) {
        let begun = tokio::time::Instant::now();
        let deadline = begun + GUARD;
        while self.exited().is_none() {
            if begun.elapsed() < Duration::from_secs(2) {
                self.interrupt();
            } else if let Some(pid) = self.child.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let exited = tokio::time::timeout(Duration::from_millis(500), self.child.wait());
            if exited.await.is_ok() || tokio::time::Instant::now() >= deadline {
                return;
            }
        }
    }

    /// Waits for its end: the exit code and the output not yet read.
    pub async fn finish(self) -> Ran {
        self.end().await.unwrap_or_else(|why| panic!("{why}"))
    }

    /// Waits for its end: the exit code and the output not yet read; `Err` when its output
    /// or its exit did not come within [`GUARD`].
    pub async fn end(mut self) -> Result<Ran, String> {
        let mut stdout = String::new();
        let mut stderr = String::new();
        let mut err = self.child.stderr.take().expect("stderr");
        let (out_read, err_read) = tokio::time::timeout(GUARD, async {
            tokio::join!(
                self.stdout.read_to_string(&mut stdout),
                err.read_to_string(&mut stderr)
            )
        })
        .await
        .map_err(|_| format!("still writing after {GUARD:?}"))?;
        out_read.expect("read stdout");
        err_read.expect("read stderr");
        let status = tokio::time::timeout(GUARD, self.child.wait())
            .await
            .map_err(|_| format!("still running after {GUARD:?}"))?
            .expect("wait");
        Ok(Ran {
            code: status.code(),
            stdout,
            stderr,
        })
    }
}

/// The fencing token of the lease in a `--output json` answer.
#[track_caller]
pub fn token_of(answer: &Value) -> u64 {
    answer["lease"]["fencing_token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fencing token in {answer}"))
}
