//! A property test of the whole write and read path below gRPC: random protobuf requests of
//! every kind, from a few principals and holders over a few resource names (some malformed),
//! go through `grpc::validate` (request → command or query) and then [`apply`] or
//! [`query::answer`]. For every step: no panic, never `internal`, the reply has the shape the
//! handler expects, and the invariants of SPEC §1 and §4 hold after every entry.

mod check;
mod gen;

use proptest::collection::vec;
use proptest::prelude::*;
use tenure_proto::v1 as pb;

use self::check::client_error;
use self::gen::{label, policy, sent, Sent, Step, Target, CALLERS, HOLDERS, RESOURCES};
use crate::grpc::validate as request;
use crate::lease::command::Op;
use crate::lease::types::LeaseView;
use tenure_lease::testkit::invariants::Invariants;
use tenure_lease::testkit::*;

/// The run: the log, every lease any reply showed, and what the invariants remember.
struct Run {
    log: Log,
    seen: Vec<LeaseView>,
    invariants: Invariants,
}

impl Run {
    fn new(require_registration: bool) -> Self {
        let mut log = Log::new();
        log.require_registration = require_registration;
        Run {
            log,
            seen: Vec::new(),
            invariants: Invariants::default(),
        }
    }

    /// The (resource, lease_id, holder, token) a target names.
    fn aim(&self, target: &Target) -> (String, String, String, u64) {
        let (resource, lease_id, holder, token) = if self.seen.is_empty() {
            ("db".to_string(), "lse_1_0".to_string(), "h1".to_string(), 1)
        } else {
            let l = &target.lease.get(&self.seen).lease;
            let (resource, lease_id) = (l.resource.clone(), l.lease_id());
            (
                resource.to_string(),
                lease_id.to_string(),
                l.holder.to_string(),
                l.fencing_token,
            )
        };
        let lease_id = match target.lease_id {
            0 => lease_id,
            1 => String::new(),
            _ => "lse_\u{1b}".into(),
        };
        let holder = target.holder.map_or(holder, |i| HOLDERS[i].to_string());
        let token = match target.token {
            0 => token,
            1 => token + 1,
            2 => token.saturating_sub(1),
            _ => 0,
        };
        (resource, lease_id, holder, token)
    }

    fn request_id(sent: &Sent) -> String {
        sent.request_id
            .map(|i| format!("req-{i}"))
            .unwrap_or_default()
    }

    fn step(&mut self, n: usize, sent: &Sent) {
        let request_id = Self::request_id(sent);
        let op = match &sent.step {
            Step::Tick(ms) => {
                self.log.elapse(*ms);
                Ok(Op::Tick)
            }
            Step::Read(read) => {
                self.read(read);
                return;
            }
            Step::Create { name, kind, policy } => {
                let req = pb::CreateResourceRequest {
                    name: RESOURCES[*name].to_string(),
                    kind: label(*kind),
                    display_name: String::new(),
                    policy: policy.clone(),
                    request_id: request_id.clone(),
                };
                request::create_resource(&req).map(Op::CreateResource)
            }
            Step::Acquire {
                resource,
                holder,
                ttl,
                mode,
                units,
                metadata_bytes,
                on_conflict,
                idempotency_key,
            } => {
                let req = pb::AcquireRequest {
                    resource: RESOURCES[*resource].to_string(),
                    holder: HOLDERS[*holder].to_string(),
                    ttl: *ttl,
                    mode: *mode,
                    units: *units,
                    metadata: match metadata_bytes {
                        0 => Default::default(),
                        n => [("k".to_string(), "v".repeat(*n))].into_iter().collect(),
                    },
                    on_conflict: *on_conflict,
                    wait_timeout: Some(prost_types::Duration {
                        seconds: (*holder as i64 % 3) * 20,
                        nanos: 0,
                    }),
                    idempotency_key: idempotency_key
                        .map(|k| format!("key-{k}"))
                        .unwrap_or_default(),
                    request_id: request_id.clone(),
                    session_id: String::new(),
                };
                request::acquire(&req).map(Op::Acquire)
            }
            Step::Renew { target, ttl } => {
                let (resource, lease_id, holder, fencing_token) = self.aim(target);
                let req = pb::RenewRequest {
                    resource,
                    lease_id,
                    holder,
                    fencing_token,
                    ttl: *ttl,
                    request_id: request_id.clone(),
                    ..Default::default()
                };
                request::renew(&req)
            }
            Step::Release { target } => {
                let (resource, lease_id, holder, fencing_token) = self.aim(target);
                let req = pb::ReleaseRequest {
                    resource,
                    lease_id,
                    holder,
                    fencing_token,
                    request_id: request_id.clone(),
                };
                request::release(&req).map(Op::Release)
            }
            Step::Transfer {
                target,
                to_holder,
                to_principal,
            } => {
                let (resource, lease_id, holder, fencing_token) = self.aim(target);
                let req = pb::TransferRequest {
                    resource,
                    lease_id,
                    holder,
                    fencing_token,
                    to_holder: HOLDERS[*to_holder].to_string(),
                    to_principal: label(*to_principal),
                    request_id: request_id.clone(),
                };
                request::transfer(&req).map(Op::Transfer)
            }
            Step::CancelWait { resource, holder } => {
                let req = pb::CancelWaitRequest {
                    resource: RESOURCES[*resource].to_string(),
                    holder: HOLDERS[*holder].to_string(),
                    request_id: request_id.clone(),
                    queued_revision: 0,
                };
                request::cancel_wait(&req).map(Op::CancelWait)
            }
            Step::Book {
                resource,
                holder,
                start_s,
                duration_s,
                cancel,
            } => {
                let start = Some(prost_types::Timestamp {
                    seconds: 1_700_000_000 + start_s,
                    nanos: 0,
                });
                let (resource, holder) = (
                    RESOURCES[*resource].to_string(),
                    HOLDERS[*holder].to_string(),
                );
                if *cancel {
                    let req = pb::CancelBookingRequest {
                        resource,
                        holder,
                        start,
                        request_id: request_id.clone(),
                    };
                    request::cancel_booking(&req).map(Op::CancelBooking)
                } else {
                    let req = pb::BookRequest {
                        resource,
                        holder,
                        start,
                        duration: Some(prost_types::Duration {
                            seconds: *duration_s,
                            nanos: 0,
                        }),
                        request_id: request_id.clone(),
                    };
                    request::book(&req).map(|op| {
                        // As a node started with --ad-hoc-bookable.
                        Op::Book(crate::lease::BookOp {
                            ad_hoc_bookable: true,
                            ..op
                        })
                    })
                }
            }
        };
        let request_id = request::request_id(&request_id).expect("generated ids are valid");
        let op = match op {
            Ok(op) => op,
            Err(error) => return client_error(&error),
        };
        let caller = CALLERS[sent.caller];
        let reply = self.log.propose_with(caller, request_id, op.clone());
        self.check_reply(n, &op, &reply);
        self.check_invariants(n);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_requests_through_validation_and_apply_keep_every_invariant(
        require_registration in prop::bool::weighted(0.2),
        policies in (policy(), policy()),
        steps in vec(sent(), 1..100),
    ) {
        let mut run = Run::new(require_registration);
        // "db" and "pool" are registered first (when their policies are valid).
        for (name, policy) in [(0, policies.0), (1, policies.1)] {
            let step = Step::Create { name, kind: 1, policy: Some(policy) };
            run.step(0, &Sent { caller: 2, request_id: None, step });
        }
        for (n, sent) in steps.iter().enumerate() {
            run.step(n + 1, sent);
        }
        run.check_snapshot();
    }
}

/// SPEC §4.13: a CreateResource without a policy registers exactly the registered defaults
/// (their values: the lease crate's spec tests).
#[test]
fn s4_13_a_create_without_a_policy_registers_the_defaults() {
    let from_request = request::policy(None, "", "").expect("the defaults are a valid policy");
    assert_eq!(from_request, crate::lease::Policy::registered());
}
