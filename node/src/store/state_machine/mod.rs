//! The lease state machine under openraft: applies committed entries to the in-memory
//! `lease::State` and builds, installs and serves snapshots.
//!
//! Apply is not persisted: the log store keeps `committed`, so a restart loads the newest
//! snapshot and openraft re-applies the committed tail. Building a snapshot is `build`; what
//! a node keeps of one (and of the archive it reads) is `kept`.

mod build;
mod kept;
mod lock;
mod rules;

use std::io::SeekFrom;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use futures::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::OptionalSend;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::watch;

use super::archive::{Archives, Generation};
use super::notify::Notifier;
use super::snapshot::{self, RaftSnapshotMeta, SnapshotMeta, Writer};
use super::{EntryPayload, LogId, StorageStats, StoredMembership, TypeConfig};
use crate::lease::machine::Forgotten;
use crate::lease::{self, EntryMeta, LeaderKey, Reply, State};
use kept::{remove_strays, Kept, Reads};
pub use rules::above_rules;

type Membership = StoredMembership;

/// A snapshot as openraft hands it over: its meta and its file.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, tokio::fs::File>;

/// The applied state: the lease domain plus openraft's bookkeeping.
pub struct Applied {
    pub state: State,
    pub last_applied: Option<LogId>,
    pub last_membership: Membership,
    /// The archive generation the state reads (None: it archives on the heap).
    pub generation: Option<Generation>,
}

/// Shared between openraft (apply, snapshots) and the API (reads) and leader timers.
pub struct Shared {
    applied: lock::Guarded<Applied>,
    /// The newest snapshot's meta (its bytes stay on disk). Its lock also serializes saving
    /// and loading: openraft builds snapshots in a task of their own, which can overlap an
    /// install.
    current: Mutex<Option<Kept>>,
    snapshot_dir: PathBuf,
    applied_index: watch::Sender<u64>,
    pub stats: Arc<StorageStats>,
    /// Events and decided waits of applied entries, for this node's watchers and waiters.
    pub notify: Arc<Notifier>,
    /// The highest rules version this node applies (`crate::rules`, `--max-rules`).
    max_rules: u32,
    /// The applied state's rules version, kept by apply and install: read on every write
    /// (`Node::gate`) without the state's lock.
    rules: AtomicU32,
    /// The same, for what waits for it to change (`coord::rules`): fires only when it does.
    rules_changed: watch::Sender<u32>,
    /// Why this node stopped applying (an entry or snapshot above its rules), if it did.
    halted: Mutex<Option<String>>,
    /// Where states keep what they remember but seldom read (on disk); None: on the heap.
    archives: Option<Archives>,
    /// Held by a snapshot build from its copy of the state to the removal of what the state
    /// no longer reads: no removal while another build's copy still reads the archive.
    building: Mutex<()>,
    /// What states forgot of the archive, cut with the copy of each snapshot built (its
    /// index): removed once a snapshot at least as new is kept ([`Shared::remove_forgotten`]).
    forgotten: Mutex<Vec<(u64, Forgotten)>>,
    /// Held (shared) while the whole body of a kept snapshot is read to send it: nothing
    /// leaves the archive meanwhile.
    sending: RwLock<()>,
}

impl Shared {
    /// Read access to the applied state. Never held across an await.
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read()
    }

    /// Read access for a task that reads on every call: parked, not blocking its worker,
    /// while apply writes (`lock`). Never held across an await.
    pub async fn read_parked(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read_parked().await
    }

    /// Write access to the applied state (apply, install). Never held across an await.
    fn write(&self) -> lock::WriteGuard<'_, Applied> {
        self.applied.write()
    }

    /// Fires with the applied index after every applied batch.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied_index.subscribe()
    }

    fn replace(&self, applied: Applied) {
        let index = applied.last_applied.map_or(0, |id| id.index);
        let mut current = self.write();
        if let Some(old) = &current.generation {
            old.replaced();
        }
        // What older states forgot was in the generation that goes.
        self.forgotten
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.set_rules(applied.state.rules());
        *current = applied;
        self.notify.reset();
        drop(current);
        self.applied_index.send_replace(index);
    }
}

#[derive(Clone)]
pub struct StateMachineStore {
    pub shared: Arc<Shared>,
}

fn sm_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl StateMachineStore {
    /// Opens the state machine, loading the newest snapshot from `snapshot_dir`.
    pub fn open(snapshot_dir: PathBuf, stats: Arc<StorageStats>) -> anyhow::Result<Self> {
        StateMachineStore::open_with_rules(snapshot_dir, stats, crate::rules::RELEASE.max)
    }

    /// [`StateMachineStore::open`] for a node that applies rules up to `max_rules`: data
    /// written under higher rules is refused (an older release never guesses at it).
    pub fn open_with_rules(
        snapshot_dir: PathBuf,
        stats: Arc<StorageStats>,
        max_rules: u32,
    ) -> anyhow::Result<Self> {
        StateMachineStore::open_with(snapshot_dir, None, stats, max_rules)
    }

    /// [`StateMachineStore::open_with_rules`], keeping the state's archive in
    /// `archive_dir`, on disk, if given (the generation the newest snapshot names, or a new one).
    pub fn open_with(
        snapshot_dir: PathBuf,
        archive_dir: Option<&std::path::Path>,
        stats: Arc<StorageStats>,
        max_rules: u32,
    ) -> anyhow::Result<Self> {
        snapshot::remove_unfinished(&snapshot_dir)?;
        let newest = snapshot::newest(&snapshot_dir)?;
        let reads = newest
            .as_ref()
            .and_then(|(_, path, _)| snapshot::generation(path));
        let archives = match archive_dir {
            Some(dir) => {
                if reads.is_none() {
                    // Nothing in it is read again: the start fills a fresh generation and
                    // drops the rest. Removed unopened, so that a database sled's recovery
                    // cannot open (a power cut that landed its writes out of order) does
                    // not keep the node from starting.
                    Archives::discard(dir)?;
                }
                Some(Archives::open(dir)?)
            }
            None => None,
        };
        let generation = match (&archives, reads) {
            (Some(archives), Some(number)) => Some(archives.named(number)?),
            (Some(archives), None) => Some(archives.fresh()?),
            (None, Some(number)) => anyhow::bail!(
                "the newest snapshot reads archive generation {number}, and this node keeps no archive"
            ),
            (None, None) => None,
        };
        if let (Some(archives), Some(generation)) = (&archives, &generation) {
            archives.keep_only(generation.number)?;
        }
        let archive = match &generation {
            Some(generation) => generation.archive(),
            None => lease::archive::on_the_heap(),
        };
        let (applied, current) = match newest {
            Some((_, path, bytes)) => {
                let (meta, state) = snapshot::load_own(&path, archive)?;
                anyhow::ensure!(
                    state.rules() <= max_rules,
                    "{}",
                    above_rules(
                        &format!("the snapshot {}", path.display()),
                        state.rules(),
                        max_rules
                    )
                );
                let index = meta.last_log_id.map_or(0, |id| id.index);
                StorageStats::set(&stats.last_snapshot_index, index);
                StorageStats::set(&stats.last_snapshot_bytes, bytes);
                let kept = Kept {
                    reads: match (reads, &generation) {
                        (Some(_), Some(generation)) => Some(Reads {
                            generation: generation.clone(),
                            wanted: Arc::new(state.wanted()),
                        }),
                        _ => None,
                    },
                    meta,
                };
                let applied = Applied {
                    state,
                    last_applied: kept.meta.last_log_id,
                    last_membership: kept.meta.last_membership.clone(),
                    generation,
                };
                (applied, Some(kept))
            }
            None => {
                let mut state = State::default();
                state.move_into_archive(archive);
                let applied = Applied {
                    state,
                    last_applied: None,
                    last_membership: Membership::default(),
                    generation,
                };
                (applied, None)
            }
        };
        let index = applied.last_applied.map_or(0, |id| id.index);
        let (applied_index, _) = watch::channel(index);
        let shared = Shared {
            rules: AtomicU32::new(applied.state.rules()),
            rules_changed: watch::channel(applied.state.rules()).0,
            applied: lock::Guarded::new(applied),
            current: Mutex::new(current),
            snapshot_dir,
            applied_index,
            stats,
            notify: Arc::default(),
            max_rules,
            halted: Mutex::default(),
            archives,
            building: Mutex::default(),
            forgotten: Mutex::default(),
            sending: RwLock::default(),
        };
        let shared = Arc::new(shared);
        if reads.is_some() {
            remove_strays(&shared.read().state, &shared);
        }
        Ok(StateMachineStore { shared })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = tokio::fs::File;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), std::io::Error> {
        let applied = self.shared.read();
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), std::io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>>
            + Unpin
            + OptionalSend,
    {
        // Everything openraft has ready now is applied under one lock; the replies go out
        // once the lock is let go and the watchers are told.
        let mut batch = Vec::new();
        while let Some(next) = entries.next().await {
            batch.push(next?);
        }
        // An entry of rules above this node's: what comes before it is applied (and answered,
        // and published) as usual, then this node stops there.
        let max = self.shared.max_rules;
        let above = batch.iter().position(|(entry, _)| match &entry.payload {
            EntryPayload::Normal(command) => command.rules_needed() > max,
            _ => false,
        });
        let stopped_at = above.map(|i| {
            let (entry, _) = &batch[i];
            let rules = match &entry.payload {
                EntryPayload::Normal(command) => command.rules_needed(),
                _ => max,
            };
            (entry.log_id.index, rules)
        });
        if let Some(i) = above {
            batch.truncate(i);
        }
        let mut replies = Vec::with_capacity(batch.len());
        let mut effects = Vec::new();
        let index = {
            let mut applied = self.shared.write();
            for (entry, responder) in batch {
                applied.last_applied = Some(entry.log_id);
                let reply = match &entry.payload {
                    EntryPayload::Blank => Reply::None,
                    EntryPayload::Membership(membership) => {
                        applied.last_membership =
                            StoredMembership::new(Some(entry.log_id), membership.clone());
                        Reply::None
                    }
                    EntryPayload::Normal(command) => {
                        let leader = entry.log_id.leader_id;
                        let meta = EntryMeta {
                            index: entry.log_id.index,
                            leader: LeaderKey {
                                term: leader.term,
                                node_id: leader.node_id,
                            },
                        };
                        let started = std::time::Instant::now();
                        let reply = lease::apply(&mut applied.state, meta, command);
                        let stats = &self.shared.stats;
                        stats
                            .apply_seconds
                            .0
                            .observe(started.elapsed().as_secs_f64());
                        let entry_effects = applied.state.take_effects();
                        let reclaimed = entry_effects
                            .events
                            .iter()
                            .filter(|(_, event)| event.kind == lease::EventKind::Reclaimed)
                            .count();
                        StorageStats::add(&stats.reclaims, reclaimed as u64);
                        effects.push(entry_effects);
                        reply
                    }
                };
                replies.push((responder, reply));
            }
            self.shared.notify.publish(effects);
            self.shared.set_rules(applied.state.rules());
            applied.last_applied.map_or(0, |id| id.index)
        };
        self.shared.applied_index.send_replace(index);
        for (responder, reply) in replies {
            if let Some(responder) = responder {
                responder.send(reply);
            }
        }
        if let Some((index, rules)) = stopped_at {
            let what = format!("log entry {index}");
            return Err(self.shared.halt(above_rules(&what, rules, max)));
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    /// The received file is the leader's snapshot file, meta line included. It is read whole
    /// to decode it (an install is rare: a follower too far behind, or a new one).
    async fn install_snapshot(
        &mut self,
        meta: &RaftSnapshotMeta,
        mut snapshot: tokio::fs::File,
    ) -> Result<(), std::io::Error> {
        let meta = snapshot::meta_at(meta.last_log_id, meta.last_membership.clone());
        tracing::info!(snapshot = %meta.snapshot_id, "installing a snapshot from the leader");
        let mut data = Vec::new();
        snapshot.seek(SeekFrom::Start(0)).await.map_err(sm_err)?;
        snapshot.read_to_end(&mut data).await.map_err(sm_err)?;
        let shared = self.shared.clone();
        let stats = &shared.stats;
        StorageStats::set(
            &stats.log_bytes_at_snapshot,
            StorageStats::get(&stats.log_bytes),
        );
        let kept_meta = meta.clone();
        let (state, generation) = tokio::task::spawn_blocking(move || {
            let body = snapshot::received_body(&data)?;
            // The entries go straight to a generation of their own.
            let generation = shared.archives.as_ref().map(Archives::fresh).transpose()?;
            let archive = match &generation {
                Some(generation) => generation.archive(),
                None => lease::archive::on_the_heap(),
            };
            let state = snapshot::decode_state_in(body, archive, false)?;
            if let Some(why) = shared.above_own_rules(&state, "the leader's snapshot") {
                return Err(anyhow::Error::from(shared.halt(why)));
            }
            // Written again (with its checksum) as this node keeps it, whatever format the
            // leader sent.
            let mut writer = Writer::create(&shared.snapshot_dir, kept_meta)?;
            let reads = shared.write_own(&mut writer, &state)?;
            let reads = match (reads, &generation) {
                (true, Some(generation)) => Some(Reads {
                    generation: generation.clone(),
                    wanted: Arc::new(state.wanted()),
                }),
                _ => None,
            };
            shared.keep_if_newer(writer.finish()?, reads)?;
            anyhow::Ok((state, generation))
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        StorageStats::add(&self.shared.stats.snapshots_installed, 1);
        self.shared.replace(Applied {
            state,
            last_applied: meta.last_log_id,
            last_membership: meta.last_membership.clone(),
            generation,
        });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, std::io::Error> {
        let shared = self.shared.clone();
        let newest = tokio::task::spawn_blocking(move || {
            // Under the lock: a save in progress finishes first.
            let _current = shared.current.lock().unwrap_or_else(|p| p.into_inner());
            match snapshot::newest(&shared.snapshot_dir)? {
                Some((meta, path, _)) => anyhow::Ok(Some((meta, std::fs::File::open(path)?))),
                None => Ok(None),
            }
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        Ok(newest.map(|(meta, file): (SnapshotMeta, _)| Snapshot {
            meta: meta.into_meta(),
            snapshot: tokio::fs::File::from_std(file),
        }))
    }
}

impl openraft_legacy::network_v1::SnapshotReceiverFactory<TypeConfig> for StateMachineStore {
    type SnapshotReceiver = tokio::fs::File;

    /// Chunks from the leader land in an unnamed file in the snapshot directory, not in
    /// memory, and it disappears by itself if the transfer never finishes.
    async fn begin_receiving_snapshot(&mut self) -> Result<tokio::fs::File, std::io::Error> {
        let dir = self.shared.snapshot_dir.clone();
        let file = tokio::task::spawn_blocking(move || {
            // Durably: the snapshot it becomes is renamed into this directory, and a node whose
            // first snapshot comes from the leader (a wiped member) has no other.
            crate::store::create_dir_durably(&dir)?;
            tempfile::tempfile_in(&dir)
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        Ok(tokio::fs::File::from_std(file))
    }
}

#[cfg(test)]
mod tests;
