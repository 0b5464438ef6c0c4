//! Sessions (SPEC §4.24): one liveness record that carries many leases and waits. A session is
//! renewed as a whole; when it ends (closed, or reclaimed past its expiry and grace) every
//! lease on it ends and every wait on it is cancelled, in that one entry.
//!
//! A lease on a session has no expiry of its own: it shows its session's ([`State::expiry_of`])
//! and is not in the lease expiry index; only the session is due. Which leases and waits a
//! session carries is kept in the session ([`Session::leases`], [`Session::waits`]), and each
//! lease or waiter names its session in memory only, set again when a snapshot loads: the
//! encodings of leases and waiters (snapshots, remembered replies) are those of before sessions.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::command::{CloseSessionOp, CreateSessionOp, RenewSessionOp, Reply};
use super::history;
use super::machine::{check_name, check_ttl, Ctx, State};
use super::policy;
use super::quota::{metadata_cost, Quota};
use super::types::{Held, LeaseId, LeaseStatus, LeaseView, Metadata, Name, Rejection};

mod carry;

/// Leases and waits one session may carry at once: a session ends all of them in one entry.
pub const MAX_SESSION_ITEMS: usize = 10_000;

/// One liveness record. Times are lease-clock milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub holder: Name,
    pub principal: Name,
    pub ttl_ms: u64,
    pub created_at_ms: u64,
    pub created_wall_ms: u64,
    pub expires_at_ms: u64,
    pub metadata: Metadata,
    /// The live leases on it, as (resource, lease id).
    pub leases: BTreeSet<(Name, LeaseId)>,
    /// Its waits, as (resource, wait id).
    pub waits: BTreeSet<(Name, u64)>,
    /// The renewal grace of each lease's resource, and how many leases have it: the session's
    /// grace is the longest of them and the ad-hoc policy's ([`State::session_grace_ms`]).
    /// Derived from `leases` (policies never change), so snapshots do not hold it.
    #[serde(skip)]
    pub graces: BTreeMap<u64, u32>,
}

/// A session id as written: `ses_<index>`, the index of the entry that created it.
pub fn session_name(index: u64) -> String {
    format!("ses_{index}")
}

/// The index a session id names, read only in the form it is written; `None` if malformed.
pub fn parse_session_id(session_id: &str) -> Option<NonZeroU64> {
    let digits = session_id.strip_prefix("ses_")?;
    let canonical = !digits.is_empty()
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    canonical.then(|| digits.parse().ok()).flatten()
}

/// A session id from a request: `invalid_argument` naming `session_id` unless well formed.
pub(super) fn session_arg(session_id: &str) -> Result<NonZeroU64, Rejection> {
    parse_session_id(session_id).ok_or_else(|| {
        Rejection::invalid(
            "session_id",
            "must be ses_<number>, as CreateSession answered",
        )
    })
}

/// How a session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionStatus {
    Active,
    /// Past its expiry, inside the renewal grace: still holds what it carries.
    Grace,
    /// Ended by `CloseSession`.
    Closed,
    /// Reclaimed past its expiry and grace.
    Expired,
}

/// A session as replies show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    pub id: u64,
    pub holder: Name,
    pub principal: Name,
    pub ttl_ms: u64,
    pub created_wall_ms: u64,
    pub expires_wall_ms: u64,
    pub remaining_ms: u64,
    pub status: SessionStatus,
    pub metadata: Metadata,
    pub lease_count: u32,
    pub wait_count: u32,
    /// The first leases on it, by resource (up to [`SESSION_LEASES_SHOWN`]); for a session that
    /// just ended, the leases it ended.
    pub leases: Vec<LeaseView>,
}

/// Leases a session's view lists.
pub const SESSION_LEASES_SHOWN: usize = 100;

impl State {
    /// The session with this index, if it is live.
    pub fn session(&self, id: u64) -> Option<&Session> {
        self.sessions.get(&id).map(|s| &**s)
    }

    /// Live sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Whether `session` is past its expiry and grace (ended by the next entry that settles
    /// it): reads show it as gone.
    pub(crate) fn session_is_due(&self, session: &Session) -> bool {
        session
            .expires_at_ms
            .saturating_add(self.session_grace_ms(session))
            <= self.clock.now_ms()
    }

    /// When a lease ends unless renewed: its own expiry, or its session's.
    pub(crate) fn expiry_of(&self, lease: &Held) -> u64 {
        lease
            .session
            .and_then(|id| self.sessions.get(&id.get()))
            .map_or(lease.expires_at_ms, |s| s.expires_at_ms)
    }

    /// How long a session stays in its grace past its expiry: the longest `renewal_grace`
    /// among the ad-hoc policy and the policies of the resources it holds leases on, so that
    /// no lease on it ends before its own resource's grace does, and all end together.
    pub(crate) fn session_grace_ms(&self, session: &Session) -> u64 {
        let longest = session.graces.last_key_value().map_or(0, |(ms, _)| *ms);
        longest.max(self.default_policy.renewal_grace_ms)
    }

    fn session_due_key(&self, id: u64, session: &Session) -> (u64, u64) {
        (
            session
                .expires_at_ms
                .saturating_add(self.session_grace_ms(session)),
            id,
        )
    }

    pub(crate) fn session_view(
        &self,
        id: u64,
        session: &Session,
        status: SessionStatus,
        leases: Vec<LeaseView>,
    ) -> SessionView {
        let now_ms = self.clock.now_ms();
        let ended = matches!(status, SessionStatus::Closed | SessionStatus::Expired);
        SessionView {
            id,
            holder: session.holder.clone(),
            principal: session.principal.clone(),
            ttl_ms: session.ttl_ms,
            created_wall_ms: session.created_wall_ms,
            expires_wall_ms: self.clock.wall_of(session.expires_at_ms),
            remaining_ms: if ended {
                0
            } else {
                session.expires_at_ms.saturating_sub(now_ms)
            },
            status,
            metadata: session.metadata.clone(),
            lease_count: session.leases.len() as u32,
            wait_count: session.waits.len() as u32,
            leases,
        }
    }

    /// A live session as reads show it: its first leases, and whether it is in its grace.
    pub fn live_session_view(&self, id: u64, session: &Session) -> SessionView {
        let status = if self.clock.now_ms() < session.expires_at_ms {
            SessionStatus::Active
        } else {
            SessionStatus::Grace
        };
        let leases = session
            .leases
            .iter()
            .take(SESSION_LEASES_SHOWN)
            .filter_map(|(resource, lease_id)| {
                let lease = self.resources.get(resource)?.lease(*lease_id)?;
                Some(self.live_view(resource, lease))
            })
            .collect();
        self.session_view(id, session, status, leases)
    }

    /// `CreateSession`: holder → ttl (the ad-hoc policy's default and bounds) → metadata →
    /// the principal's `sessions` and `metadata_bytes` quotas.
    pub(super) fn create_session(
        &mut self,
        ctx: &Ctx<'_>,
        op: &CreateSessionOp,
    ) -> Result<Reply, Rejection> {
        let ttl_ms = self.session_room_for(ctx, op)?;
        if self.sessions.contains_key(&ctx.index) {
            // One session per entry: a command without a resource commits alone.
            return Err(Rejection::invalid(
                "session",
                "only one session may be created per log entry",
            ));
        }
        let now_ms = self.clock.now_ms();
        let session = Session {
            holder: op.holder.as_str().into(),
            principal: ctx.principal.into(),
            ttl_ms,
            created_at_ms: now_ms,
            created_wall_ms: self.clock.wall_ms(),
            expires_at_ms: now_ms.saturating_add(ttl_ms),
            metadata: op.metadata.clone().into(),
            leases: BTreeSet::new(),
            waits: BTreeSet::new(),
            graces: BTreeMap::new(),
        };
        self.count_session(&session, 1);
        self.indexes
            .track_session(self.session_due_key(ctx.index, &session));
        let view = self.live_session_view(ctx.index, &session);
        self.sessions.insert(ctx.index, Arc::new(session));
        Ok(Reply::Session(Box::new(view)))
    }

    /// Whether `op` may create a session, every check of [`State::create_session`] but the
    /// entry's own: holder → ttl → metadata → quotas. Its ttl.
    pub(crate) fn session_room_for(
        &self,
        ctx: &Ctx<'_>,
        op: &CreateSessionOp,
    ) -> Result<u64, Rejection> {
        check_name("holder", &op.holder)?;
        let ttl_ms = op.ttl_ms.unwrap_or(self.default_policy.default_ttl_ms);
        check_ttl(&self.default_policy, ttl_ms)?;
        policy::check_metadata(
            &op.metadata,
            self.default_policy.max_metadata_bytes as usize,
        )?;
        if !ctx.quota_exempt() {
            self.quotas.admit_all(
                ctx.principal,
                &[
                    (Quota::Sessions, 1),
                    (Quota::MetadataBytes, metadata_cost(&op.metadata)),
                ],
            )?;
        }
        Ok(ttl_ms)
    }

    /// The live session a request names, which the caller may act on: id → existence (a
    /// session past its grace is reclaimed first) → its principal or an admin.
    pub(crate) fn session_for(
        &mut self,
        ctx: &Ctx<'_>,
        session_id: &str,
    ) -> Result<(u64, Arc<Session>), Rejection> {
        let id = session_arg(session_id)?.get();
        self.settle_session(ctx.index, id);
        let session = self.sessions.get(&id).cloned().ok_or_else(|| {
            Rejection::SessionNotFound(format!(
                "{session_id}: it was closed, it expired, or it never existed"
            ))
        })?;
        if !ctx.admin && session.principal != ctx.principal {
            return Err(Rejection::InsufficientPermissions(format!(
                "only the session's principal or an admin may use session {session_id}"
            )));
        }
        Ok((id, session))
    }

    /// `RenewSession`: expires_at = now + its ttl; what it carries lives on with it.
    pub(super) fn renew_session(
        &mut self,
        ctx: &Ctx<'_>,
        op: &RenewSessionOp,
    ) -> Result<Reply, Rejection> {
        let (id, session) = self.session_for(ctx, &op.session_id)?;
        let old_key = self.session_due_key(id, &session);
        let expires_at_ms = self.clock.now_ms().saturating_add(session.ttl_ms);
        // The map's copy is changed in place only while no other handle shares it.
        drop(session);
        self.indexes.untrack_session(&old_key);
        let Some(session) = self.sessions.get_mut(&id).map(Arc::make_mut) else {
            return Err(Rejection::SessionNotFound(op.session_id.clone()));
        };
        session.expires_at_ms = expires_at_ms;
        let session = Arc::clone(&self.sessions[&id]);
        self.indexes
            .track_session(self.session_due_key(id, &session));
        // Counts, not leases: a renewal is a heartbeat, answered small.
        let status = SessionStatus::Active;
        Ok(Reply::Session(Box::new(self.session_view(
            id,
            &session,
            status,
            Vec::new(),
        ))))
    }

    /// `CloseSession`: releases every lease on it and cancels every wait, in this entry.
    pub(super) fn close_session(
        &mut self,
        ctx: &Ctx<'_>,
        op: &CloseSessionOp,
    ) -> Result<Reply, Rejection> {
        let (id, _) = self.session_for(ctx, &op.session_id)?;
        let (view, _) = self.end_session(ctx.index, ctx.principal, id, SessionStatus::Closed);
        Ok(Reply::Session(Box::new(view)))
    }

    /// Ends session `id`: each lease on it released (closed) or reclaimed (expired), each wait
    /// cancelled, all in the entry `index`. Returns the session's last view and the views of
    /// the leases it ended.
    pub(crate) fn end_session(
        &mut self,
        index: u64,
        actor: &str,
        id: u64,
        how: SessionStatus,
    ) -> (SessionView, Vec<LeaseView>) {
        // Its lists are taken out of the map's copy (changed in place): the leases and waits
        // ended below detach from an empty list instead of each copying a shared one.
        let Some(live) = self.sessions.get_mut(&id).map(Arc::make_mut) else {
            return (self.empty_view(id, how), Vec::new());
        };
        let leases = std::mem::take(&mut live.leases);
        let waits = std::mem::take(&mut live.waits);
        self.indexes.on_sessions(leases.len(), -1);
        let status = match how {
            SessionStatus::Closed => LeaseStatus::Released,
            _ => LeaseStatus::Reclaimed,
        };
        let mut ended = Vec::with_capacity(leases.len());
        for (resource, lease_id) in &leases {
            if let Some(view) = self.end_lease(index, actor, resource, *lease_id, status) {
                ended.push(view);
            }
        }
        for (resource, wait_id) in &waits {
            self.cancel_session_wait(index, actor, resource, *wait_id);
        }
        let Some(session) = self.sessions.remove(&id) else {
            return (self.empty_view(id, how), ended);
        };
        let mut session = Arc::unwrap_or_clone(session);
        (session.leases, session.waits) = (leases, waits);
        self.indexes
            .untrack_session(&self.session_due_key(id, &session));
        self.count_session(&session, -1);
        let shown = ended.iter().take(SESSION_LEASES_SHOWN).cloned().collect();
        let view = self.session_view(id, &session, how, shown);
        (view, ended)
    }

    /// The view of a session this state does not hold (ended already).
    fn empty_view(&self, id: u64, how: SessionStatus) -> SessionView {
        SessionView {
            id,
            holder: Name::default(),
            principal: Name::default(),
            ttl_ms: 0,
            created_wall_ms: 0,
            expires_wall_ms: 0,
            remaining_ms: 0,
            status: how,
            metadata: Metadata::default(),
            lease_count: 0,
            wait_count: 0,
            leases: Vec::new(),
        }
    }

    /// Reclaims `sessions` (past their expiry and grace), each whole, in order; returns the
    /// leases ended.
    pub(crate) fn end_sessions(&mut self, index: u64, sessions: &[u64]) -> Vec<LeaseView> {
        let mut reclaimed = Vec::new();
        for &id in sessions {
            let (_, ended) =
                self.end_session(index, history::SYSTEM_ACTOR, id, SessionStatus::Expired);
            self.effects.reclaimed += ended.len();
            reclaimed.extend(ended);
        }
        reclaimed
    }

    /// Ends session `id` if it is past its expiry and grace (the entry's reclaim budget may
    /// have left it for later): a command that names it never sees it alive.
    pub(crate) fn settle_session(&mut self, index: u64, id: u64) {
        let due = self
            .sessions
            .get(&id)
            .is_some_and(|s| self.session_is_due(s));
        if due {
            let (_, ended) =
                self.end_session(index, history::SYSTEM_ACTOR, id, SessionStatus::Expired);
            self.effects.reclaimed += ended.len();
        }
    }

    /// Ends the sessions of `resource`'s leases that are past their expiry and grace, before a
    /// command reads or changes the resource: no command sees a lease past its session's grace.
    pub(crate) fn settle_sessions_of(&mut self, index: u64, resource: &str) {
        let Some(rs) = self.resources.get(resource) else {
            return;
        };
        let sessions: BTreeSet<u64> = rs
            .leases
            .iter()
            .filter_map(|l| l.session)
            .map(NonZeroU64::get)
            .collect();
        for id in sessions {
            self.settle_session(index, id);
        }
    }

    /// The lease-clock instant the next session is due.
    pub(crate) fn next_session_due_ms(&self) -> Option<u64> {
        self.indexes.next_session_due_ms()
    }

    /// A session begins (1) or ends (-1): counted against its principal's quotas.
    fn count_session(&mut self, session: &Session, sign: i64) {
        let bytes = metadata_cost(session.metadata.iter()) as i64;
        self.quotas.add_all(
            &session.principal,
            &[
                (Quota::Sessions, sign),
                (Quota::MetadataBytes, sign * bytes),
            ],
        );
    }

    /// Sessions of `principal` (all with `None`), by id, after `after`: a page of views.
    pub fn list_sessions(
        &self,
        principal: Option<&str>,
        holder: Option<&str>,
        page_size: usize,
        after: u64,
    ) -> (Vec<SessionView>, Option<u64>) {
        let mut views = Vec::new();
        let mut next = None;
        let matching = self
            .sessions
            .range((after.saturating_add(1))..)
            .filter(|(_, s)| principal.is_none_or(|p| s.principal == p))
            .filter(|(_, s)| holder.is_none_or(|h| s.holder == h))
            .filter(|(_, s)| !self.session_is_due(s));
        for (&id, session) in matching {
            if views.len() == page_size {
                next = views.last().map(|v: &SessionView| v.id);
                break;
            }
            let mut view = self.live_session_view(id, session);
            // A listing shows counts; GetSession shows the leases.
            view.leases = Vec::new();
            views.push(view);
        }
        (views, next)
    }
}
