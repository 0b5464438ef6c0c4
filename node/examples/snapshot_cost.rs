//! What one snapshot of an aged node costs, in process (docs/benchmarks.md):
//! `cargo run --release -p tenure-node --example snapshot_cost -- 1000000`.
//!
//! Applies N lock cycles on fresh names (an acquire and a release, each with a fresh
//! `request_id`, 0.25 ms of lease time apart: the lock soak's load at 2,000 cycles/s), into a
//! state that keeps its archive where a node does (sled, on disk). What it then holds is what
//! a node holds after that soak: the exactly-once records of the last ten minutes, the newest
//! million events, the idle resources they belong to (cold), a few live leases. Then it
//! writes the snapshot a node would build, once in format 8 (rules 2), once in format 10
//! (rules 4, whole: what is sent to another node) and once as a node keeps its own (the
//! live section alone, the archive flushed), to a file beside the archive, and reads each
//! back: the CPU time of each step
//! (this thread's), the bytes written, and the growth of the process's resident memory while
//! the write runs.

use std::io::BufWriter;

use tenure_node::lease::encoding::{
    decode_state, decode_state_in, encode_state_into, encode_state_own,
};

mod common;

use common::{lock_cycle, on_disk, resident_bytes, thread_cpu};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cycles: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 1_000_000,
    };
    let dir = tempfile::tempdir()?;
    let newest = tenure_node::rules::RELEASE.max;
    let (archives, generation, mut state) = on_disk(dir.path(), newest)?;
    let started = thread_cpu()?;
    let mut index = 0;
    for n in 0..cycles {
        index = lock_cycle(&mut state, n, index)?;
    }
    println!(
        "{cycles} lock cycles applied in {:.1} s of CPU: {} exactly-once records ({} MB counted); RSS {} MiB",
        (thread_cpu()? - started).as_secs_f64(),
        state.dedup().len(),
        state.dedup().bytes() / 1_000_000,
        resident_bytes()? >> 20,
    );
    for rules in [2, newest] {
        let copy = state.snapshot_copy().with_rules(rules);
        let path = dir.path().join(format!("snapshot-{rules}"));
        let before = resident_bytes()?;
        let cpu = thread_cpu()?;
        let file = BufWriter::new(std::fs::File::create(&path)?);
        encode_state_into(&copy, file)?.into_inner()?.sync_all()?;
        let written = thread_cpu()? - cpu;
        let grew = resident_bytes()?.saturating_sub(before);
        drop(copy);
        let bytes = std::fs::read(&path)?;
        let cpu = thread_cpu()?;
        let read = decode_state(&bytes)?;
        let decoded = thread_cpu()? - cpu;
        anyhow::ensure!(read.rules() == rules, "the body keeps the rules");
        println!(
            "format {}: {:.1} MB written in {:.2} s of CPU (RSS +{} MiB while writing), read in {:.2} s",
            if rules == 2 { 8 } else { 10 },
            bytes.len() as f64 / 1e6,
            written.as_secs_f64(),
            grew >> 20,
            decoded.as_secs_f64(),
        );
    }
    // As a node keeps it from rules 3: the live state alone, the archive flushed, not copied.
    let copy = state.snapshot_copy();
    let path = dir.path().join("snapshot-own");
    let before = resident_bytes()?;
    let cpu = thread_cpu()?;
    let file = BufWriter::new(std::fs::File::create(&path)?);
    let (file, _) = encode_state_own(&copy, file)?;
    file.into_inner()?.sync_all()?;
    archives.flush()?;
    let written = thread_cpu()? - cpu;
    let grew = resident_bytes()?.saturating_sub(before);
    drop(copy);
    let bytes = std::fs::read(&path)?;
    let cpu = thread_cpu()?;
    let read = decode_state_in(&bytes, generation.archive(), true)?;
    let decoded = thread_cpu()? - cpu;
    anyhow::ensure!(
        read.dedup().len() == state.dedup().len(),
        "the same records"
    );
    println!(
        "format 9, live state alone (a node's own file): {:.1} MB written in {:.2} s of CPU (RSS +{} MiB while writing), read in {:.2} s",
        bytes.len() as f64 / 1e6,
        written.as_secs_f64(),
        grew >> 20,
        decoded.as_secs_f64(),
    );
    Ok(())
}
