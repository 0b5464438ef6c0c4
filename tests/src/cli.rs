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
pub struct Cli {
    /// `TENURE_ENDPOINTS`, comma-separated; `None` leaves it unset.
    pub endpoints: Option<String>,
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
        }
    }

    /// The CLI without endpoints in the environment (flags may give some).
    pub fn offline() -> Cli {
        Cli { endpoints: None }
    }

    /// `tenure ARGS`, running.
    pub fn spawn_args(&self, args: &[&str]) -> Running {
        let mut command = tokio::process::Command::new(tenure_bin());
        command.args(args).env_remove("TENURE_TOKEN");
        match &self.endpoints {
            Some(endpoints) => command.env("TENURE_ENDPOINTS", endpoints),
            None => command.env_remove("TENURE_ENDPOINTS"),
        };
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run tenure");
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
        drop(running.child.stdin.take());
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
    /// The next line of its stdout, without the newline.
    pub async fn line(&mut self) -> String {
        let mut line = String::new();
        let read = tokio::time::timeout(GUARD, self.stdout.read_line(&mut line))
            .await
            .expect("a line in time")
            .expect("read stdout");
        assert!(read > 0, "a line before the end of stdout");
        line.truncate(line.trim_end_matches(['\n', '\r']).len());
        line
    }

    /// Waits for its end: the exit code and the output not yet read.
    pub async fn finish(mut self) -> Ran {
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
        .expect("the end of its output in time");
        out_read.expect("read stdout");
        err_read.expect("read stderr");
        let status = tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("exit in time")
            .expect("wait");
        Ran {
            code: status.code(),
            stdout,
            stderr,
        }
    }
}

/// The fencing token of the lease in a `--output json` answer.
#[track_caller]
pub fn token_of(answer: &Value) -> u64 {
    answer["lease"]["fencing_token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fencing token in {answer}"))
}
