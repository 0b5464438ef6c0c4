//! What the replicated state costs per live lease, in process (docs/benchmarks.md):
//! `MIMALLOC_PURGE_DELAY=0 cargo run --release -p tenure-node --example memory_per_lease -- 300000`.
//!
//! Applies N acquires of distinct resources the way the scale benchmark loads a cluster
//! (`scale/<n>`, 64 holders, a fresh `request_id` each, so every one leaves an exactly-once
//! record, kept where a node keeps them: in an archive on disk), and prints the growth of the
//! process's resident memory divided by N. Uses the node's allocator. `--no-request-ids` leaves the exactly-once records out. Then applies one
//! entry stamped past the exactly-once window, which forgets the load's own records, and
//! prints the resident memory per lease again: what a node holding the leases uses once its
//! load is over ten minutes old. mimalloc gives emptied pages back to the system later, on
//! one of its collections: run with `MIMALLOC_PURGE_DELAY=0` to see them given back at once.

use std::time::Instant;

use tenure_node::lease::encoding::{decode_state_in, encode_state_own};
use tenure_node::lease::{
    apply, policy::DEDUP_WINDOW_MS, AcquireOp, Command, EntryMeta, LeaderKey, Mode, Op, Proposal,
    Stamp, State,
};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resident bytes of this process (`/proc/self/statm`, in pages of 4 KiB).
fn resident_bytes() -> anyhow::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("statm has no resident field"))?
        .parse()?;
    Ok(pages * 4096)
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
        let proposal = Proposal {
            stamp: Stamp {
                mono_ms: 1_000 + k,
                wall_ms: 1_700_000_000_000 + k,
                clock_epoch: 0,
            },
            // An admin of the token file, whom quotas do not limit (the benchmark raises the
            // quotas of `anonymous` instead; a client stops at its 100,000 leases).
            principal: "root".into(),
            admin: true,
            request_id: request_ids.then(|| uuid::Uuid::new_v4().to_string()),
            require_registration: false,
            op: Op::Acquire(AcquireOp {
                resource: format!("scale/{k}"),
                holder: format!("loader-{}", k % 64),
                ttl_ms: Some(6 * 3_600_000),
                mode: Mode::Exclusive,
                units: 0,
                metadata: Default::default(),
                idempotency_key: None,
                wait_ms: None,
            }),
        };
        let meta = EntryMeta {
            index: k,
            leader: LeaderKey {
                term: 1,
                node_id: 1,
            },
        };
        apply(&mut state, meta, &Command::V1(proposal));
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
    let bytes = std::fs::read(&path)?;
    let (started, before_read) = (Instant::now(), resident_bytes()?);
    let read = decode_state_in(&bytes, generation.archive(), true)?;
    let elapsed = started.elapsed();
    anyhow::ensure!(read.live_leases() == leases as usize, "the same leases");
    println!(
        "its own snapshot: {:.1} MB, read in {:.2} s, {:.0} B per lease resident",
        bytes.len() as f64 / 1e6,
        elapsed.as_secs_f64(),
        resident_bytes()?.saturating_sub(before_read) as f64 / leases as f64,
    );
    drop(read);
    // Past the window (and well before the leases' ttl): one entry forgets the records.
    let later = Proposal {
        stamp: Stamp {
            mono_ms: 1_000 + leases + DEDUP_WINDOW_MS + 1,
            wall_ms: 1_700_000_000_000 + leases + DEDUP_WINDOW_MS + 1,
            clock_epoch: 0,
        },
        principal: "root".into(),
        admin: true,
        request_id: None,
        require_registration: false,
        op: Op::Tick,
    };
    let meta = EntryMeta {
        index: leases + 1,
        leader: LeaderKey {
            term: 1,
            node_id: 1,
        },
    };
    apply(&mut state, meta, &Command::V1(later));
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
