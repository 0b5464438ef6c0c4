//! What a node's state machine costs per lock cycle as it ages, in process, in minutes rather
//! than a soak's half hour (docs/benchmarks.md):
//! `cargo run --release -p tenure-node --example aging -- 30` (a second argument runs another
//! rules version than the newest, e.g. `-- 30 3`: idle resources a key each, not in chunks).
//!
//! Applies the lock soak's load (`jepsen/soak.sh 30m 16 lock`: acquire and release cycles on
//! fresh names, each with a fresh `request_id`, at 2,000 cycles a second of lease time) for
//! the given number of lease-time minutes, into a state that keeps its archive where a node
//! does (sled, on disk). Every 5,000 entries it cuts what the state forgot, as a node does at
//! each snapshot, and removes the cut before it (a node removes a cut once the snapshot after
//! it is kept). For each minute it prints the CPU time per cycle of apply and of those
//! removals, and the archive's bytes on disk: a fresh state (the first minutes, before the
//! history's bound and the exactly-once window forget anything) beside an aged one.

use std::time::Duration;

mod common;

use common::{lock_cycle, on_disk, resident_bytes, thread_cpu};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Cycles in a minute of the soak's pace.
const MINUTE: u64 = 120_000;

/// Entries between two cuts: a node's default `--snapshot-every`.
const CUT_EVERY: u64 = 5_000;

/// Bytes of the files under `dir`.
fn bytes_under(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn main() -> anyhow::Result<()> {
    let minutes: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 30,
    };
    let rules: u32 = match std::env::args().nth(2) {
        Some(n) => n.parse()?,
        None => tenure_node::rules::RELEASE.max,
    };
    anyhow::ensure!(
        rules >= 3,
        "the archive on disk is kept from rules version 3"
    );
    let dir = tempfile::tempdir()?;
    let (_archives, _generation, mut state) = on_disk(dir.path(), rules)?;
    println!("minute\tapply µs/cycle\tremoval µs/cycle\tarchive MB\tRSS MiB");
    let (mut index, mut cut_at, mut cut) = (0, 0, None);
    for minute in 0..minutes {
        let (started, mut removing) = (thread_cpu()?, Duration::ZERO);
        for n in minute * MINUTE..(minute + 1) * MINUTE {
            index = lock_cycle(&mut state, n, index)?;
            if index >= cut_at + CUT_EVERY {
                cut_at = index;
                let cutting = thread_cpu()?;
                if let Some(before) = cut.replace(state.forgotten()) {
                    before.remove();
                }
                removing += thread_cpu()? - cutting;
            }
        }
        let applying = thread_cpu()? - started - removing;
        let per_cycle = |d: Duration| d.as_secs_f64() * 1e6 / MINUTE as f64;
        println!(
            "{}\t{:.1}\t{:.1}\t{}\t{}",
            minute + 1,
            per_cycle(applying),
            per_cycle(removing),
            bytes_under(&dir.path().join("archive")) / 1_000_000,
            resident_bytes()? >> 20,
        );
    }
    Ok(())
}
