//! What the test knows from its own clock, checked after every step: each tenure is valid
//! until its ttl from the stamps, ends only after its ttl and grace, takes the granting
//! entry's index as a token above the previous one; and the machine's indexes and snapshot
//! agree with what they are derived from.

use super::{Run, Tracked};
use crate::command::Reply;
use crate::encoding::{decode_state, encode_state, encode_state_live};
use crate::model::gen::RESOURCES;
use crate::model::{Request, DEFAULT_TTL_MS};

impl Run {
    pub(super) fn check_invariants(
        &mut self,
        n: usize,
        applied: bool,
        request: &Request,
        reply: &Reply,
    ) {
        let now_ms = self.clock.now_ms;
        let grace_ms = self.grace_ms;
        assert_eq!(
            self.machine.clock().now_ms(),
            now_ms,
            "step {n}: lease clock"
        );

        // What each principal holds, as apply counted it, is what a snapshot counts again.
        let restored = self.machine.snapshot_copy().restored();
        assert_eq!(
            restored.quotas, self.machine.quotas,
            "step {n}: quota usage"
        );
        // Every derived index apply kept is the one a snapshot builds again.
        assert_eq!(
            restored.indexes, self.machine.indexes,
            "step {n}: derived indexes"
        );

        // An applied successful renew moves the promise to now + ttl (or the last ttl).
        if let (
            true,
            Request::Renew {
                resource, ttl_ms, ..
            },
            Reply::Lease(view),
        ) = (applied, request, reply)
        {
            let tracked = self
                .tracked
                .get_mut(resource)
                .expect("a successful renew names a live tenure");
            assert_eq!(tracked.token, view.lease.fencing_token, "step {n}");
            tracked.ttl_ms = ttl_ms.unwrap_or(tracked.ttl_ms);
            tracked.hold_until_ms = now_ms + tracked.ttl_ms;
        }

        let mut live = 0;
        let mut next_due_ms: Option<u64> = None;
        for resource in RESOURCES {
            let view = self.machine.resource_view(resource);
            assert!(
                view.leases.len() <= 1,
                "step {n}: more than one live exclusive lease on {resource}: {:?}",
                view.leases
            );
            let lease = view.leases.first().map(|v| &v.lease);
            assert_eq!(
                lease.map(|l| (
                    l.lease_id().to_string(),
                    l.holder.as_str(),
                    l.fencing_token,
                    l.expires_at_ms
                )),
                self.model.current(resource).map(|h| (
                    h.lease_id.clone(),
                    h.holder.as_str(),
                    h.token,
                    h.expires_at_ms
                )),
                "step {n}: live lease on {resource}: machine (left), model (right)"
            );

            // A tenure that ended: released by its holder, or reclaimed only after its ttl and
            // grace ran out on the lease clock of the stamps.
            let ended = self
                .tracked
                .get(resource)
                .filter(|t| lease.map(|l| l.fencing_token) != Some(t.token));
            if let Some(gone) = ended {
                let verdict = self
                    .machine
                    .validate(resource, &gone.lease_id, gone.token, None);
                assert!(!verdict.valid, "step {n}: {verdict:?}");
                if verdict.reason != "lease released" {
                    assert_eq!(verdict.reason, "lease expired", "step {n}");
                    assert!(
                        now_ms >= gone.hold_until_ms + grace_ms,
                        "step {n}: {resource} token {} ended at lease_now {now_ms}, before its \
                         ttl and grace ran out at {}",
                        gone.token,
                        gone.hold_until_ms + grace_ms
                    );
                }
                self.tracked.remove(resource);
            }

            let Some(lease) = lease else { continue };
            let token = lease.fencing_token;
            if !self.tracked.contains_key(resource) {
                // A new tenure began with this very entry.
                assert_eq!(token, self.index, "step {n}: token = granting entry index");
                let last = self.last_token.get(resource).copied().unwrap_or(0);
                assert!(
                    token > last,
                    "step {n}: token {token} on {resource} not above the previous tenure's {last}"
                );
                self.last_token.insert(resource.to_string(), token);
                let Request::Acquire { ttl_ms, .. } = request else {
                    panic!("step {n}: a tenure began from {request:?}");
                };
                let ttl_ms = ttl_ms.unwrap_or(DEFAULT_TTL_MS);
                self.tracked.insert(
                    resource.to_string(),
                    Tracked {
                        lease_id: lease.lease_id().to_string(),
                        token,
                        ttl_ms,
                        hold_until_ms: now_ms + ttl_ms,
                    },
                );
            }
            let tracked = &self.tracked[resource];
            assert_eq!(
                lease.expires_at_ms, tracked.hold_until_ms,
                "step {n}: {resource} expiry by the machine (left) and by the stamps (right)"
            );
            assert!(
                now_ms < tracked.hold_until_ms + grace_ms,
                "step {n}: {resource} is still held past its ttl and grace"
            );
            let verdict = self
                .machine
                .validate(resource, &tracked.lease_id, token, None);
            assert_eq!(
                verdict.valid,
                now_ms < tracked.hold_until_ms,
                "step {n}: {verdict:?}"
            );
            live += 1;
            let due_ms = tracked.hold_until_ms + grace_ms;
            next_due_ms = Some(next_due_ms.map_or(due_ms, |d| d.min(due_ms)));
        }
        assert_eq!(self.machine.live_leases(), live, "step {n}: live leases");
        assert_eq!(
            self.machine.next_due_ms(),
            next_due_ms,
            "step {n}: next due"
        );

        // A snapshot of the state restores to the same state, derived indexes included.
        let bytes = encode_state(&self.machine).expect("state serializes");
        let restored = decode_state(&bytes).expect("state deserializes");
        assert_eq!(restored, self.machine, "step {n}: snapshot round trip");
        let bytes = encode_state_live(&self.machine).expect("state serializes in format 9");
        let restored = decode_state(&bytes).expect("format 9 deserializes");
        assert_eq!(
            restored, self.machine,
            "step {n}: snapshot round trip, format 9"
        );
    }
}
