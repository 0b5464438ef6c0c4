//! The property test: random command sequences through the machine and through the model,
//! every answer compared, and what the test knows from its own clock checked on the way.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;

use super::adapt::{answer_of, op_of, policy_with_grace};
use super::gen::*;
use super::{Answer, Model, Request};
use crate::lease::command::{Command, Proposal, Reply, Stamp};
use crate::lease::lease_clock::LeaderKey;
use crate::lease::machine::{apply, EntryMeta, State};
use crate::lease::policy::{DEDUP_WINDOW_MS, HOUR_MS};
use crate::store::snapshot::{decode_state, encode_state};

/// A request sent with a request_id, kept so that a later step can retry it.
#[derive(Clone, Debug)]
struct Sent {
    principal: String,
    admin: bool,
    request_id: String,
    request: Request,
}

/// What the test itself knows about a resource's live tenure, from its own clock.
#[derive(Debug)]
struct Tracked {
    lease_id: String,
    token: u64,
    ttl_ms: u64,
    /// Lease-clock instant before which the lease must be valid (now + ttl of the last grant
    /// or renew); the resource must stay its holder's until this plus the grace.
    hold_until_ms: u64,
}

struct Run {
    grace_ms: u64,
    machine: State,
    model: Model,
    clock: StampClock,
    leader: LeaderKey,
    mono_ms: u64,
    index: u64,
    seen_tokens: Vec<u64>,
    seen_lease_ids: Vec<String>,
    sent: Vec<Sent>,
    used_keys: BTreeSet<(String, String)>,
    tracked: BTreeMap<String, Tracked>,
    last_token: BTreeMap<String, u64>,
}

impl Run {
    fn new(grace_ms: u64) -> Self {
        Run {
            grace_ms,
            machine: State::with_default_policy(policy_with_grace(grace_ms)),
            model: Model::new(grace_ms),
            clock: StampClock::default(),
            leader: LeaderKey {
                term: 1,
                node_id: 1,
            },
            mono_ms: 10_000_000,
            index: 0,
            seen_tokens: Vec::new(),
            seen_lease_ids: Vec::new(),
            sent: Vec::new(),
            used_keys: BTreeSet::new(),
            tracked: BTreeMap::new(),
            last_token: BTreeMap::new(),
        }
    }

    fn run(mut self, steps: &[GenStep]) {
        for (n, step) in steps.iter().enumerate() {
            self.step(n, step);
        }
    }

    fn new_leader(&mut self) {
        let term = self.leader.term + 1;
        self.leader = LeaderKey {
            term,
            node_id: term % 3 + 1,
        };
    }

    fn pick_resource(&self, pick: &ResourcePick) -> &'static str {
        match pick {
            ResourcePick::Held(ix) => {
                let held: Vec<&'static str> = RESOURCES
                    .into_iter()
                    .filter(|r| self.model.current(r).is_some())
                    .collect();
                if held.is_empty() {
                    RESOURCES[0]
                } else {
                    held[ix.index(held.len())]
                }
            }
            ResourcePick::Fixed(i) => RESOURCES[*i],
        }
    }

    fn pick_holder(&self, resource: &str, pick: &HolderPick) -> String {
        match pick {
            HolderPick::Current => self
                .model
                .current(resource)
                .map_or(HOLDERS[0], |held| held.holder.as_str())
                .to_string(),
            HolderPick::Fixed(i) => HOLDERS[*i].to_string(),
        }
    }

    fn pick_lease_id(&self, resource: &str, pick: &Option<Pick>) -> String {
        match pick {
            None => String::new(),
            Some(Pick::Current) => self
                .model
                .current(resource)
                .map_or_else(|| "lse_0_0".to_string(), |held| held.lease_id.clone()),
            Some(Pick::Seen(ix)) if !self.seen_lease_ids.is_empty() => {
                ix.get(&self.seen_lease_ids).clone()
            }
            Some(Pick::Seen(_)) => String::new(),
        }
    }

    fn pick_token(&self, resource: &str, pick: &Pick) -> u64 {
        match pick {
            Pick::Current => self.model.current(resource).map_or(1, |held| held.token),
            Pick::Seen(ix) if !self.seen_tokens.is_empty() => *ix.get(&self.seen_tokens),
            Pick::Seen(_) => 1,
        }
    }

    /// Turns a generated step into (principal, admin, request_id, request), choosing tokens and
    /// lease ids from what the client side has seen so far.
    fn resolve(&self, step: &GenStep) -> (String, bool, Option<String>, Request) {
        let request = match &step.op {
            GenOp::Retry(ix) if !self.sent.is_empty() => {
                let sent = ix.get(&self.sent).clone();
                return (
                    sent.principal,
                    sent.admin,
                    Some(sent.request_id),
                    sent.request,
                );
            }
            GenOp::Retry(_) | GenOp::Tick => Request::Tick,
            GenOp::Acquire {
                resource,
                holder,
                ttl_ms,
            } => Request::Acquire {
                resource: RESOURCES[*resource].to_string(),
                holder: HOLDERS[*holder].to_string(),
                ttl_ms: *ttl_ms,
            },
            GenOp::Renew {
                resource,
                holder,
                lease_id,
                token,
                ttl_ms,
            } => {
                let resource = self.pick_resource(resource);
                Request::Renew {
                    resource: resource.to_string(),
                    lease_id: self.pick_lease_id(resource, lease_id),
                    holder: self.pick_holder(resource, holder),
                    fencing_token: self.pick_token(resource, token),
                    ttl_ms: *ttl_ms,
                }
            }
            GenOp::Release {
                resource,
                holder,
                lease_id,
                token,
            } => {
                let resource = self.pick_resource(resource);
                Request::Release {
                    resource: resource.to_string(),
                    lease_id: self.pick_lease_id(resource, lease_id),
                    holder: self.pick_holder(resource, holder),
                    fencing_token: self.pick_token(resource, token),
                }
            }
        };
        let holder = match &request {
            Request::Acquire { holder, .. }
            | Request::Renew { holder, .. }
            | Request::Release { holder, .. } => holder.clone(),
            Request::Tick => return (LEADER_PRINCIPAL.to_string(), false, None, request),
        };
        let (principal, admin) = match step.principal {
            GenPrincipal::Own => (format!("p-{holder}"), false),
            GenPrincipal::Stranger => ("mallory".to_string(), false),
            GenPrincipal::Admin => ("root".to_string(), true),
        };
        let request_id = step.request_id.map(|k| format!("rq-{k}"));
        (principal, admin, request_id, request)
    }

    fn step(&mut self, n: usize, step: &GenStep) {
        match step.stamp {
            GenStamp::Advance(ms) => self.mono_ms += ms,
            GenStamp::NewLeaderAhead => {
                self.new_leader();
                self.mono_ms += HOUR_MS;
            }
            GenStamp::NewLeaderBehind(ms) => {
                self.new_leader();
                self.mono_ms = self.mono_ms.saturating_sub(ms);
            }
        }
        self.index += step.index_gap;
        let (principal, admin, request_id, request) = self.resolve(step);
        self.clock.observe(self.leader, self.mono_ms);
        let now_ms = self.clock.now_ms;
        assert!(
            now_ms < DEDUP_WINDOW_MS,
            "the model leaves out what happens after the dedup/forget window"
        );
        let fresh = request_id
            .as_ref()
            .is_none_or(|id| !self.used_keys.contains(&(principal.clone(), id.clone())));

        let expected = self.model.step(
            now_ms,
            self.index,
            &principal,
            admin,
            request_id.as_deref(),
            &request,
        );
        let proposal = Proposal {
            stamp: Stamp {
                mono_ms: self.mono_ms,
                wall_ms: 1_700_000_000_000 + n as u64 * 1_000,
                clock_epoch: 0,
            },
            principal: principal.clone(),
            admin,
            request_id: request_id.clone(),
            require_registration: false,
            op: op_of(&request),
        };
        let meta = EntryMeta {
            index: self.index,
            leader: self.leader,
        };
        let reply = apply(&mut self.machine, meta, &Command::V1(proposal));
        let got = answer_of(&reply);
        assert_eq!(
            got, expected,
            "step {n}: {request:?} by {principal} (admin {admin}, request_id {request_id:?}) \
             at index {} lease_now {now_ms}: machine (left) and model (right) differ",
            self.index
        );

        if let Some(request_id) = request_id {
            if fresh {
                self.sent.push(Sent {
                    principal: principal.clone(),
                    admin,
                    request_id: request_id.clone(),
                    request: request.clone(),
                });
            }
            self.used_keys.insert((principal, request_id));
        }
        self.learn(&got);
        // A renew is applied every time it is sent (not exactly-once).
        let applied = fresh || matches!(request, Request::Renew { .. });
        self.check_invariants(n, applied, &request, &reply);
    }

    /// Remembers tokens and lease ids that replies showed, for later stale picks.
    fn learn(&mut self, answer: &Answer) {
        let (token, lease_id) = match answer {
            Answer::Granted(shown) | Answer::Lease(shown) => (shown.token, shown.lease_id.clone()),
            _ => return,
        };
        if !self.seen_tokens.contains(&token) {
            self.seen_tokens.push(token);
        }
        if !self.seen_lease_ids.contains(&lease_id) {
            self.seen_lease_ids.push(lease_id);
        }
    }

    fn check_invariants(&mut self, n: usize, applied: bool, request: &Request, reply: &Reply) {
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
        assert_eq!(
            restored.by_holder, self.machine.by_holder,
            "step {n}: holder index"
        );
        let principals = (&restored.by_principal, &self.machine.by_principal);
        assert_eq!(principals.0, principals.1, "step {n}: principal index");

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
                    l.lease_id.as_str(),
                    l.holder.as_str(),
                    l.fencing_token,
                    l.expires_at_ms
                )),
                self.model.current(resource).map(|h| (
                    h.lease_id.as_str(),
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
                let ttl_ms = ttl_ms.unwrap_or(super::DEFAULT_TTL_MS);
                self.tracked.insert(
                    resource.to_string(),
                    Tracked {
                        lease_id: lease.lease_id.clone().to_string(),
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
    }
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 160,
        // Keep failures out of the source tree; a failing case prints its input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn machine_agrees_with_the_model_without_grace(steps in vec(step_strategy(), 1..60)) {
        Run::new(0).run(&steps);
    }

    #[test]
    fn machine_agrees_with_the_model_with_renewal_grace(
        grace_ms in prop_oneof![Just(2_000u64), 1..=4_000u64],
        steps in vec(step_strategy(), 1..60),
    ) {
        Run::new(grace_ms).run(&steps);
    }
}
