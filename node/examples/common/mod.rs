//! What the in-process examples share: the entries they apply and the memory they read.

use tenure_node::lease::{Command, EntryMeta, LeaderKey, Op, Proposal, Stamp};

/// Resident bytes of this process (`/proc/self/statm`, in pages of 4 KiB).
pub fn resident_bytes() -> anyhow::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("statm has no resident field"))?
        .parse()?;
    Ok(pages * 4096)
}

/// Entry `index` with `op`, stamped `at_us` after the run began, of an admin of the token
/// file, whom quotas do not limit (the benchmarks raise the quotas of `anonymous` instead; a
/// client stops at its 100,000 leases).
pub fn entry(index: u64, at_us: u64, request_id: Option<String>, op: Op) -> (EntryMeta, Command) {
    let proposal = Proposal {
        stamp: Stamp {
            mono_ms: 1_000 + at_us / 1_000,
            wall_ms: 1_700_000_000_000 + at_us / 1_000,
            clock_epoch: 0,
        },
        principal: "root".into(),
        admin: true,
        request_id,
        require_registration: false,
        op,
    };
    let leader = LeaderKey {
        term: 1,
        node_id: 1,
    };
    (EntryMeta { index, leader }, Command::V1(proposal))
}
