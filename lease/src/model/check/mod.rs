//! The property test: random command sequences through the machine and through the model,
//! every answer compared, and what the test knows from its own clock checked on the way
//! (`invariants`).

mod invariants;

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;

use super::adapt::{answer_of, op_of, policy_with_grace};
use super::gen::*;
use super::{Answer, Model, Request};
use crate::command::{Command, Proposal, Stamp};
use crate::lease_clock::LeaderKey;
use crate::machine::{apply, EntryMeta, State};
use crate::policy::{DEDUP_WINDOW_MS, HOUR_MS};

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
        // What the leader would answer unproposed from its state (SPEC §4.21) is what apply
        // answers: the state is fresh when the entry's stamp is, for this leader.
        let early = self
            .machine
            .is_fresh(self.leader, &proposal.stamp)
            .then(|| {
                self.machine
                    .certainly_refused(&proposal, self.leader, &proposal.stamp)
            })
            .flatten();
        let reply = apply(&mut self.machine, meta, &Command::V1(proposal));
        if let Some(early) = early {
            assert_eq!(
                early, reply,
                "step {n}: {request:?} by {principal}: refused unproposed (left), applied (right)"
            );
        }
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
