//! What the replicated state costs per live lease, in process (docs/benchmarks.md):
//! `MIMALLOC_PURGE_DELAY=0 cargo run --release -p tenure-node --example memory_per_lease -- 300000`.
//!
//! Applies N acquires of distinct resources the way the scale benchmark loads a cluster
//! (`scale/<n>`, 64 holders, a fresh `request_id` each, so every one leaves an exactly-once
//! record, kept where a node keeps them: in an archive on disk), and prints the growth of the
//! process's resident memory divided by N. Uses the node's allocator. `--no-request-ids`
//! leaves the exactly-once records out. Then writes the snapshot the node would keep (format
//! 9, its live section over the archive) and reads it back as a restart does: how long, and
//! what the state read costs. Then 130,000 renews of 64 of the leases (the scale benchmark's
//! renew cell): what they add, and how long one takes to apply. Then applies one entry
//! stamped past the exactly-once window, which forgets the load's own records, and prints the
//! resident memory per lease again: what a node holding the leases uses once its load is over
//! ten minutes old. mimalloc gives emptied pages back to the system later, on one of its
//! collections: run with `MIMALLOC_PURGE_DELAY=0` to see them given back at once.

use std::time::Instant;

use tenure_node::lease::encoding::{decode_state_in_owned, encode_state_own};
use tenure_node::lease::{apply, policy::DEDUP_WINDOW_MS, AcquireOp, Mode, Op, RenewOp, State};

mod common;

use common::{entry, resident_bytes};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A fresh request id, if the run uses them.
fn fresh(request_ids: bool) -> Option<String> {
    request_ids.then(|| uuid::Uuid::new_v4().to_string())
}

fn main() -> anyhow::Result<()> {
    let mut leases: u64 = 300_000;
    let mut request_ids = true;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-request-ids" => request_ids = false,
            n => leases = n.parse()?,
        }
    }
    // The state keeps its exactly-once records where a node's does: in an archive on disk.
    let dir = tempfile::tempdir()?;
    let archives = tenure_node::store::archive::Archives::open(&dir.path().join("archive"))?;
    let mut state = State::default().with_rules(tenure_node::lease::rules::LIVE_SNAPSHOTS);
    let generation = archives.fresh()?;
    state.move_into_archive(generation.archive());
    let before = resident_bytes()?;
    let started = Instant::now();
    for k in 1..=leases {
        let acquire = Op::Acquire(AcquireOp {
            resource: format!("scale/{k}"),
            holder: format!("loader-{}", k % 64),
            ttl_ms: Some(6 * 3_600_000),
            mode: Mode::Exclusive,
            units: 0,
            metadata: Default::default(),
            idempotency_key: None,
            wait_ms: None,
        });
        let (meta, command) = entry(k, k * 1_000, fresh(request_ids), acquire);
        apply(&mut state, meta, &command);
    }
    let elapsed = started.elapsed();
    anyhow::ensure!(
        state.live_leases() == leases as usize,
        "{} of {leases} acquires were granted",
        state.live_leases()
    );
    let loaded = resident_bytes()?.saturating_sub(before);
    println!(
        "{leases} leases: {:.0} B per lease resident, {:.2} µs per acquire applied (live: {})",
        loaded as f64 / leases as f64,
        elapsed.as_secs_f64() * 1e6 / leases as f64,
        state.live_leases(),
    );
    // What a restart right after the load reads: the live section a node keeps as its own snapshot, over its archive.
    let copy = state.snapshot_copy();
    let path = dir.path().join("snapshot-own");
    let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let (file, _) = encode_state_own(&copy, file)?;
    file.into_inner()?.sync_all()?;
    archives.flush()?;
    drop(copy);
    let (started, before_read) = (Instant::now(), resident_bytes()?);
    let bytes = std::fs::read(&path)?;
    let size = bytes.len();
    let read = decode_state_in_owned(bytes, 0..size, generation.archive(), true)?;
    let elapsed = started.elapsed();
    anyhow::ensure!(read.live_leases() == leases as usize, "the same leases");
    println!(
        "its own snapshot: {:.1} MB, read in {:.2} s, {:.0} B per lease resident",
        size as f64 / 1e6,
        elapsed.as_secs_f64(),
        resident_bytes()?.saturating_sub(before_read) as f64 / leases as f64,
    );
    drop(read);
    // The scale benchmark's renew cell: 64 leases renewed over and over, a fresh request id
    // each, as the bench leaves them before its restart.
    let renews: u64 = 130_000;
    let (before_renews, renewing) = (resident_bytes()?, Instant::now());
    for r in 1..=renews {
        let k = 1 + r % 64;
        let renew = Op::Renew(RenewOp {
            resource: format!("scale/{k}"),
            lease_id: String::new(),
            holder: format!("loader-{}", k % 64),
            fencing_token: k,
            ttl_ms: None,
        });
        let (meta, command) = entry(
            leases + r,
            (leases + r / 10) * 1_000,
            fresh(request_ids),
            renew,
        );
        apply(&mut state, meta, &command);
    }
    println!(
        "{renews} renews of 64 leases: {:.0} B per renew resident, {:.2} µs per renew applied",
        resident_bytes()?.saturating_sub(before_renews) as f64 / renews as f64,
        renewing.elapsed().as_secs_f64() * 1e6 / renews as f64,
    );
    // Past the window (and well before the leases' ttl): one entry forgets the records.
    let past = leases + renews / 10 + DEDUP_WINDOW_MS + 1;
    let (meta, command) = entry(leases + renews + 1, past * 1_000, None, Op::Tick);
    apply(&mut state, meta, &command);
    anyhow::ensure!(
        state.live_leases() == leases as usize,
        "a lease ended with the window"
    );
    let settled = resident_bytes()?.saturating_sub(before);
    println!(
        "after the exactly-once window: {:.0} B per lease resident",
        settled as f64 / leases as f64,
    );
    Ok(())
}
