//! What the in-process examples share: the entries they apply and the memory they read.

use tenure_node::lease::{
    apply, AcquireOp, Command, EntryMeta, LeaderKey, Mode, Op, Proposal, ReleaseOp, Reply, Stamp,
    State,
};
use tenure_node::store::archive::Archives;

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

/// CPU time of the calling thread so far (nanoseconds, not the 10 ms ticks `/proc` counts).
#[allow(dead_code)] // not every example times itself
pub fn thread_cpu() -> anyhow::Result<std::time::Duration> {
    use nix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)?;
    Ok(std::time::Duration::new(
        t.tv_sec() as u64,
        t.tv_nsec() as u32,
    ))
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

/// Lock cycle `n` of the lock soak's load, applied to `state` after entry `index`: an acquire
/// of the fresh name `soak/<n>` and its release, each with a fresh `request_id`, 0.25 ms of
/// lease time apart (2,000 cycles a second). Returns the index of the release.
#[allow(dead_code)] // not every example runs the soak's load
pub fn lock_cycle(state: &mut State, n: u64, index: u64) -> anyhow::Result<u64> {
    let resource = format!("soak/{n}");
    let acquire = Op::Acquire(AcquireOp {
        resource: resource.clone(),
        holder: "b".into(),
        ttl_ms: Some(30_000),
        mode: Mode::Exclusive,
        units: 0,
        metadata: Default::default(),
        idempotency_key: None,
        wait_ms: None,
    });
    let token = index + 1;
    let (meta, command) = entry(token, n * 500, Some(format!("a-{n}")), acquire);
    let reply = apply(state, meta, &command);
    anyhow::ensure!(
        matches!(&reply, Reply::Acquire(a) if a.granted),
        "acquire {n}: {reply:?}"
    );
    let release = Op::Release(ReleaseOp {
        resource,
        lease_id: String::new(),
        holder: "b".into(),
        fencing_token: token,
    });
    let (meta, command) = entry(token + 1, n * 500 + 250, Some(format!("r-{n}")), release);
    apply(state, meta, &command);
    Ok(token + 1)
}

/// A fresh state at `rules` (3 or later) that keeps its archive where a node does: a sled
/// database under `dir`, in a generation of its own. The archives and the generation live as
/// long as it.
#[allow(dead_code)] // not every example keeps an archive on disk
pub fn on_disk(
    dir: &std::path::Path,
    rules: u32,
) -> anyhow::Result<(Archives, tenure_node::store::archive::Generation, State)> {
    let archives = Archives::open(&dir.join("archive"))?;
    let mut state = State::default().with_rules(rules);
    let generation = archives.fresh()?;
    state.move_into_archive(generation.archive());
    Ok((archives, generation, state))
}
