//! `tenure elect KEY -- COMMAND ARGS…`: runs COMMAND only while this process leads KEY, as
//! `consul lock` does. It campaigns (queues for KEY's exclusive lease), starts COMMAND with
//! `TENURE_FENCING_TOKEN` once it leads, kills COMMAND (SIGKILL) the moment leadership is
//! lost, resigns when COMMAND exits and exits with COMMAND's code. SIGINT and SIGTERM are
//! passed on to COMMAND; leadership is kept until it has exited. Progress goes to stderr.

use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use clap::Args;
use tenure_client::{Client, Error};

#[derive(Args)]
pub struct ElectArgs {
    /// The election key: a resource name every candidate uses.
    key: String,
    /// This candidate's id, unique per process (default: HOSTNAME-PID).
    #[arg(long)]
    holder: Option<String>,
    /// Ttl of the leadership lease, renewed every ttl/3: how long a leader that dies
    /// silently keeps the key.
    #[arg(long, default_value = "10s", allow_hyphen_values = true, value_parser = crate::duration)]
    ttl: Duration,
    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn say(message: String) {
    eprintln!("tenure elect: {message}");
}

pub async fn elect(client: &Client, args: &ElectArgs) -> Result<ExitCode, Error> {
    let key = &args.key;
    let holder = args.holder.clone().unwrap_or_else(default_holder);
    let program = &args.command[0];
    let mut signals = Signals::new()?;
    say(format!("{holder} is waiting to lead {key}"));
    let leadership = tokio::select! {
        leadership = client.campaign(key, &holder, args.ttl) => leadership?,
        signal = signals.next() => return Ok(ExitCode::from(128 + signal)),
    };
    let token = leadership.fencing_token();
    say(format!(
        "{holder} leads {key} (fencing token {token}); running {program}"
    ));
    let spawned = tokio::process::Command::new(program)
        .args(&args.command[1..])
        .env("TENURE_FENCING_TOKEN", token.to_string())
        .env("TENURE_ELECTION_KEY", key)
        .env("TENURE_HOLDER", &holder)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = leadership.resign().await;
            return Err(Error::Local(format!("cannot run {program}: {e}")));
        }
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            lost = leadership.lost() => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(Error::Local(format!(
                    "lost leadership of {key} ({lost}); killed {program}"
                )));
            }
            signal = signals.next() => pass_on(&mut child, signal),
        }
    };
    let status = status.map_err(|e| Error::Local(format!("waiting for {program}: {e}")))?;
    match leadership.resign().await {
        Ok(()) => say(format!("{program} exited ({status}); {holder} resigned")),
        Err(e) => say(format!(
            "{program} exited ({status}); resigning failed ({e}): {key} passes on when its ttl runs out"
        )),
    }
    Ok(exit_code(status))
}

/// `HOSTNAME-PID`, with characters a holder name cannot carry replaced by `_`.
fn default_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    let host: String = host
        .trim()
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '.' | ':' | '/' | '-' => c,
            _ => '_',
        })
        .take(100)
        .collect();
    format!("{host}-{}", std::process::id())
}

/// The child's code; 128 + the signal number when a signal ended it (as a shell reports it).
fn exit_code(status: ExitStatus) -> ExitCode {
    #[cfg(unix)]
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return ExitCode::from(128u8.saturating_add(signal as u8));
    }
    ExitCode::from(status.code().unwrap_or(1) as u8)
}

/// SIGINT and SIGTERM sent to this process.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Error> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind| {
                signal(kind).map_err(|e| Error::Local(format!("cannot listen for signals: {e}")))
            };
            Ok(Signals {
                interrupt: listen(SignalKind::interrupt())?,
                terminate: listen(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal's number.
    async fn next(&mut self) -> u8 {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => 2,
                _ = self.terminate.recv() => 15,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            2
        }
    }
}

/// Passes signal `number` on to the child (without unix signals: kills it).
fn pass_on(child: &mut tokio::process::Child, number: u8) {
    #[cfg(unix)]
    {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let signal = Signal::try_from(i32::from(number)).unwrap_or(Signal::SIGTERM);
        if let Some(pid) = child.id() {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }
    #[cfg(not(unix))]
    {
        let _ = number;
        let _ = child.start_kill();
    }
}
