//! What a session carries (SPEC §4.24): the leases and waits on it, counted as they begin and
//! end, bounded by [`MAX_SESSION_ITEMS`], with the renewal grace of each lease's resource
//! (the session's grace is the longest of them); and the same named again on every lease and
//! waiter when a snapshot loads.

use super::*;

impl State {
    /// Refuses a lease or wait on session `id` past what one session may carry.
    pub(crate) fn session_room(&self, id: u64, more: usize) -> Result<(), Rejection> {
        let Some(session) = self.sessions.get(&id) else {
            return Ok(());
        };
        if session.leases.len() + session.waits.len() + more > MAX_SESSION_ITEMS {
            return Err(Rejection::SessionFull {
                max: MAX_SESSION_ITEMS as u64,
            });
        }
        Ok(())
    }

    /// A lease on a session begins (1) or ends (-1): the session carries it or no longer.
    pub(crate) fn attach_lease(&mut self, resource: &str, lease: &Held, sign: i64) {
        let Some(id) = lease.session else {
            return;
        };
        let Some(session) = self.sessions.get_mut(&id.get()).map(Arc::make_mut) else {
            return;
        };
        let key = (Name::from(resource), lease.lease_id());
        let changed = if sign > 0 {
            session.leases.insert(key)
        } else {
            session.leases.remove(&key)
        };
        if !changed {
            return;
        }
        self.indexes.on_sessions(1, sign);
        // The lease's resource's grace joins or leaves the session's: its due time may move.
        let grace_ms = self.policy_of(resource).renewal_grace_ms;
        let Some(session) = self.sessions.get(&id.get()) else {
            return;
        };
        let old_key = self.session_due_key(id.get(), session);
        let Some(session) = self.sessions.get_mut(&id.get()).map(Arc::make_mut) else {
            return;
        };
        count_grace(&mut session.graces, grace_ms, sign);
        let session = &self.sessions[&id.get()];
        let new_key = self.session_due_key(id.get(), session);
        if new_key != old_key && self.indexes.untrack_session(&old_key) {
            self.indexes.track_session(new_key);
        }
    }

    /// A wait on a session begins (1) or ends (-1).
    pub(crate) fn attach_wait(
        &mut self,
        resource: &str,
        session: Option<NonZeroU64>,
        wait_id: u64,
        sign: i64,
    ) {
        let Some(id) = session else {
            return;
        };
        let Some(session) = self.sessions.get_mut(&id.get()).map(Arc::make_mut) else {
            return;
        };
        let key = (Name::from(resource), wait_id);
        if sign > 0 {
            session.waits.insert(key);
        } else {
            session.waits.remove(&key);
        }
    }

    /// After a snapshot loads: each lease and waiter names its session again, and the
    /// sessions are due again.
    pub(crate) fn restore_sessions(&mut self) {
        // Per resource, which of its leases and waits live on which session: one pass over
        // each resource's lists.
        let mut leases: BTreeMap<Name, BTreeMap<LeaseId, NonZeroU64>> = BTreeMap::new();
        let mut waits: BTreeMap<Name, BTreeMap<u64, NonZeroU64>> = BTreeMap::new();
        let mut due = Vec::new();
        let mut on_sessions = 0;
        for (&id, session) in &self.sessions {
            let Some(nz) = NonZeroU64::new(id) else {
                continue;
            };
            on_sessions += session.leases.len();
            for (resource, lease_id) in &session.leases {
                leases
                    .entry(resource.clone())
                    .or_default()
                    .insert(*lease_id, nz);
            }
            for (resource, wait_id) in &session.waits {
                waits
                    .entry(resource.clone())
                    .or_default()
                    .insert(*wait_id, nz);
            }
        }
        // Each session's graces, from the policies of its leases' resources.
        let ids: Vec<u64> = self.sessions.keys().copied().collect();
        for id in ids {
            let graces = self.sessions[&id].leases.iter().fold(
                BTreeMap::new(),
                |mut graces, (resource, _)| {
                    count_grace(&mut graces, self.policy_of(resource).renewal_grace_ms, 1);
                    graces
                },
            );
            if let Some(session) = self.sessions.get_mut(&id).map(Arc::make_mut) {
                session.graces = graces;
            }
            due.push(self.session_due_key(id, &self.sessions[&id]));
        }
        for (resource, on) in leases {
            if let Some(rs) = self.resources.get_mut(&resource).map(Arc::make_mut) {
                for l in &mut rs.leases {
                    l.session = on.get(&l.lease_id()).copied();
                }
            }
        }
        for (resource, on) in waits {
            if let Some(rs) = self.resources.get_mut(&resource).map(Arc::make_mut) {
                for w in &mut rs.rare_mut().waiters {
                    w.session = on.get(&w.wait_id).copied();
                }
            }
        }
        self.indexes.on_sessions(on_sessions, 1);
        for key in due {
            self.indexes.track_session(key);
        }
    }
}

/// One more (`sign` 1) or one fewer (-1) lease whose resource has `grace_ms`.
fn count_grace(graces: &mut BTreeMap<u64, u32>, grace_ms: u64, sign: i64) {
    if sign > 0 {
        *graces.entry(grace_ms).or_default() += 1;
    } else if let Some(count) = graces.get_mut(&grace_ms) {
        *count -= 1;
        if *count == 0 {
            graces.remove(&grace_ms);
        }
    } else {
        debug_assert!(
            false,
            "a lease's grace ({grace_ms} ms) its session never counted"
        );
    }
}
