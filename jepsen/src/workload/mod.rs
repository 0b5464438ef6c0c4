//! The clients: concurrent holders contending for a small pool of resources of three kinds,
//! each writing to a simulated downstream fenced store with its token:
//!
//! * `exclusive`: ad-hoc resources `r0…`, exclusive leases (the default policy);
//! * `shared`: registered `s0…` with `shared_modes` READ+WRITE and a pool of `total_units`:
//!   READ or WRITE leases of 1–3 units, sometimes an exclusive one;
//! * `transfer`: registered, transferable, exclusive-only `x0…`: holders hand their lease to
//!   another client, which learns it from the transfer's reply (or, when the transfer's outcome
//!   is unknown, from `ListLeases`) and carries on with the new token, while the old holder's
//!   token is dead (its writes are refused once the new holder wrote, its renew fails);
//! * `waiting`: registered, exclusive-only `w0…` that clients acquire with `on_conflict = WAIT`
//!   and a `wait_timeout` of 1–5 s, so that they queue behind each other and are admitted by the
//!   release or reclaim that frees the resource. Some cancel their own wait with `CancelWait`
//!   from another task; some give up before the wait ends (their outcome is unknown); some try a
//!   plain acquire, which must not barge past the queue.
//! * `many`: registered, exclusive-only `m0…` that clients take two or three at a time, in a
//!   random order, with one `AcquireMany` that waits 1–5 s (SPEC §4.25): all granted in one
//!   entry with one token, or none; each resource's part is recorded as an acquire of that
//!   resource (`many` names the call), so every per-resource check judges it too.
//! * `sessions`: registered, exclusive-only `e0…` taken on sessions (SPEC §4.24): a client
//!   creates a session with a holder of its own (`c3.s2`) and a ttl of 2–3 s, renews it from a
//!   second task every third of its ttl (which at times stalls past the ttl, as a paused
//!   process would), puts one to three leases on it (some waiting), writes with their tokens,
//!   at times releases one, and then closes the session or walks away and lets it expire.
//! * `fenced` (not in the default list: it needs PostgreSQL): ad-hoc exclusive `f0…` whose
//!   holders write to a register in PostgreSQL (`register`) through the guard (tenure-guard),
//!   stalling past their ttl at times before the write or inside its transaction, as a paused
//!   process would. The register's own record of the writes, read back after the run, is
//!   checked: writes took effect in token order (`checker::register`).
//!
//! Some holders stall past their ttl before writing, as a paused process would. Every call is
//! recorded as invoke → ok / fail / quota_exceeded / unknown. Watchers (`watchers`) keep
//! `Watch` streams open meanwhile and record what they are sent.

mod calls;
mod clients;
mod register;
mod sessions;
mod watchers;

use std::collections::BTreeMap;
use std::time::Duration;

pub use calls::{holder_name, Env, FencedStore, Recorder, SessionRef, Tenancy, Wait};
use clients::client_rng;
pub use clients::{client_loop, receiver_loop};
pub use register::{PgServer, Register};
pub use watchers::{read_events, watch_loop};

use crate::history::{Mode, ResourcePolicy, WatchScope};

/// The kinds of resources a run uses (`--workload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Exclusive,
    Shared,
    Transfer,
    Waiting,
    Many,
    Sessions,
    Fenced,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Exclusive,
        Kind::Shared,
        Kind::Transfer,
        Kind::Waiting,
        Kind::Many,
        Kind::Sessions,
        Kind::Fenced,
    ];

    pub fn parse(name: &str) -> anyhow::Result<Kind> {
        Ok(match name.trim() {
            "exclusive" => Kind::Exclusive,
            "shared" => Kind::Shared,
            "transfer" => Kind::Transfer,
            "waiting" => Kind::Waiting,
            "many" => Kind::Many,
            "sessions" => Kind::Sessions,
            "fenced" => Kind::Fenced,
            other => anyhow::bail!(
                "unknown workload `{other}` (exclusive, shared, transfer, waiting, many, sessions, fenced)"
            ),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Exclusive => "exclusive",
            Kind::Shared => "shared",
            Kind::Transfer => "transfer",
            Kind::Waiting => "waiting",
            Kind::Many => "many",
            Kind::Sessions => "sessions",
            Kind::Fenced => "fenced",
        }
    }

    /// The kind of a resource of the run, by its name (`f1` → `Fenced`).
    pub fn of(resource: &str) -> Option<Kind> {
        let digits = resource.trim_start_matches(|c: char| !c.is_ascii_digit());
        let prefix = &resource[..resource.len() - digits.len()];
        let numbered = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        Kind::ALL
            .into_iter()
            .find(|kind| numbered && kind.prefix() == prefix)
    }

    /// The first letter of the kind's resource names (`r0`, `s0`, `x0`, `w0`, `m0`, `e0`, `f0`).
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Exclusive => "r",
            Kind::Shared => "s",
            Kind::Transfer => "x",
            Kind::Waiting => "w",
            Kind::Many => "m",
            Kind::Sessions => "e",
            Kind::Fenced => "f",
        }
    }
}

#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub clients: u64,
    /// Ad-hoc exclusive resources (kind `exclusive`).
    pub resources: u64,
    pub kinds: Vec<Kind>,
    /// Registered shared resources (kind `shared`).
    pub shared_resources: u64,
    /// Registered transferable resources (kind `transfer`).
    pub transfer_resources: u64,
    /// Registered resources acquired with `WAIT` (kind `waiting`).
    pub waiting_resources: u64,
    /// Registered resources taken several at a time with `AcquireMany` (kind `many`).
    pub many_resources: u64,
    /// Registered resources taken on sessions (kind `sessions`).
    pub session_resources: u64,
    /// Ad-hoc exclusive resources whose holders write to the PostgreSQL register (kind
    /// `fenced`).
    pub fenced_resources: u64,
    /// The planted bug `--broken unguarded-writes`: the `fenced` clients write to the register
    /// without the guard.
    pub unguarded_writes: bool,
    /// The range of a session's ttl.
    pub session_ttl_min_ms: u64,
    pub session_ttl_max_ms: u64,
    /// The range of a `WAIT` acquire's `wait_timeout`.
    pub wait_min_ms: u64,
    pub wait_max_ms: u64,
    /// Chance that a client cancels its wait from another task before the wait ends.
    pub cancel_probability: f64,
    /// Chance that a client gives up on its wait before the wait ends (outcome unknown).
    pub give_up_probability: f64,
    /// Chance that a client on a waiting resource tries a plain (`FAIL`) acquire instead.
    pub barge_probability: f64,
    /// Tasks that keep `Watch` streams open during the run (see [`WorkloadConfig::watch_scopes`]).
    pub watchers: u64,
    /// The shared resources' pool.
    pub total_units: u64,
    /// The registered resources' renewal grace.
    pub renewal_grace_ms: u64,
    pub ttl_min_ms: u64,
    pub ttl_max_ms: u64,
    /// Chance that a holder stalls for 1.5 × ttl before its next write.
    pub stall_probability: f64,
    /// Chance, per round, that a holder of a transferable lease hands it over.
    pub transfer_probability: f64,
    /// Chance that a holder leaves its lease to expire instead of releasing it (its holder
    /// may find it still held when it acquires the resource again).
    pub abandon_probability: f64,
    /// Deadline of each call, retries included: past it the outcome is unknown.
    pub call_timeout: Duration,
}

impl WorkloadConfig {
    /// Lock cycles in which every call should succeed (`--calm`): no stalls past a ttl, no
    /// transfers, no lease left to expire, and ttls of 6 to 8 s, longer than a loaded
    /// machine's scheduling ever holds a client up.
    pub fn calm(self) -> Self {
        WorkloadConfig {
            stall_probability: 0.0,
            transfer_probability: 0.0,
            abandon_probability: 0.0,
            ttl_min_ms: 6_000,
            ttl_max_ms: 8_000,
            ..self
        }
    }
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            clients: 12,
            resources: 8,
            kinds: Kind::ALL
                .into_iter()
                .filter(|kind| *kind != Kind::Fenced)
                .collect(),
            shared_resources: 2,
            transfer_resources: 2,
            waiting_resources: 2,
            many_resources: 4,
            session_resources: 4,
            fenced_resources: 2,
            unguarded_writes: false,
            session_ttl_min_ms: 2_000,
            session_ttl_max_ms: 3_000,
            wait_min_ms: 1_000,
            wait_max_ms: 5_000,
            cancel_probability: 0.15,
            give_up_probability: 0.1,
            barge_probability: 0.2,
            watchers: 3,
            total_units: 4,
            renewal_grace_ms: 500,
            ttl_min_ms: 1_000,
            ttl_max_ms: 3_000,
            stall_probability: 0.1,
            transfer_probability: 0.4,
            abandon_probability: 0.2,
            call_timeout: Duration::from_secs(2),
        }
    }
}

impl WorkloadConfig {
    /// Every resource the clients use, with its kind, in a fixed order.
    pub fn all_resources(&self) -> Vec<(String, Kind)> {
        let mut out = Vec::new();
        for kind in Kind::ALL.into_iter().filter(|k| self.kinds.contains(k)) {
            let n = match kind {
                Kind::Exclusive => self.resources,
                Kind::Shared => self.shared_resources,
                Kind::Transfer => self.transfer_resources,
                Kind::Waiting => self.waiting_resources,
                Kind::Many => self.many_resources,
                Kind::Sessions => self.session_resources,
                Kind::Fenced => self.fenced_resources,
            };
            out.extend((0..n).map(|i| (format!("{}{i}", kind.prefix()), kind)));
        }
        out
    }

    /// What each watcher watches, in turn: every resource (prefix ""), the resources of one
    /// kind (by prefix; the waiting ones when they run), one resource of that kind.
    pub fn watch_scopes(&self) -> Vec<WatchScope> {
        let resources = self.all_resources();
        let focus = resources
            .iter()
            .find(|(_, kind)| *kind == Kind::Waiting)
            .or(resources.first());
        (0..self.watchers)
            .map(|i| match (i % 3, focus) {
                (1, Some((_, kind))) => WatchScope::Prefix(kind.prefix().to_owned()),
                (2, Some((name, _))) => WatchScope::Resource(name.clone()),
                _ => WatchScope::Prefix(String::new()),
            })
            .collect()
    }

    /// The quotas a `--secure` run sets for its clients' principal, so that a normal run
    /// reaches them now and then. Each client holds the lease it acquired and, at times, one
    /// handed to it; a lease left to expire stays live (and counted) until it is reclaimed. So
    /// the clients together hold about as many leases as there are clients, at the limit about
    /// a sixth of the time (measured: a 30 s run with every nemesis refuses 10–15 acquires of
    /// some 450). Waits queue on the `waiting` resources (three at once is reached about a
    /// quarter of the time) and, two or three places each, on the `many` ones (one more per
    /// client). Leases on sessions count too, and a session left to expire keeps its leases
    /// until it is reclaimed. Measured over ten minutes with every nemesis (seed 41203): one
    /// wait in twenty is refused for the `waiters` quota, one acquire in twenty for `leases`.
    pub fn quota_limits(&self) -> BTreeMap<String, u64> {
        let mut limits = BTreeMap::new();
        limits.insert("leases".to_owned(), self.clients.max(2));
        if self.kinds.contains(&Kind::Waiting) && self.waiting_resources > 0 {
            limits.insert("waiters".to_owned(), 3);
        }
        // A multi-wait holds a place in two or three rooms.
        if self.kinds.contains(&Kind::Many) && self.many_resources > 1 {
            let waiters = limits.get("waiters").copied().unwrap_or(0);
            limits.insert("waiters".to_owned(), waiters + self.clients);
        }
        limits
    }

    /// The policy the run registers for a resource of this kind (None: ad hoc).
    pub fn policy(&self, kind: Kind) -> Option<ResourcePolicy> {
        let registered = ResourcePolicy {
            renewal_grace_ms: self.renewal_grace_ms,
            default_ttl_ms: self.ttl_max_ms,
            max_ttl_ms: 10 * self.ttl_max_ms,
            ..ResourcePolicy::default()
        };
        match kind {
            Kind::Exclusive | Kind::Fenced => None,
            Kind::Waiting | Kind::Many => Some(registered),
            // A lease on a session lives as its session does; with no grace here (nor in the ad-hoc
            // policy) its session has none either (§4.24: the longest of its resources').
            Kind::Sessions => Some(ResourcePolicy {
                renewal_grace_ms: 0,
                ..registered
            }),
            Kind::Shared => Some(ResourcePolicy {
                shared_modes: vec![Mode::Read, Mode::Write],
                total_units: self.total_units,
                ..registered
            }),
            Kind::Transfer => Some(ResourcePolicy {
                transferable: true,
                ..registered
            }),
        }
    }
}

/// A lease handed to a client by a transfer.
#[derive(Clone, Debug)]
pub enum Handoff {
    /// The transfer's reply named the new lease.
    Known(Tenancy),
    /// The transfer's outcome is unknown: look for the lease with `ListLeases`.
    Maybe { resource: String },
}
