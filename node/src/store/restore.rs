//! `tenured restore`: seeds an empty data directory from a snapshot file (a backup), under a
//! new membership, so that a cluster whose members are all lost can be started again.
//!
//! A snapshot carries the membership of the cluster it was taken on, and a node started on it
//! would wait for those peers forever. Restore writes the snapshot's state again with the given
//! members as the voters, as of a later index (`--bump-index`: fencing tokens are log indexes)
//! and a later term ([`TERM_BUMP`]), and records a vote in that term, so the first election
//! runs in a later term still: the new leader's entries then compare as newer than the
//! restored state, and the restored state as newer than anything a member of the lost cluster
//! could still hold, as Raft needs.
//!
//! Only one member is restored: the lowest id of `--peers`, the one that would found a
//! cluster. The others start on empty data directories and receive the state from it. Two
//! members restored separately could hold different states under the same index, and Raft
//! takes entries below its commit index as matching without comparing them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use openraft::storage::RaftLogStorage;
use openraft::BasicNode;

use super::log::LogStore;
use super::snapshot::{self, SnapshotMeta, Writer};
use super::{LeaderId, LogId, Membership, NodeId, StorageStats, StoredMembership, Vote};
use crate::config::{parse_peers, Peers};

/// How far `--bump-index` moves the log on by default: more entries than a cluster commits in
/// three years at its measured peak (≈ 8,000 a second), so a token granted by the new cluster
/// is above any the lost cluster granted after the backup was taken.
pub const DEFAULT_BUMP: u64 = 1_000_000_000_000;

/// Terms the restored state moves on by: more elections than a cluster holds in its life, so
/// that a member of the lost cluster that comes back with its data never looks more
/// up to date than the restored state.
pub const TERM_BUMP: u64 = 1 << 20;

/// Indexes stay below 2^53, so that every fencing token is exact as a JSON number.
const INDEX_LIMIT: u64 = 1 << 53;

/// Seeds `--data-dir` from a snapshot file so that `tenured` starts on it as the first member
/// of a new cluster. Restore only the lowest id of `--peers`; start the other members with
/// the same `--peers` on empty data directories: they receive the state from it. `--data-dir`,
/// `--id` and `--peers` also read the node's TENURED_* variables.
#[derive(Clone, Debug, Parser)]
#[command(name = "tenured restore", version)]
pub struct Restore {
    /// The backup: a snapshot file from a node's `DATA_DIR/snapshots/` (the newest there).
    #[arg(long)]
    pub snapshot: PathBuf,

    /// The data directory to seed. Must not hold a node's data already.
    #[arg(long, env = "TENURED_DATA_DIR")]
    pub data_dir: PathBuf,

    /// The id this node will run under (`tenured --id`): the lowest of `--peers`.
    #[arg(long, env = "TENURED_ID")]
    pub id: NodeId,

    /// The new cluster's voters as ID=HOST:PORT, this node included. Start every member
    /// with the same `--peers`.
    #[arg(long, env = "TENURED_PEERS", value_parser = parse_peers)]
    pub peers: Peers,

    /// Entries to skip: the restored state is placed this many indexes after the backup's, so
    /// every fencing token the new cluster grants is above those the lost cluster granted
    /// after the backup (tokens are log indexes). 0 only if no write can have committed after
    /// the backup was taken.
    #[arg(long, default_value_t = DEFAULT_BUMP)]
    pub bump_index: u64,
}

/// What a restore wrote.
#[derive(Debug)]
pub struct Restored {
    /// The backup's last index, and the index and term the restored state is placed at.
    pub from_index: u64,
    pub index: u64,
    pub term: u64,
    pub live_leases: usize,
    pub snapshot_bytes: u64,
}

impl Restore {
    pub async fn run(&self) -> anyhow::Result<Restored> {
        anyhow::ensure!(
            self.peers.contains_key(&self.id),
            "--peers must include this node's id {} (ID=HOST:PORT)",
            self.id
        );
        let lowest = *self.peers.keys().next().unwrap_or(&self.id);
        anyhow::ensure!(
            self.id == lowest,
            "restore node {lowest}, the lowest id of --peers, and only it: the others start on \
             empty data directories and receive the state from it"
        );
        let raft_dir = self.data_dir.join("raft");
        let snapshot_dir = self.data_dir.join("snapshots");
        for dir in [&raft_dir, &snapshot_dir] {
            anyhow::ensure!(
                is_empty(dir)?,
                "{} already holds a node's data: restore seeds an empty data directory only",
                dir.display()
            );
        }
        let (meta, state) = snapshot::load(&self.snapshot)
            .with_context(|| format!("reading the snapshot {}", self.snapshot.display()))?;
        let backup = meta
            .last_log_id
            .ok_or_else(|| anyhow::anyhow!("the snapshot covers no entry"))?;
        let index = backup
            .index
            .checked_add(self.bump_index)
            .filter(|index| *index < INDEX_LIMIT)
            .ok_or_else(|| anyhow::anyhow!("--bump-index {} is too large", self.bump_index))?;
        let term = backup.leader_id.term.saturating_add(TERM_BUMP);
        let last = LogId::new(
            LeaderId {
                term,
                node_id: backup.leader_id.node_id,
            },
            index,
        );
        let nodes: BTreeMap<NodeId, BasicNode> = self
            .peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        let voters: BTreeSet<NodeId> = nodes.keys().copied().collect();
        let restored = SnapshotMeta {
            last_log_id: Some(last),
            last_membership: StoredMembership::new(
                Some(last),
                Membership::new(vec![voters], nodes)?,
            ),
            snapshot_id: format!("restored-{index}-from-{}", backup.index),
        };

        // No log, and a vote in the restored term: the first election is in a later one.
        // Recorded first: the snapshot, named last, is what makes the directory a node's.
        let mut log = LogStore::open(&raft_dir, Arc::new(StorageStats::default()))?;
        log.save_vote(&Vote::new(term, self.id))
            .await
            .map_err(|e| anyhow::anyhow!("recording the vote: {e}"))?;
        drop(log);
        let mut writer = Writer::create(&snapshot_dir, restored)?;
        writer.state(&state)?;
        let written = writer.finish()?;
        let snapshot_bytes = written.bytes;
        written.keep(&snapshot_dir)?;
        Ok(Restored {
            from_index: backup.index,
            index,
            term,
            live_leases: state.live_leases(),
            snapshot_bytes,
        })
    }
}

/// Whether `dir` is missing or holds nothing.
fn is_empty(dir: &Path) -> anyhow::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e.into()),
    }
}
