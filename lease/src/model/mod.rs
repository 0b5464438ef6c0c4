//! The reference model of the lease rules, written from the contract (docs/spec.md) and not
//! from the machine: exclusive leases under one default policy, spec §4.1–4.5 and §5. A
//! property test (`check`) runs random command sequences through [`crate::apply`] and
//! through this model and compares every answer. Where the spec leaves room, the model follows
//! the choice the machine made; each such rule is marked CHOICE.
//!
//! The fault harness keeps its own model of the same rules (`tenure-jepsen`'s
//! `checker::model`); docs/architecture.md says why the two are not one.

mod adapt;
mod check;
mod gen;

use std::collections::BTreeMap;

use crate::types::LeaseStatus;

/// SPEC §4.13: min ttl 1 s; ad-hoc policy: default ttl 60 s, max ttl 24 h.
pub const MIN_TTL_MS: u64 = 1_000;
pub const DEFAULT_TTL_MS: u64 = 60_000;
pub const MAX_TTL_MS: u64 = 24 * 3_600_000;

/// One tenure as the model keeps it. Times are lease-clock milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub lease_id: String,
    pub resource: String,
    pub holder: String,
    pub principal: String,
    pub token: u64,
    pub acquired_at_ms: u64,
    pub expires_at_ms: u64,
    /// The ttl of the last acquire or renew.
    pub ttl_ms: u64,
}

/// A lease as an answer shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    pub lease_id: String,
    pub resource: String,
    pub holder: String,
    pub principal: String,
    pub token: u64,
    pub acquired_at_ms: u64,
    pub expires_at_ms: u64,
    pub ttl_ms: u64,
    pub status: LeaseStatus,
    pub remaining_ms: u64,
}

/// What a request is answered, in terms both the model and the machine can be put in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Granted(Shown),
    Refused {
        reason: &'static str,
        holders: Vec<(String, u64)>,
    },
    Lease(Shown),
    Rejected {
        reason: &'static str,
        /// (expected, got) of a `stale_fencing_token`.
        stale: Option<(u64, u64)>,
    },
    /// A Tick: the (resource, token) of the leases reclaimed by the entry, sorted.
    Reclaimed(Vec<(String, u64)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Acquire {
        resource: String,
        holder: String,
        ttl_ms: Option<u64>,
    },
    Renew {
        resource: String,
        lease_id: String,
        holder: String,
        fencing_token: u64,
        ttl_ms: Option<u64>,
    },
    Release {
        resource: String,
        lease_id: String,
        holder: String,
        fencing_token: u64,
    },
    Tick,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Released,
    Reclaimed,
}

#[derive(Debug, Default)]
struct Slot {
    current: Option<Held>,
    /// CHOICE: the last 8 ended tenures of a resource are remembered; they decide whether a
    /// renew/release of a lease that is gone answers `lease_expired` or `lease_not_found`.
    ended: Vec<(Held, Ending)>,
}

impl Slot {
    fn end(&mut self, held: Held, how: Ending) {
        self.ended.push((held, how));
        if self.ended.len() > 8 {
            self.ended.remove(0);
        }
    }
}

/// CHOICE (outside the model): idle resources are forgotten and request_ids expire only after
/// 10 min of lease time; the property tests stay inside that window, so neither is modelled.
#[derive(Debug)]
pub struct Model {
    grace_ms: u64,
    slots: BTreeMap<String, Slot>,
    /// (principal, request_id) → the first request and its answer.
    answered: BTreeMap<(String, String), (Request, Answer)>,
}

fn rejected(reason: &'static str) -> Answer {
    Answer::Rejected {
        reason,
        stale: None,
    }
}

fn ttl_in_range(ttl_ms: u64) -> bool {
    (MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms)
}

/// Names a lease the way renew and release do. CHOICE: an empty lease_id means the
/// holder's own lease on the resource.
fn names(held: &Held, lease_id: &str, holder: &str) -> bool {
    if lease_id.is_empty() {
        held.holder == holder
    } else {
        held.lease_id == lease_id
    }
}

fn show(held: &Held, status: LeaseStatus, now_ms: u64) -> Shown {
    Shown {
        lease_id: held.lease_id.clone(),
        resource: held.resource.clone(),
        holder: held.holder.clone(),
        principal: held.principal.clone(),
        token: held.token,
        acquired_at_ms: held.acquired_at_ms,
        expires_at_ms: held.expires_at_ms,
        ttl_ms: held.ttl_ms,
        status,
        remaining_ms: if status == LeaseStatus::Released {
            0
        } else {
            held.expires_at_ms.saturating_sub(now_ms)
        },
    }
}

/// §2: ACTIVE before expiry, GRACE past it (a live lease past its grace is already gone).
fn live(held: &Held, now_ms: u64) -> Shown {
    let status = if now_ms < held.expires_at_ms {
        LeaseStatus::Active
    } else {
        LeaseStatus::Grace
    };
    show(held, status, now_ms)
}

impl Model {
    pub fn new(grace_ms: u64) -> Self {
        Model {
            grace_ms,
            slots: BTreeMap::new(),
            answered: BTreeMap::new(),
        }
    }

    pub fn current(&self, resource: &str) -> Option<&Held> {
        self.slots.get(resource)?.current.as_ref()
    }

    /// Applies one entry at lease time `now_ms` (from the stamps, §5) with log index `index`.
    pub fn step(
        &mut self,
        now_ms: u64,
        index: u64,
        principal: &str,
        admin: bool,
        request_id: Option<&str>,
        request: &Request,
    ) -> Answer {
        // §4.4: a lease is reclaimed once lease_now ≥ expires_at + renewal_grace; every
        // entry judges that before anything else, so nothing sees a lease past its grace.
        let reclaimed = self.reclaim_due(now_ms);
        // §5 as amended: a renew is not exactly-once; applied again it renews again.
        let exactly_once = !matches!(request, Request::Renew { .. });
        let Some(request_id) = request_id.filter(|_| exactly_once) else {
            return self.execute(now_ms, index, principal, admin, request, reclaimed);
        };
        // §5: at most once per (principal, request_id); a retry gets the original answer,
        // the same request_id with another request is invalid_argument.
        let key = (principal.to_string(), request_id.to_string());
        if let Some((first, answer)) = self.answered.get(&key) {
            return if first == request {
                match (answer, request) {
                    // §5 as amended: a retried refusal names the holders as they are now.
                    (Answer::Refused { reason, .. }, Request::Acquire { resource, .. }) => {
                        Answer::Refused {
                            reason,
                            holders: self
                                .slots
                                .get(resource)
                                .and_then(|slot| slot.current.as_ref())
                                .map(|held| vec![(held.holder.clone(), held.token)])
                                .unwrap_or_default(),
                        }
                    }
                    _ => answer.clone(),
                }
            } else {
                rejected("invalid_argument")
            };
        }
        let answer = self.execute(now_ms, index, principal, admin, request, reclaimed);
        self.answered.insert(key, (request.clone(), answer.clone()));
        answer
    }

    fn reclaim_due(&mut self, now_ms: u64) -> Vec<(String, u64)> {
        let mut reclaimed = Vec::new();
        for (name, slot) in &mut self.slots {
            let due = slot
                .current
                .as_ref()
                .is_some_and(|held| now_ms >= held.expires_at_ms + self.grace_ms);
            if due {
                if let Some(held) = slot.current.take() {
                    reclaimed.push((name.clone(), held.token));
                    slot.end(held, Ending::Reclaimed);
                }
            }
        }
        reclaimed.sort();
        reclaimed
    }

    fn execute(
        &mut self,
        now_ms: u64,
        index: u64,
        principal: &str,
        admin: bool,
        request: &Request,
        reclaimed: Vec<(String, u64)>,
    ) -> Answer {
        match request {
            Request::Acquire {
                resource,
                holder,
                ttl_ms,
            } => self.acquire(now_ms, index, principal, admin, resource, holder, *ttl_ms),
            Request::Renew {
                resource,
                lease_id,
                holder,
                fencing_token,
                ttl_ms,
            } => {
                // §3: argument validation comes first; a ttl the caller gave is an argument.
                if ttl_ms.is_some_and(|ttl_ms| !ttl_in_range(ttl_ms)) {
                    return rejected("ttl_out_of_range");
                }
                if let Some(answer) =
                    self.refusal(principal, admin, resource, lease_id, holder, *fencing_token)
                {
                    return answer;
                }
                let Some(held) = self
                    .slots
                    .get_mut(resource)
                    .and_then(|slot| slot.current.as_mut())
                else {
                    return rejected("lease_not_found");
                };
                // §4.3: expires_at = now + ttl, replacing the old expiry.
                // CHOICE: no ttl = the lease's last ttl.
                let ttl_ms = ttl_ms.unwrap_or(held.ttl_ms);
                held.expires_at_ms = now_ms + ttl_ms;
                held.ttl_ms = ttl_ms;
                Answer::Lease(live(held, now_ms))
            }
            Request::Release {
                resource,
                lease_id,
                holder,
                fencing_token,
            } => {
                if let Some(answer) =
                    self.refusal(principal, admin, resource, lease_id, holder, *fencing_token)
                {
                    return answer;
                }
                // §4.5: the lease ends at once.
                let Some(slot) = self.slots.get_mut(resource) else {
                    return rejected("lease_not_found");
                };
                let Some(held) = slot.current.take() else {
                    return rejected("lease_not_found");
                };
                let shown = show(&held, LeaseStatus::Released, now_ms);
                slot.end(held, Ending::Released);
                Answer::Lease(shown)
            }
            Request::Tick => Answer::Reclaimed(reclaimed),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        now_ms: u64,
        index: u64,
        principal: &str,
        admin: bool,
        resource: &str,
        holder: &str,
        ttl_ms: Option<u64>,
    ) -> Answer {
        let ttl_ms = ttl_ms.unwrap_or(DEFAULT_TTL_MS);
        if !ttl_in_range(ttl_ms) {
            return rejected("ttl_out_of_range");
        }
        let slot = self.slots.entry(resource.to_string()).or_default();
        match &slot.current {
            // §1: only the lease's principal or an admin may act for its holder; CHOICE:
            // that includes getting the lease (and its token) back from an acquire.
            Some(held) if held.holder == holder && !admin && held.principal != principal => {
                rejected("insufficient_permissions")
            }
            // §4.2: the same holder gets its lease unchanged; the ttl asked for is ignored.
            // CHOICE: that includes a lease in its renewal grace (shown as GRACE).
            Some(held) if held.holder == holder => Answer::Granted(live(held, now_ms)),
            // §4.1/§4.4: held (also in grace) → a normal refusal naming the holder.
            Some(held) => Answer::Refused {
                reason: "resource_unavailable",
                holders: vec![(held.holder.clone(), held.token)],
            },
            // §1: the fencing token is the index of the granting entry.
            // CHOICE: lease_id = "lse_" + index + "_" + position (0 for exclusive).
            None => {
                let held = Held {
                    lease_id: format!("lse_{index}_0"),
                    resource: resource.to_string(),
                    holder: holder.to_string(),
                    principal: principal.to_string(),
                    token: index,
                    acquired_at_ms: now_ms,
                    expires_at_ms: now_ms + ttl_ms,
                    ttl_ms,
                };
                let shown = live(&held, now_ms);
                slot.current = Some(held);
                Answer::Granted(shown)
            }
        }
    }

    /// Why a renew/release may not change the lease it names, if it may not. SPEC §3 order:
    /// existence → holder and permission → fencing token.
    fn refusal(
        &self,
        principal: &str,
        admin: bool,
        resource: &str,
        lease_id: &str,
        holder: &str,
        fencing_token: u64,
    ) -> Option<Answer> {
        let slot = self.slots.get(resource);
        let current = slot
            .and_then(|slot| slot.current.as_ref())
            .filter(|held| names(held, lease_id, holder));
        // §3 order: existence → holder and permission → token → state. CHOICE: a lease
        // that ended still "exists" for that order unless it was released; a reclaimed one
        // answers lease_expired only to its own holder and principal with its own token.
        let ended = slot.and_then(|slot| {
            slot.ended
                .iter()
                .rev()
                .find(|(held, _)| names(held, lease_id, holder))
        });
        let (held, reclaimed) = match (current, ended) {
            (Some(held), _) => (held, false),
            (None, Some((held, Ending::Reclaimed))) => (held, true),
            (None, Some((_, Ending::Released)) | None) => return Some(rejected("lease_not_found")),
        };
        if held.holder != holder || (!admin && held.principal != principal) {
            return Some(rejected("insufficient_permissions"));
        }
        if held.token != fencing_token {
            return Some(Answer::Rejected {
                reason: "stale_fencing_token",
                stale: Some((held.token, fencing_token)),
            });
        }
        if reclaimed {
            return Some(rejected("lease_expired"));
        }
        None
    }
}
