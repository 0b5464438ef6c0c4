//! The spec tests' harness, also the node's (feature `testkit`): one leader writing entries
//! into one state. Every proposal is the next log index, stamped with the leader's monotonic
//! clock, so the lease clock is exactly the sum of the `elapse` calls since the first entry
//! (and `elect` changes the writing leader, §5.3). Never in a production build.

pub mod invariants;

use crate::command::{
    AcquireOp, Command, CreateOp, Op, Proposal, ReleaseOp, RenewOp, Reply, Stamp, TransferOp,
};
use crate::history::Event;
use crate::lease_clock::LeaderKey;
use crate::machine::{apply, EntryMeta, State};
use crate::policy::Policy;
use crate::query::{self, Answer, Query, Validation};
use crate::types::{Held, Lease, LeaseStatus, LeaseView, Mode, Refusal, Rejection};

pub const LEADER: LeaderKey = LeaderKey {
    term: 1,
    node_id: 1,
};
/// The wall clock of the stamps: this plus the monotonic reading.
pub const WALL_BASE_MS: u64 = 1_700_000_000_000;

/// The leader's stamp when its monotonic clock reads `mono_ms` (what the leader's plans read).
pub fn stamp_at(mono_ms: u64) -> Stamp {
    Stamp {
        mono_ms,
        wall_ms: WALL_BASE_MS + mono_ms,
        clock_epoch: 0,
    }
}

/// Who proposes an entry.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub principal: &'static str,
    pub admin: bool,
}

pub const ALICE: Caller = Caller {
    principal: "alice",
    admin: false,
};
pub const BOB: Caller = Caller {
    principal: "bob",
    admin: false,
};
pub const ROOT: Caller = Caller {
    principal: "root",
    admin: true,
};

/// A log of one leader's entries applied to one state.
pub struct Log {
    pub state: State,
    /// The index of the last entry.
    pub index: u64,
    /// The leader writing the entries.
    leader: LeaderKey,
    mono_ms: u64,
    pub require_registration: bool,
}

impl Default for Log {
    fn default() -> Self {
        Self::new()
    }
}

impl Log {
    /// A fresh state under the ad-hoc default policy.
    pub fn new() -> Self {
        Self::with_default_policy(Policy::ad_hoc())
    }

    /// A fresh state whose unregistered resources run under `default_policy`.
    pub fn with_default_policy(default_policy: Policy) -> Self {
        Log {
            state: State::with_default_policy(default_policy),
            index: 0,
            leader: LEADER,
            mono_ms: 5_000,
            require_registration: false,
        }
    }

    /// Another leader takes over; its monotonic clock reads `mono_ms` (SPEC §5.3).
    pub fn elect(&mut self, leader: LeaderKey, mono_ms: u64) {
        self.leader = leader;
        self.mono_ms = mono_ms;
    }

    /// The leader's clock moves on; the next entry carries it into the lease clock.
    pub fn elapse(&mut self, ms: u64) {
        self.mono_ms += ms;
    }

    /// The leader's monotonic clock reading for the next entry.
    pub fn mono_ms(&self) -> u64 {
        self.mono_ms
    }

    /// The committed lease clock.
    pub fn now_ms(&self) -> u64 {
        self.state.clock().now_ms()
    }

    pub fn propose(&mut self, caller: Caller, op: Op) -> Reply {
        self.propose_with(caller, None, op)
    }

    /// The next entry, with a `request_id` (SPEC §5).
    pub fn propose_with(&mut self, caller: Caller, request_id: Option<String>, op: Op) -> Reply {
        self.index += 1;
        let proposal = self.proposal(caller, request_id, op);
        let meta = EntryMeta {
            index: self.index,
            leader: self.leader,
        };
        apply(&mut self.state, meta, &Command::V1(proposal))
    }

    /// The next entry, carrying several proposals (the leader's batching, `coord::batch`).
    pub fn propose_batch(&mut self, proposals: Vec<(Caller, Op)>) -> Vec<Reply> {
        self.index += 1;
        let batch = proposals
            .into_iter()
            .map(|(caller, op)| self.proposal(caller, None, op))
            .collect();
        let meta = EntryMeta {
            index: self.index,
            leader: self.leader,
        };
        match apply(&mut self.state, meta, &Command::Batch(batch)) {
            Reply::Batch(replies) => replies,
            other => panic!("a batch answered {other:?}"),
        }
    }

    pub fn proposal(&self, caller: Caller, request_id: Option<String>, op: Op) -> Proposal {
        Proposal {
            stamp: stamp_at(self.mono_ms),
            principal: caller.principal.to_string(),
            admin: caller.admin,
            request_id,
            require_registration: self.require_registration,
            op,
        }
    }

    /// Registers `name` as the admin `root`; panics unless it is registered.
    #[track_caller]
    pub fn register(&mut self, name: &str, policy: Policy) {
        let reply = self.propose(ROOT, create(Some(name), policy));
        assert!(
            matches!(reply, Reply::Resource(_)),
            "register {name}: {reply:?}"
        );
    }

    pub fn acquire(&mut self, caller: Caller, op: AcquireOp) -> Reply {
        self.propose(caller, Op::Acquire(op))
    }

    pub fn renew(&mut self, caller: Caller, op: RenewOp) -> Reply {
        self.propose(caller, Op::Renew(op))
    }

    pub fn release(&mut self, caller: Caller, op: ReleaseOp) -> Reply {
        self.propose(caller, Op::Release(op))
    }

    pub fn transfer(&mut self, caller: Caller, op: TransferOp) -> Reply {
        self.propose(caller, Op::Transfer(op))
    }

    /// Replaces the state with what a node restored from its snapshot holds, after checking the
    /// two agree, on the replicated fields and on when the next lease or session falls due.
    #[track_caller]
    /// Both ways: in the format the state's rules write, and in format 9 (the live state
    /// and the archive's entries), whose restored state goes on.
    pub fn restore_from_snapshot(&mut self) {
        let copy = self.state.snapshot_copy();
        let body = crate::encoding::encode_state(&copy).expect("encode");
        let restored = crate::encoding::decode_state(&body).expect("decode");
        assert_eq!(restored, self.state);
        assert_eq!(restored.next_due_ms(), self.state.next_due_ms());
        let body = crate::encoding::encode_state_live(&copy).expect("encode format 9");
        let restored = crate::encoding::decode_state(&body).expect("decode format 9");
        assert_eq!(restored, self.state, "format 9");
        assert_eq!(restored.next_due_ms(), self.state.next_due_ms());
        // As a node keeps it (the live section over its archive), and as it sends that.
        let archive: std::sync::Arc<dyn crate::archive::Archive> =
            std::sync::Arc::new(crate::archive::MemArchive::default());
        let mut copy = copy;
        copy.move_into_archive(archive.clone());
        let (own, _) = crate::encoding::encode_state_own(&copy, Vec::new()).expect("own");
        let again = crate::encoding::decode_state_in(&own, archive.clone(), true).expect("own");
        assert_eq!(again, self.state, "own");
        if copy.rules() >= crate::rules::LIVE_SNAPSHOTS {
            let wanted = copy.wanted();
            let whole = crate::encoding::encode_state_whole(&own, &wanted, &*archive, Vec::new())
                .expect("whole");
            assert_eq!(whole, body, "sent whole");
        }
        self.state = restored;
    }

    pub fn tick(&mut self) -> Reply {
        self.propose(ROOT, Op::Tick)
    }

    pub fn query(&self, query: &Query) -> Answer {
        query::answer(&self.state, query)
    }

    pub fn validate(&self, resource: &str, lease_id: &str, fencing_token: u64) -> Validation {
        self.state.validate(resource, lease_id, fencing_token, None)
    }

    /// A resource's retained events, oldest first.
    pub fn events(&self, resource: &str) -> Vec<Event> {
        self.state
            .resource_ref(resource)
            .map(|rs| {
                let reader = self.state.log.reader();
                reader.events(resource, &rs.history).collect()
            })
            .unwrap_or_default()
    }

    /// The newest `n` events of a resource as (revision, kind), newest first.
    pub fn newest_events(&self, resource: &str, n: usize) -> Vec<(u64, super::history::EventKind)> {
        self.events(resource)
            .iter()
            .rev()
            .take(n)
            .map(|e| (e.revision, e.kind))
            .collect()
    }

    /// The live leases of a resource as (holder, fencing token), in grant order.
    pub fn holders(&self, resource: &str) -> Vec<(String, u64)> {
        pairs(&self.state.resource_view(resource).leases)
    }
}

/// An active lease view of `holder` on resource `r`, token 7, for tests that build replies
/// by hand: the rest set with struct update syntax on its `lease.held`.
pub fn view_of(holder: &str, mode: Mode) -> LeaseView {
    LeaseView {
        lease: Lease {
            resource: "r".into(),
            held: Held {
                position: 0,
                holder: holder.into(),
                principal: "p".into(),
                mode,
                units: 0,
                fencing_token: 7,
                acquired_at_ms: 0,
                expires_at_ms: 1,
                ttl_ms: 1,
                acquired_wall_ms: 0,
                metadata: Default::default(),
                idempotency_key: None,
                session: None,
            },
        },
        status: LeaseStatus::Active,
        expires_wall_ms: 0,
        remaining_ms: 0,
    }
}

pub fn pairs(views: &[LeaseView]) -> Vec<(String, u64)> {
    views
        .iter()
        .map(|v| (v.lease.holder.to_string(), v.lease.fencing_token))
        .collect()
}

pub fn create(name: Option<&str>, policy: Policy) -> Op {
    Op::CreateResource(CreateOp {
        name: name.map(str::to_string),
        policy,
    })
}

/// An exclusive acquire with the policy's default ttl, no units, no metadata.
pub fn acq(resource: &str, holder: &str) -> AcquireOp {
    AcquireOp {
        resource: resource.to_string(),
        holder: holder.to_string(),
        ttl_ms: None,
        mode: Mode::Exclusive,
        units: 0,
        metadata: Default::default(),
        idempotency_key: None,
        wait_ms: None,
    }
}

pub fn acq_ttl(resource: &str, holder: &str, ttl_ms: u64) -> AcquireOp {
    AcquireOp {
        ttl_ms: Some(ttl_ms),
        ..acq(resource, holder)
    }
}

pub fn shared(resource: &str, holder: &str, mode: Mode, units: u64) -> AcquireOp {
    AcquireOp {
        mode,
        units,
        ..acq(resource, holder)
    }
}

/// Names the lease by id (the way a client that kept its lease does).
pub fn renew_of(view: &LeaseView, ttl_ms: Option<u64>) -> RenewOp {
    RenewOp {
        resource: view.lease.resource.clone().to_string(),
        lease_id: view.lease.lease_id().to_string(),
        holder: view.lease.holder.clone().to_string(),
        fencing_token: view.lease.fencing_token,
        ttl_ms,
    }
}

/// Names a lease by holder and token only, without its id (`lease_id` is optional, SPEC §2.3).
pub fn renew_by_token(
    resource: &str,
    holder: &str,
    fencing_token: u64,
    ttl_ms: Option<u64>,
) -> RenewOp {
    RenewOp {
        resource: resource.to_string(),
        lease_id: String::new(),
        holder: holder.to_string(),
        fencing_token,
        ttl_ms,
    }
}

pub fn release_by_token(resource: &str, holder: &str, fencing_token: u64) -> ReleaseOp {
    ReleaseOp {
        resource: resource.to_string(),
        lease_id: String::new(),
        holder: holder.to_string(),
        fencing_token,
    }
}

pub fn release_of(view: &LeaseView) -> ReleaseOp {
    ReleaseOp {
        resource: view.lease.resource.clone().to_string(),
        lease_id: view.lease.lease_id().to_string(),
        holder: view.lease.holder.clone().to_string(),
        fencing_token: view.lease.fencing_token,
    }
}

pub fn transfer_of(view: &LeaseView, to_holder: &str, to_principal: Option<&str>) -> TransferOp {
    TransferOp {
        resource: view.lease.resource.clone().to_string(),
        lease_id: view.lease.lease_id().to_string(),
        holder: view.lease.holder.clone().to_string(),
        fencing_token: view.lease.fencing_token,
        to_holder: to_holder.to_string(),
        to_principal: to_principal.map(str::to_string),
    }
}

/// A registered policy (SPEC §4.13 defaults) with these shared modes and unit pool.
/// Registers "r" with a 10 s lifetime cap (index 1); alice holds it as "a" for 5 s (index 2,
/// token 2, acquired at lease time 0).
pub fn capped() -> (Log, LeaseView) {
    let mut log = Log::new();
    log.register(
        "r",
        Policy {
            max_lifetime_ms: 10_000,
            default_ttl_ms: 5_000,
            ..Policy::registered()
        },
    );
    let a = granted(&log.acquire(ALICE, acq_ttl("r", "a", 5_000)));
    (log, a)
}

/// The registered defaults, transferable.
pub fn transferable() -> Policy {
    Policy {
        transferable: true,
        ..Policy::registered()
    }
}

pub fn shared_policy(modes: &[Mode], total_units: u64) -> Policy {
    Policy {
        shared_modes: modes.to_vec(),
        total_units,
        ..Policy::registered()
    }
}

#[track_caller]
/// A policy whose reclaims close the resource for `lock_delay_ms`, reclaiming as soon as a
/// lease's ttl ends (no renewal grace).
pub fn lock_delay_policy(lock_delay_ms: u64) -> Policy {
    Policy {
        lock_delay_ms,
        renewal_grace_ms: 0,
        ..Policy::registered()
    }
}

/// A registered resource whose leases last at most (and by default) `max_ttl_ms`.
pub fn ttl_capped_policy(max_ttl_ms: u64) -> Policy {
    Policy {
        default_ttl_ms: max_ttl_ms,
        max_ttl_ms,
        ..lock_delay_policy(0)
    }
}

pub fn granted(reply: &Reply) -> LeaseView {
    match reply {
        Reply::Acquire(outcome) if outcome.granted => {
            assert_eq!(outcome.refusal, None);
            assert!(outcome.holders.is_empty(), "{outcome:?}");
            outcome.lease.clone().expect("a grant carries its lease")
        }
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// A refused acquire: its reason and the current holders as (holder, fencing token).
#[track_caller]
pub fn refused(reply: &Reply) -> (Refusal, Vec<(String, u64)>) {
    match reply {
        Reply::Acquire(outcome) if !outcome.granted => {
            assert_eq!(outcome.lease, None);
            let refusal = outcome.refusal.expect("a refusal carries its reason");
            (refusal, pairs(&outcome.holders))
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[track_caller]
pub fn lease(reply: &Reply) -> LeaseView {
    match reply {
        Reply::Lease(view) => view.clone(),
        other => panic!("expected a lease, got {other:?}"),
    }
}

#[track_caller]
pub fn rejection(reply: &Reply) -> Rejection {
    match reply {
        Reply::Rejected(rejection) => rejection.clone(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// The field an `invalid_argument` names.
#[track_caller]
pub fn invalid_field(reply: &Reply) -> String {
    match rejection(reply) {
        Rejection::InvalidArgument { field, .. } => field,
        other => panic!("expected invalid_argument, got {other:?}"),
    }
}

/// Pairs (holder, token) from string literals.
pub fn held(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|(h, t)| (h.to_string(), *t)).collect()
}
