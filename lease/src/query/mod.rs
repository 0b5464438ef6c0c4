//! Reads: what a client may ask of the state, answered by a pure function of the state.
//! Linearizable reads run this on the leader after a quorum round; stale reads run it locally.

use std::ops::Bound;

use serde::{Deserialize, Serialize};

use super::bookings::Booking;
use super::history::{Event, EventKind, Kept};
use super::machine::{ResourceState, State};
use super::policy::Policy;
use super::session::SessionView;
use super::types::{lease_order, Held, LeaseId, LeaseStatus, LeaseView, Name, Refusal, Rejection};
use super::waiting::Waiter;

mod page;

pub(super) use page::{bounded, event_bytes, lease_bytes};
use page::{page, resource_bytes};
pub use page::{HOLDERS_SHOWN, LEASES_SHOWN_BYTES, PAGE_BYTES};

/// Largest page of any listing.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// The page size when a request leaves it 0.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    Resource {
        name: String,
    },
    Resources {
        prefix: String,
        page_size: u32,
        /// Resume after this name.
        after: Option<String>,
    },
    Leases {
        holder: Option<String>,
        principal: Option<String>,
        page_size: u32,
        /// Resume after this (resource, lease_id).
        after: Option<(String, String)>,
    },
    History {
        resource: String,
        page_size: u32,
        /// Resume after this (revision, seq), in the listing's order.
        after: Option<(u64, u32)>,
        ascending: bool,
        /// Only these events; empty = all.
        kinds: Vec<EventKind>,
    },
    Validate {
        resource: String,
        lease_id: String,
        fencing_token: u64,
        /// (machine, transition) the caller wants the lease to guard.
        #[serde(default)]
        fsm: Option<(String, String)>,
    },
    /// A live session (SPEC §4.24), by the index that names it.
    Session {
        id: u64,
    },
    Sessions {
        principal: Option<String>,
        holder: Option<String>,
        page_size: u32,
        /// Resume after this session.
        after: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    Resource(ResourceView),
    Resources {
        resources: Vec<ResourceView>,
        next: Option<String>,
    },
    Leases {
        leases: Vec<LeaseView>,
        next: Option<(String, String)>,
    },
    History {
        events: Vec<Event>,
        next: Option<(u64, u32)>,
    },
    Validate(Validation),
    Rejected(Rejection),
    Session(Box<SessionView>),
    Sessions {
        sessions: Vec<SessionView>,
        next: Option<u64>,
    },
}

impl Query {
    /// What the query costs its principal's read pace (`limits::ReadPacer`): a listing its
    /// page size, any other read one item.
    pub fn items(&self) -> u32 {
        match self {
            Query::Resources { page_size, .. }
            | Query::Sessions { page_size, .. }
            | Query::Leases { page_size, .. }
            | Query::History { page_size, .. } => match *page_size {
                0 => DEFAULT_PAGE_SIZE,
                n => n.min(MAX_PAGE_SIZE),
            },
            _ => 1,
        }
    }
}

pub fn answer(state: &State, query: &Query) -> Answer {
    match query {
        Query::Resource { name } => Answer::Resource(state.resource_view(name)),
        Query::Resources {
            prefix,
            page_size,
            after,
        } => state.list_resources(prefix, *page_size, after.as_deref()),
        Query::Leases {
            holder,
            principal,
            page_size,
            after,
        } => state.list_leases(holder.as_deref(), principal.as_deref(), *page_size, after),
        Query::History {
            resource,
            page_size,
            after,
            ascending,
            kinds,
        } => state.history(resource, *page_size, *after, *ascending, kinds),
        Query::Validate {
            resource,
            lease_id,
            fencing_token,
            fsm,
        } => Answer::Validate(state.validate(resource, lease_id, *fencing_token, fsm.as_ref())),
        Query::Session { id } => match state.session(*id).filter(|s| !state.session_is_due(s)) {
            Some(session) => Answer::Session(Box::new(state.live_session_view(*id, session))),
            None => Answer::Rejected(Rejection::SessionNotFound(format!(
                "{}: it was closed, it expired, or it never existed",
                super::session::session_name(*id)
            ))),
        },
        Query::Sessions {
            principal,
            holder,
            page_size,
            after,
        } => {
            let size = match *page_size {
                0 => DEFAULT_PAGE_SIZE,
                n => n.min(MAX_PAGE_SIZE),
            };
            let (sessions, next) = state.list_sessions(
                principal.as_deref(),
                holder.as_deref(),
                size as usize,
                *after,
            );
            Answer::Sessions { sessions, next }
        }
    }
}

/// A resource as reads show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceView {
    pub name: String,
    pub policy: Policy,
    /// The first live leases in grant order, about [`LEASES_SHOWN_BYTES`] at most.
    pub leases: Vec<LeaseView>,
    /// How many leases are live (`leases` may show fewer).
    pub lease_count: usize,
    /// Units the live leases draw from the pool.
    pub units_in_use: u64,
    pub revision: u64,
    pub ad_hoc: bool,
    /// How many wait.
    pub waiting: usize,
    /// The first [`HOLDERS_SHOWN`] waiters, head first, with the wall-clock estimate of
    /// their timeout.
    pub waiters: Vec<(Waiter, u64)>,
    /// Bookings whose window has not ended, by start.
    pub bookings: Vec<Booking>,
}

/// The answer of `Validate` (SPEC §4.10).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    pub valid: bool,
    pub reason: String,
    pub lease: Option<LeaseView>,
}

impl State {
    pub fn resource_view(&self, name: &str) -> ResourceView {
        let rs = self.resource_ref(name);
        self.view_of(name, rs.as_deref())
    }

    /// The view of `name`, standing as `rs` (None: unknown).
    fn view_of(&self, name: &str, rs: Option<&ResourceState>) -> ResourceView {
        let live = rs.map(|rs| rs.leases.as_slice()).unwrap_or_default();
        ResourceView {
            name: name.to_string(),
            policy: rs
                .map_or(&self.default_policy, |rs| self.policy_in(rs))
                .clone(),
            leases: self.leases_shown(name, live, usize::MAX),
            lease_count: live.len(),
            units_in_use: live.iter().fold(0, |sum, l| sum.saturating_add(l.units)),
            revision: rs.map_or(0, |rs| rs.revision),
            ad_hoc: rs.is_none_or(|rs| rs.rare().registration.is_none()),
            waiting: rs.map_or(0, |rs| rs.rare().waiters.len()),
            waiters: rs
                .map(|rs| {
                    rs.rare()
                        .waiters
                        .iter()
                        .take(HOLDERS_SHOWN)
                        .map(|w| (w.clone(), self.clock.wall_of(w.deadline_ms)))
                        .collect()
                })
                .unwrap_or_default(),
            bookings: rs.map(|rs| rs.rare().bookings.clone()).unwrap_or_default(),
        }
    }

    /// When a resource closed by its lock delay opens again, on the wall clock; `None` when it
    /// is not closed (spec §4.4).
    /// What a claim on `name` refused for `refusal` shows as its reopening: the resource's
    /// [`State::closed_until_wall_ms`] for a `lock_delay` refusal, nothing otherwise.
    pub fn closed_until_for(&self, name: &str, refusal: Option<Refusal>) -> Option<u64> {
        match refusal {
            Some(Refusal::LockDelay) => self.closed_until_wall_ms(name),
            _ => None,
        }
    }

    pub fn closed_until_wall_ms(&self, name: &str) -> Option<u64> {
        let closed_until_ms = self.resources.get(name)?.rare().closed_until_ms;
        (self.clock.now_ms() < closed_until_ms).then(|| self.clock.wall_of(closed_until_ms))
    }

    /// The first of `live` (at most `limit`, about [`LEASES_SHOWN_BYTES`]) as replies show them.
    pub(super) fn leases_shown(&self, name: &str, live: &[Held], limit: usize) -> Vec<LeaseView> {
        self.leases_within(name, live, limit, LEASES_SHOWN_BYTES)
    }

    /// The first live leases of `resource`, at most `limit` and about `budget` bytes.
    pub(crate) fn holders_within(
        &self,
        resource: &str,
        limit: usize,
        budget: usize,
    ) -> Vec<LeaseView> {
        self.resources
            .get(resource)
            .map(|rs| self.leases_within(resource, &rs.leases, limit, budget))
            .unwrap_or_default()
    }

    fn leases_within(
        &self,
        name: &str,
        live: &[Held],
        limit: usize,
        budget: usize,
    ) -> Vec<LeaseView> {
        bounded(live.iter(), limit, budget, |l| lease_bytes(l))
            .0
            .into_iter()
            .map(|l| self.live_view(name, l))
            .collect()
    }

    fn list_resources(&self, prefix: &str, page_size: u32, after: Option<&str>) -> Answer {
        let start = match after {
            Some(name) if name >= prefix => Bound::Excluded(Name::from(name)),
            _ => Bound::Included(Name::from(prefix)),
        };
        let views = self
            .all_resources_from(start)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, rs)| self.view_of(&name, Some(&rs)));
        let (resources, more) = page(views, page_size, resource_bytes);
        Answer::Resources {
            next: more
                .then(|| resources.last().map(|r| r.name.clone()))
                .flatten(),
            resources,
        }
    }

    /// Live leases of a holder and/or principal, ordered by resource and then grant order (the
    /// order of `lse_<index>_<position>` by number, not as text).
    fn list_leases(
        &self,
        holder: Option<&str>,
        principal: Option<&str>,
        page_size: u32,
        after: &Option<(String, String)>,
    ) -> Answer {
        // From an index: a listing reads only the leases it lists (and, with both names,
        // the holder's leases of other principals), never every lease.
        let after = after.as_ref().map(|(resource, lease_id)| {
            (resource.as_str(), lease_order(lease_id).unwrap_or((0, 0)))
        });
        let (index, name) = match (holder, principal) {
            (Some(h), _) => (self.indexes.by_holder(), h),
            (None, Some(p)) => (self.indexes.by_principal(), p),
            (None, None) => (self.indexes.by_holder(), ""),
        };
        // Each resource's leases of the name, in grant order, past the cursor.
        let beyond = move |resource: &str, l: &Held| {
            after.is_none_or(|(r, order)| (resource, (l.fencing_token, l.position)) > (r, order))
        };
        let matching = index
            .of(name, after.map(|(resource, _)| resource))
            .filter_map(|resource| Some((resource, self.resources.get(resource)?)))
            .flat_map(|(resource, rs)| {
                let mut leases: Vec<&Held> = (rs.leases.iter())
                    .filter(|l| holder.is_none_or(|h| l.holder == h))
                    .filter(|l| principal.is_none_or(|p| l.principal == p))
                    .filter(|l| beyond(resource, l))
                    .collect();
                leases.sort_by_key(|l| (l.fencing_token, l.position));
                leases.into_iter().map(move |l| (resource, l))
            });
        let views = matching.map(|(resource, l)| self.live_view(resource, l));
        let (leases, more) = page(views, page_size, |v| lease_bytes(&v.lease));
        Answer::Leases {
            next: more
                .then(|| {
                    leases
                        .last()
                        .map(|v| (v.lease.resource.to_string(), v.lease.lease_id().to_string()))
                })
                .flatten(),
            leases,
        }
    }

    /// A page of a resource's retained events. Resuming (ascending) from a position whose
    /// successors were already dropped is `compacted`, never a silent gap.
    fn history(
        &self,
        resource: &str,
        page_size: u32,
        after: Option<(u64, u32)>,
        ascending: bool,
        kinds: &[EventKind],
    ) -> Answer {
        let Some(rs) = self.resource_ref(resource) else {
            return Answer::History {
                events: Vec::new(),
                next: None,
            };
        };
        if let (true, Some(after), Some(dropped)) = (ascending, after, rs.trimmed_through()) {
            if after < dropped {
                return Answer::Rejected(Rejection::Compacted {
                    oldest: rs.history.front().map_or(dropped.0 + 1, |k| k.revision),
                });
            }
        }
        let wanted = |e: &Event| kinds.is_empty() || kinds.contains(&e.kind);
        let event_bytes = |e: &Event| event_bytes(e);
        let beyond = |k: &&Kept| {
            after.is_none_or(|a| {
                if ascending {
                    k.position() > a
                } else {
                    k.position() < a
                }
            })
        };
        let ordered: Box<dyn Iterator<Item = &Kept>> = if ascending {
            Box::new(rs.history.iter().filter(beyond))
        } else {
            Box::new(rs.history.iter().rev().filter(beyond))
        };
        let reader = self.log.reader();
        let (events, more) = page(
            reader.events(resource, ordered).filter(wanted),
            page_size,
            event_bytes,
        );
        Answer::History {
            next: more.then(|| events.last().map(Event::position)).flatten(),
            events,
        }
    }

    /// Judges a (lease, token) pair by the committed lease clock (SPEC §4.10), and then, if
    /// asked, whether the resource's policy lists the (machine, transition) pair.
    pub fn validate(
        &self,
        resource: &str,
        lease_id: &str,
        fencing_token: u64,
        fsm: Option<&(String, String)>,
    ) -> Validation {
        let answer = |valid: bool, reason: String, lease: Option<LeaseView>| Validation {
            valid,
            reason,
            lease,
        };
        let stale = |expected: u64| {
            Rejection::StaleFencingToken {
                expected,
                got: fencing_token,
            }
            .to_string()
        };
        let rs = self.resource_ref(resource);
        let rs = rs.as_deref();
        let live = rs.map(|rs| rs.leases.as_slice()).unwrap_or_default();
        let wanted = LeaseId::parse(lease_id);
        let names = |l: &Held| {
            if lease_id.is_empty() {
                l.fencing_token == fencing_token
            } else {
                Some(l.lease_id()) == wanted
            }
        };
        if let Some(lease) = live.iter().find(|l| names(l)) {
            let view = self.live_view(resource, lease);
            return if fencing_token != 0 && fencing_token != lease.fencing_token {
                answer(false, stale(lease.fencing_token), Some(view))
            } else if self.clock.now_ms() >= self.expiry_of(lease) {
                answer(false, "lease expired".into(), Some(view))
            } else if fsm.is_some_and(|(m, t)| !self.policy_of(resource).guards(m, t)) {
                answer(false, "no matching fsm requirement".into(), Some(view))
            } else {
                answer(true, "ok".into(), Some(view))
            };
        }
        if let Some(ended) = rs.and_then(|rs| rs.ended.iter().rev().find(|e| names(&e.lease))) {
            let view = Some(self.ended_view(ended));
            return match (ended.status, ended.superseded_by) {
                (_, Some(expected)) => answer(false, stale(expected), view),
                (LeaseStatus::Released, _) => answer(false, "lease released".into(), view),
                _ => answer(false, "lease expired".into(), view),
            };
        }
        let newest = live.iter().map(|l| l.fencing_token).max();
        if let Some(expected) = newest.filter(|t| fencing_token != 0 && fencing_token < *t) {
            return answer(false, stale(expected), None);
        }
        answer(false, "lease not found".into(), None)
    }
}
