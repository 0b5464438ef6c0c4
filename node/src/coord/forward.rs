//! Every node serves every call (SPEC §2): writes and linearizable reads run on the leader;
//! a follower hands them over the internal `Raft.Propose` / `Raft.Read` RPCs and retries
//! across elections with the same `request_id`, so each command applies at most once.

use crate::store::WatchReceiver as _;
use std::time::Duration;

use openraft::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::auth::Caller;
use crate::coord::in_flight::InFlight;
use crate::coord::membership::{AdminReply, AdminRequest};
use crate::coord::read_barrier::ReadBarrier;
use crate::coord::unstamped::Unstamped;
use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::unencoded::Unencoded;
use crate::lease::{self, Answer, Command, Op, Proposal, Query, Reply, Stamp};
use crate::network::carried::{self, Carried};
use crate::network::{decode, PeerCallError, PeerClient};
use crate::store::{NodeId, Raft};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadRequest {
    pub query: Query,
}

/// Why a node did not serve a handed-over call: the caller retries elsewhere.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum NotServed {
    NotLeader,
    Unavailable(String),
    /// The leader's queue is full (`coord::batch`): the caller should back off, not retry at
    /// once (appended: older releases keep their variant numbers).
    Busy(String),
}

pub type ProposeResult = Result<Reply, NotServed>;
/// An answer and the applied index it was read at.
pub type ReadResult = Result<(Answer, u64), NotServed>;

const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(200);

fn not_served<E: std::fmt::Display>(
    error: &RaftError<crate::store::TypeConfig, E>,
    forward: bool,
) -> NotServed {
    if forward {
        NotServed::NotLeader
    } else {
        NotServed::Unavailable(error.to_string())
    }
}

/// The outcome of one ReadIndex round, shared by every read of its batch.
pub type ReadRound = Result<(), NotServed>;

/// The node's read barrier: each round is `ensure_linearizable`, i.e. confirm leadership with a
/// quorum heartbeat and take the read index (max of the leader's first entry and the commit
/// index), then wait until the state machine has applied it. A round that outlasts `limit`
/// fails its batch rather than hold up every later read.
pub fn read_barrier(raft: Raft, limit: Duration) -> ReadBarrier<ReadRound> {
    ReadBarrier::new(move || {
        let raft = raft.clone();
        async move {
            match tokio::time::timeout(
                limit,
                raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex),
            )
            .await
            {
                Ok(Ok(_read_log_id)) => Ok(()),
                Ok(Err(e)) => {
                    let forward = matches!(
                        &e,
                        RaftError::APIError(LinearizableReadError::ForwardToLeader(_))
                    );
                    Err(not_served(&e, forward))
                }
                Err(_) => Err(NotServed::Unavailable(
                    "the leader did not confirm a quorum in time".into(),
                )),
            }
        }
    })
}

/// Where a call is served this attempt.
enum Target {
    Local,
    Remote(NodeId, String),
}

impl Node {
    /// Runs `attempt` against the current leader until it is served or the request timeout
    /// passes, waiting out elections with a short backoff. `unserved` is the error then. A
    /// node that was removed from the cluster answers at once, so that clients try another.
    async fn through_leader<T, F, Fut>(&self, unserved: &str, mut attempt: F) -> Result<T, ApiError>
    where
        F: FnMut(Target) -> Fut,
        Fut: std::future::Future<Output = Result<T, NotServed>>,
    {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut backoff = RETRY_FIRST;
        loop {
            if self.removed() {
                return Err(ApiError::Unavailable(
                    "this node is not a member of the cluster (as far as its log shows): ask another node"
                        .into(),
                ));
            }
            // The leader as openraft names it, which may be a node the membership no longer
            // has (a removed leader, until the election): then there is no target, and the
            // wait below is for that name to change.
            let tried = self.raft.metrics().borrow_watched().current_leader;
            let target = match self.leader() {
                Some((id, _)) if id == self.id => Some(Target::Local),
                Some((id, addr)) => Some(Target::Remote(id, addr)),
                None => None,
            };
            if let Some(target) = target {
                match tokio::time::timeout_at(deadline, attempt(target)).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(NotServed::Busy(detail))) => return Err(ApiError::Busy(detail)),
                    Ok(Err(why)) => tracing::debug!(?why, "not served; retrying"),
                    Err(_) => return Err(ApiError::Unavailable(unserved.into())),
                }
            }
            if Instant::now() + backoff >= deadline {
                return Err(ApiError::Unavailable(unserved.into()));
            }
            // Retry after the backoff, or as soon as this node learns of another leader: a
            // failover costs the election, not the election plus a backoff step.
            self.await_leader_change(tried, Instant::now() + backoff)
                .await;
            backoff = (backoff * 2).min(RETRY_MAX);
        }
    }

    /// Whether this node knows a membership that leaves it out (one that has not joined yet
    /// knows none, and waits for a leader like any member).
    fn removed(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let membership = metrics.membership_config.membership();
        membership.nodes().next().is_some() && membership.get_node(&self.id).is_none()
    }

    /// Returns when this node's view of the leader is no longer `from`, or at `until`.
    async fn await_leader_change(&self, from: Option<NodeId>, until: Instant) {
        let mut metrics = self.raft.metrics();
        loop {
            if metrics.borrow_and_update().current_leader != from {
                return;
            }
            match tokio::time::timeout_at(until, metrics.changed()).await {
                Ok(Ok(())) => continue,
                // The deadline passed, or the node is shutting down.
                _ => return,
            }
        }
    }

    /// What `caller` asks this node to commit: `op` under `request_id`, with this node's
    /// `--require-registration`. The leader stamps it.
    pub fn proposal(&self, caller: Caller, request_id: String, op: Op) -> Proposal {
        Proposal {
            stamp: Stamp::default(),
            principal: caller.principal,
            admin: caller.admin,
            request_id: Some(request_id),
            require_registration: self.config.require_registration,
            op,
        }
    }

    /// Commits `proposal` through the leader, wherever it is, and returns the applied reply.
    /// Its stamp is the leader's to take.
    pub async fn propose(&self, proposal: Proposal) -> Result<Reply, ApiError> {
        self.gate(&proposal.op)?;
        let proposal = &proposal;
        self.through_leader(
            "no leader committed the request in time; its outcome is unknown: retry with the same request_id",
            move |target| async move {
                match target {
                    Target::Local => self.propose_local(proposal.clone()).await,
                    Target::Remote(id, addr) => {
                        self.forward(id, &addr, Forwarded::Propose(proposal)).await
                    }
                }
            },
        )
        .await
    }

    /// Stamps and commits on this node, if it is the leader, in the next entry the batcher
    /// forms (see `coord::batch`).
    pub async fn propose_local(&self, proposal: Proposal) -> ProposeResult {
        if self.handing_over() {
            return Err(NotServed::NotLeader);
        }
        // A follower gated it against its own state; the leader's may not have applied the
        // raise yet: nothing was proposed, and the caller tries again shortly.
        if let Err(refused) = self.gate(&proposal.op) {
            return Err(NotServed::Busy(format!(
                "{refused} (the leader has not applied the raise yet): nothing was done"
            )));
        }
        let copy = InFlight::enter(self, &proposal);
        if let Some(refused) = self.refused_before_proposing(&proposal, &copy).await {
            return Ok(refused);
        }
        self.batcher.propose(proposal).await
    }

    /// The answer to a write that would certainly be refused (its principal's quotas, its
    /// request id, its resource held: `State::certainly_refused`), given without proposing
    /// it, so that a client sending such writes as fast as it can fills no node's log or disk
    /// (SPEC §4.21). The
    /// state is asked again after a read barrier: it then holds every write acknowledged
    /// before this one, so the refusal is the answer apply would give right after them. It
    /// must be fresh too (`State::is_fresh`): a stale one is brought up to date by a `Tick`.
    async fn refused_before_proposing(
        &self,
        proposal: &Proposal,
        copy: &InFlight<'_>,
    ) -> Option<Reply> {
        let me = crate::lease::LeaderKey {
            term: self.raft.metrics().borrow_watched().current_term,
            node_id: self.id,
        };
        // A retry whose first copy is still on its way is proposed: the first may be granted
        // after a release this state does not hold yet, and the retry must get its answer.
        // Read parked (`store::state_machine::lock`): every write on the leader reads here.
        let refused = || async {
            if copy.has_another() {
                return None;
            }
            (self.sm.read_parked().await.state).certainly_refused(proposal, me, &self.clock.stamp())
        };
        refused().await?;
        if self.own_commit.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        let fresh =
            || async { (self.sm.read_parked().await.state).is_fresh(me, &self.clock.stamp()) };
        // The state may go stale while the barrier is crossed (a quiet cluster's newest entry
        // ages past `FRESH_MS`): then once more, rather than proposing what is refused.
        for _ in 0..2 {
            if !fresh().await {
                // Time may have freed what refuses it: one `Tick`, shared by the writes that
                // find the state stale meanwhile, settles it (a few bytes in the log, not the
                // write).
                let _refreshing = self.refreshing.lock().await;
                if !fresh().await {
                    self.batcher
                        .propose(crate::coord::timers::own(crate::lease::Op::Tick))
                        .await
                        .ok()?;
                }
            }
            match self.reads.read().await {
                Ok(Ok(())) => {}
                _ => return None,
            }
            if fresh().await {
                let refused = refused().await?;
                self.refused_before_proposing
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Some(refused);
            }
        }
        None
    }

    /// This leader is handing leadership over: writes and reads wait for the next leader.
    fn handing_over(&self) -> bool {
        self.handing_over.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Serves a `Cluster` change on the leader, wherever it is (see `coord::membership`).
    pub async fn admin(&self, request: AdminRequest) -> Result<AdminReply, ApiError> {
        let request = &request;
        self.through_leader(
            "no leader answered in time; the change may or may not have been made (see `tenure cluster status`)",
            move |target| async move {
                match target {
                    Target::Local => self.admin_local(request).await,
                    Target::Remote(id, addr) => {
                        self.forward(id, &addr, Forwarded::Admin(request)).await
                    }
                }
            },
        )
        .await?
        .map_err(ApiError::from)
    }

    /// Answers `query` linearizably (through the leader's ReadIndex), or from local state when
    /// `stale`. Returns the answer and the applied index it was read at.
    pub async fn query(&self, query: Query, stale: bool) -> Result<(Answer, u64), ApiError> {
        if stale || self.config.breaks_linearizable_reads() {
            if let Some(why) = self.sm.halted() {
                // Its state stopped at what it could apply: not an answer to give.
                return Err(ApiError::Unavailable(format!(
                    "this node stopped applying the log: {why}: ask another node"
                )));
            }
            return Ok(self.read_local(&query).await);
        }
        let request = &ReadRequest { query };
        self.through_leader(
            "no leader confirmed a quorum in time",
            move |target| async move {
                match target {
                    Target::Local => self.query_local(&request.query).await,
                    Target::Remote(id, addr) => {
                        self.forward(id, &addr, Forwarded::Read(request)).await
                    }
                }
            },
        )
        .await
    }

    /// A linearizable read on this node, if it is the leader: a quorum round that started
    /// after this call (shared with the reads that arrived alongside, see [`ReadBarrier`]),
    /// then the state at or after that round's read index.
    pub async fn query_local(&self, query: &Query) -> ReadResult {
        if self.handing_over() {
            return Err(NotServed::NotLeader);
        }
        if self.own_commit.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            // The leader timer commits a Tick first thing; until then the read index may be stale.
            return Err(NotServed::Unavailable(
                "this leader has not committed an entry of its own yet".into(),
            ));
        }
        match self.reads.read().await {
            Ok(Ok(())) => Ok(self.read_local(query).await),
            Ok(Err(why)) => Err(why),
            Err(stopped) => Err(NotServed::Unavailable(stopped.to_string())),
        }
    }

    async fn read_local(&self, query: &Query) -> (Answer, u64) {
        let applied = self.sm.read_parked().await;
        (
            lease::query::answer(&applied.state, query),
            applied.last_applied.map_or(0, |id| id.index),
        )
    }

    /// Hands a call to the leader `leader` at `addr` and decodes its `Result<T, NotServed>`,
    /// made whole when the leader carried the parts its encoding leaves out (`network::carried`).
    /// A refused connection tells `succession` the leader's process is gone.
    async fn forward<T: serde::de::DeserializeOwned + Unencoded>(
        &self,
        leader: NodeId,
        addr: &str,
        call: Forwarded<'_>,
    ) -> Result<T, NotServed> {
        let unavailable =
            |e: &dyn std::fmt::Display| NotServed::Unavailable(format!("leader at {addr}: {e}"));
        let reply = match call {
            Forwarded::Propose(proposal) => {
                let send = |mut client: PeerClient, body| async move { client.propose(body).await };
                self.peers.call(addr, &Unstamped::of(proposal), send).await
            }
            Forwarded::Read(request) => {
                let send = |mut client: PeerClient, body| async move { client.read(body).await };
                self.peers.call(addr, request, send).await
            }
            Forwarded::Admin(request) => {
                let send = |mut client: PeerClient, body| async move { client.admin(body).await };
                self.peers.call(addr, request, send).await
            }
        };
        let response = reply.map_err(|e| {
            if let PeerCallError::Status(status) = &e {
                if crate::coord::succession::refused(status) {
                    self.succession.leader_refused(leader);
                }
            }
            unavailable(&e)
        })?;
        if carried::carries(response.metadata()) {
            decode::<Carried<Result<T, NotServed>>>(response.get_ref())
                .map_err(|e| unavailable(&e))?
                .0
                .into_reply()
                .map_err(|e| unavailable(&e))?
        } else {
            decode::<Result<T, NotServed>>(response.get_ref())
                .map_err(|e| unavailable(&e))?
                .0
        }
    }

    /// The leader as this node knows it: id and address.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let id = metrics.current_leader?;
        let node: &BasicNode = metrics.membership_config.membership().get_node(&id)?;
        Some((id, node.addr.clone()))
    }
}

enum Forwarded<'a> {
    Propose(&'a Proposal),
    Read(&'a ReadRequest),
    Admin(&'a AdminRequest),
}

/// The leader's proposal batcher: stamps each entry with this node's clocks and commits it
/// through `raft`, noting the index in `own_commit`.
pub fn batcher(
    raft: crate::store::Raft,
    clock: std::sync::Arc<crate::coord::stamp_clock::NodeClock>,
    own_commit: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> crate::coord::batch::Batcher {
    crate::coord::batch::Batcher::start(
        move || clock.stamp(),
        move |command: Command| {
            let raft = raft.clone();
            let own_commit = own_commit.clone();
            async move {
                match raft.client_write(command).await {
                    Ok(response) => {
                        own_commit
                            .fetch_max(response.log_id.index, std::sync::atomic::Ordering::Relaxed);
                        Ok(response.data)
                    }
                    Err(e) => {
                        let forward = matches!(
                            &e,
                            RaftError::APIError(ClientWriteError::ForwardToLeader(_))
                        );
                        Err(not_served(&e, forward))
                    }
                }
            }
        },
    )
}
