//! Why fencing tokens: a holder that pauses past its lease (a GC pause, SIGSTOP, a VM
//! migration) wakes up believing it still holds the lease. Its late write must not land on
//! top of the work of the holder after it. The store keeps a [`Fence`] and refuses any write
//! whose token is lower than the highest it has seen.
//!
//! With a cluster running (`deploy/local-cluster.sh`, or set `TENURE_ENDPOINTS`):
//!
//! ```sh
//! cargo run --example fenced_writer
//! ```
//!
//! 1. writer-a acquires the lease (ttl 2 s) and writes with its token.
//! 2. writer-a "pauses": it stops renewing (its handle is dropped) and sleeps.
//! 3. writer-b queues for the lease (`lock(..).wait(..)`) and is admitted when writer-a's
//!    lease is reclaimed, with a higher token; it writes.
//! 4. writer-a wakes up and writes with its old token: the fence refuses it.
//!
//! Exits 0 when the store ends with exactly the two accepted writes, 1 when it does not,
//! 2 on an error.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use tenure_client::{Acquired, Client, Fence, Lease, Stale, DEFAULT_ENDPOINTS};
use tokio::sync::oneshot;

/// A store that accepts a write only with a fencing token no lower than any before it.
#[derive(Default)]
struct FencedStore {
    fence: Fence,
    rows: Mutex<Vec<(u64, String)>>,
}

impl FencedStore {
    fn write(&self, fencing_token: u64, value: &str) -> Result<(), Stale> {
        // Check and write under one lock: a stale writer cannot slip in between.
        let mut rows = self.rows.lock().expect("rows");
        self.fence.check_and_record(fencing_token)?;
        rows.push((fencing_token, value.to_string()));
        Ok(())
    }

    /// A write that must be accepted.
    fn accept(&self, writer: &str, fencing_token: u64, value: &str) -> Result<(), String> {
        self.write(fencing_token, value)
            .map_err(|stale| format!("{writer}'s write refused: {stale}"))?;
        println!("{writer} wrote with token {fencing_token}: accepted");
        Ok(())
    }
}

async fn acquire(client: &Client, resource: &str, holder: &str) -> Result<Lease, String> {
    let answer = client
        .lock(resource, holder)
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(30))
        .await
        .map_err(|e| format!("{holder}: {e}"))?;
    match answer {
        Acquired::Granted(lease) => Ok(*lease),
        Acquired::Refused { reason, .. } => Err(format!("{holder} not granted: {reason}")),
    }
}

async fn run() -> Result<bool, String> {
    let endpoints = std::env::var("TENURE_ENDPOINTS").unwrap_or(DEFAULT_ENDPOINTS.into());
    let client = Client::from_list(&endpoints).map_err(|e| e.to_string())?;
    let resource = format!("demo/fenced-store/{}", std::process::id());
    let store = FencedStore::default();

    let a = acquire(&client, &resource, "writer-a").await?;
    let a_token = a.fencing_token();
    println!("writer-a holds {resource} with fencing token {a_token}");
    store.accept("writer-a", a_token, "a: first")?;

    // writer-a freezes: no more renewals. It keeps its token, as a frozen process would.
    drop(a);
    println!("writer-a pauses (stops renewing) with token {a_token} in hand");

    let (b_wrote, a_wakes) = oneshot::channel();
    let writer_b = async {
        let b = acquire(&client, &resource, "writer-b").await?;
        let b_token = b.fencing_token();
        println!("writer-b admitted after writer-a's lease ran out: fencing token {b_token}");
        store.accept("writer-b", b_token, "b: first")?;
        let _ = b_wrote.send(b_token);
        b.release().await.map_err(|e| e.to_string())?;
        Ok::<u64, String>(b_token)
    };
    let writer_a_wakes = async {
        let _ = a_wakes.await;
        println!("writer-a wakes up and writes with token {a_token}");
        store.write(a_token, "a: late")
    };
    let (b_token, late) = tokio::join!(writer_b, writer_a_wakes);
    let b_token = b_token?;
    match &late {
        Err(stale) => println!("the store refused writer-a: {stale}"),
        Ok(()) => println!("the store accepted writer-a's late write: fencing failed"),
    }
    let rows = store.rows.lock().expect("rows").clone();
    println!("store: {rows:?}");
    let expected = vec![(a_token, "a: first".into()), (b_token, "b: first".into())];
    Ok(b_token > a_token
        && late
            == Err(Stale {
                highest: b_token,
                got: a_token,
            })
        && rows == expected)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("unexpected outcome");
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}
