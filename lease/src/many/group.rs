//! A multi-wait's life after it queued (SPEC §4.25): admitted in one entry when it heads every
//! room it names and every claim fits, or ended (timeout, cancel, its session's end) in every
//! room at once; and how it ended, read back from the rooms' histories.

use super::*;

impl State {
    /// The multi-wait `waiter` belongs to, if it belongs to one.
    pub(crate) fn group_of(&self, waiter: &Waiter) -> Option<u64> {
        self.groups
            .get(&waiter.wait_id)
            .filter(|g| g.holder == waiter.holder)
            .map(|_| waiter.wait_id)
    }

    /// Admits multi-wait `id` if it heads every room it names and every claim fits: every
    /// lease in this entry, with its index as their token. Whether it was admitted.
    pub(crate) fn admit_group(&mut self, index: u64, id: u64) -> bool {
        let Some(group) = self.groups.get(&id).cloned() else {
            return false;
        };
        for name in &group.resources {
            let Some(head) = self
                .resources
                .get(name)
                .and_then(|rs| rs.rare().waiters.front())
            else {
                return false;
            };
            if head.wait_id != id
                || head.holder != group.holder
                || self.refusal_of_head(name, head).is_some()
            {
                return false;
            }
        }
        self.groups.remove(&id);
        let mut leases = Vec::with_capacity(group.resources.len());
        for name in &group.resources {
            let Some(waiter) = self
                .resources
                .get_mut(name)
                .map(Arc::make_mut)
                .and_then(|rs| rs.rare_mut().waiters.pop_front())
            else {
                continue;
            };
            self.indexes.untrack_wait(name, &waiter);
            self.count_waiter(name, &waiter, -1);
            let lease = self.lease_from(index, name, waiter);
            leases.push(self.grant(index, &group.principal, lease, EventKind::Admitted));
            // The next waiter of each room may be admitted now.
            self.effects.touched.insert(name.clone());
        }
        self.group_ended(id, &group, ManyOutcome::granted(leases));
        true
    }

    /// Ends what is left of multi-wait `id` after its `removed` wait in `resource` (at
    /// `position`) ended without a grant, `why`: its waits in every other room end too.
    pub(crate) fn end_group(
        &mut self,
        (index, actor): (u64, &str),
        id: u64,
        (resource, position): (&str, u32),
        why: Refusal,
    ) {
        let Some(group) = self.groups.remove(&id) else {
            return;
        };
        let mut claims = Vec::with_capacity(group.resources.len());
        for name in &group.resources {
            let position = if name.as_str() == resource {
                position
            } else {
                let at = self.resources.get(name).and_then(|rs| {
                    rs.rare()
                        .waiters
                        .iter()
                        .position(|w| w.wait_id == id && w.holder == group.holder)
                });
                match at {
                    Some(at) => {
                        self.remove_waiter((index, actor), name, at, why);
                        at as u32 + 1
                    }
                    None => 0,
                }
            };
            claims.push(ClaimOutcome {
                resource: name.to_string(),
                refusal: Some(why),
                holders: self.claim_holders(name),
                queue_position: position,
                closed_until_wall_ms: None,
            });
        }
        let outcome = ManyOutcome {
            granted: false,
            leases: Vec::new(),
            claims,
            refusal: Some(why),
            wait_id: None,
        };
        self.group_ended(id, &group, outcome);
    }

    /// Hands a multi-wait's outcome to its blocked call (which listens on its first resource)
    /// and to the queuing request's exactly-once record.
    fn group_ended(&mut self, id: u64, group: &Group, outcome: ManyOutcome) {
        if let Some(request_id) = &group.request_id {
            let reply = Reply::Many(Box::new(outcome.clone()));
            let (whose, change) = self.dedup.resolve(&group.principal, request_id, &reply);
            if !whose.is_empty() {
                self.quotas.add(&whose, Quota::ExactlyOnceBytes, change);
            }
        }
        self.effects.waits.push(WaitOutcome {
            resource: group
                .resources
                .first()
                .map(Name::to_string)
                .unwrap_or_default(),
            holder: group.holder.to_string(),
            wait_id: id,
            outcome: outcome.summary(),
            many: Some(Box::new(outcome)),
        });
    }

    /// How multi-wait `wait_id` of `holder` on `resources` ended, read from their histories;
    /// None if history holds no end of it in some room.
    pub fn many_outcome(
        &self,
        resources: &[String],
        holder: &str,
        wait_id: u64,
    ) -> Option<ManyOutcome> {
        let mut leases = Vec::with_capacity(resources.len());
        for resource in resources {
            let outcome = self.wait_outcome(resource, holder, wait_id)?;
            match outcome.lease {
                Some(view) if outcome.granted => leases.push(view),
                _ => {
                    let why = outcome.refusal;
                    let claims = resources
                        .iter()
                        .map(|name| ClaimOutcome {
                            resource: name.clone(),
                            refusal: why,
                            holders: self.claim_holders(name),
                            queue_position: 0,
                            closed_until_wall_ms: None,
                        })
                        .collect();
                    return Some(ManyOutcome {
                        granted: false,
                        leases: Vec::new(),
                        claims,
                        refusal: why,
                        wait_id: None,
                    });
                }
            }
        }
        Some(ManyOutcome::granted(leases))
    }
}
