//! Leader election: run three copies on one key. One leads and works; the others wait in
//! the key's waiting room. When the leader stops — it resigns, is killed, or freezes past its
//! ttl — the next candidate leads, with a higher fencing token.
//!
//! With a cluster running (`deploy/local-cluster.sh`, or set `TENURE_ENDPOINTS`), in three
//! terminals:
//!
//! ```sh
//! cargo run --example election -- a
//! cargo run --example election -- b
//! cargo run --example election -- c
//! ```
//!
//! Kill the leader with Ctrl-C (it resigns: the next one leads at once) or `kill -9` (the
//! next one leads when the ttl, 5 s, has run out). Every copy also prints who leads, as
//! `observe` reports it. `--lead-for 3s` makes each leader resign after 3 s of work and exit
//! 0, so three copies in the background finish on their own:
//!
//! ```sh
//! for c in a b c; do cargo run --example election -- $c --lead-for 3s & done; wait
//! ```
//!
//! Exit codes: 0 after resigning, 1 if leadership was lost, 2 on an error.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use tenure_client::{Client, Leadership, DEFAULT_ENDPOINTS};

#[derive(Parser)]
struct Args {
    /// This candidate's id.
    candidate: String,
    /// The election key.
    #[arg(long, default_value = "demo/election")]
    key: String,
    /// Resign after leading this long (default: lead until interrupted).
    #[arg(long, value_parser = humantime::parse_duration)]
    lead_for: Option<Duration>,
    #[arg(long, env = "TENURE_ENDPOINTS", default_value = DEFAULT_ENDPOINTS)]
    endpoints: String,
}

const TTL: Duration = Duration::from_secs(5);

/// The leader's work: a numbered step a second, each stamped with the fencing token (a real
/// leader would send the token with every write it makes).
async fn work(leadership: &Leadership) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for step in 1.. {
        tick.tick().await;
        println!(
            "{} (token {}): work step {step}",
            leadership.candidate_id(),
            leadership.fencing_token()
        );
    }
}

async fn run(args: &Args) -> Result<ExitCode, tenure_client::Error> {
    let client = Client::from_list(&args.endpoints)?;
    let me = args.candidate.clone();

    // Who leads, as it changes (runs alongside everything below).
    let mut leaders = client.observe(&args.key);
    let watcher = me.clone();
    tokio::spawn(async move {
        while let Some(Ok(leader)) = leaders.next().await {
            match leader {
                Some(l) => println!(
                    "[{watcher} sees] leader: {} (token {})",
                    l.holder, l.fencing_token
                ),
                None => println!("[{watcher} sees] no leader"),
            }
        }
    });

    println!("{me}: campaigning for {}", args.key);
    let leadership = tokio::select! {
        leadership = client.campaign(&args.key, &me, TTL) => leadership?,
        _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
    };
    println!(
        "{me}: I lead {} with fencing token {}",
        args.key,
        leadership.fencing_token()
    );
    let lead_for = args.lead_for.unwrap_or(Duration::MAX);
    tokio::select! {
        lost = leadership.lost() => {
            println!("{me}: lost leadership ({lost}); stopping work");
            return Ok(ExitCode::from(1));
        }
        _ = work(&leadership) => {}
        _ = tokio::time::sleep(lead_for) => println!("{me}: done leading"),
        _ = tokio::signal::ctrl_c() => println!("{me}: interrupted"),
    }
    leadership.resign().await?;
    println!("{me}: resigned");
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{}: error: {error}", args.candidate);
            ExitCode::from(2)
        }
    }
}
