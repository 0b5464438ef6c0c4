//! What every step must keep: the reply's shape, the invariants of SPEC §1 and §4 after every
//! entry, reads that never fail but for `compacted`, and snapshots that restore exactly.

use tenure_proto::v1 as pb;

use super::gen::{label, Read, HOLDERS, RESOURCES};
use super::Run;
use crate::error::ApiError;
use crate::grpc::{convert, validate as request};
use crate::lease::command::{Op, Reply};
use crate::lease::encoding::{decode_state, encode_state};
use crate::lease::query::Answer;

/// What the node's handler does with a validation error: it must be a client error.
#[track_caller]
pub(super) fn client_error(error: &ApiError) {
    let (reason, code) = error.reason_and_code();
    assert!(
        matches!(error, ApiError::Rejected(_)),
        "validation answered {reason}: {error:?}"
    );
    assert_ne!(code, tonic::Code::Internal, "{error:?}");
}

impl Run {
    /// The reply has the shape the gRPC handler maps (anything else would be `internal`), and
    /// every lease it shows converts.
    pub(super) fn check_reply(&mut self, n: usize, op: &Op, reply: &Reply) {
        let fits = match (op, reply) {
            (_, Reply::Rejected(rejection)) => {
                client_error(&ApiError::from(rejection.clone()));
                true
            }
            (Op::CreateResource(_), Reply::Resource(view)) => {
                convert::resource(view);
                true
            }
            (Op::Acquire(_), Reply::Acquire(outcome)) => {
                assert_eq!(
                    outcome.granted,
                    outcome.lease.is_some(),
                    "step {n}: {outcome:?}"
                );
                assert_eq!(
                    outcome.granted,
                    outcome.refusal.is_none(),
                    "step {n}: {outcome:?}"
                );
                self.seen.extend(outcome.lease.iter().cloned());
                self.seen.extend(outcome.holders.iter().cloned());
                true
            }
            (Op::Renew(_) | Op::Release(_) | Op::Transfer(_), Reply::Lease(view)) => {
                convert::lease(view);
                self.seen.push(view.clone());
                true
            }
            (Op::Tick, Reply::Reclaimed(_)) => true,
            (Op::CancelWait(_), Reply::Cancelled { .. }) => true,
            (Op::Book(_) | Op::CancelBooking(_), Reply::Booking(_)) => true,
            _ => false,
        };
        assert!(fits, "step {n}: {op:?} answered {reply:?}");
    }

    pub(super) fn check_invariants(&mut self, n: usize) {
        self.invariants.check(&self.log.state, self.log.index, n);
    }

    /// A read through validation and `query::answer`: no panic, never `internal`.
    pub(super) fn read(&self, read: &Read) {
        const PREFIXES: [&str; 5] = ["", "d", "p", "bad prefix", "db"];
        const PRINCIPALS: [&str; 5] = ["", "alice", "bob", "root", "ctl\n"];
        const RESOURCE_TOKENS: [&str; 4] = ["", "db", "bad token", "zzz"];
        const LEASE_TOKENS: [&str; 5] = ["", "db|lse_1_0", "nopipe", "a|b|c", "db|"];
        const HISTORY_TOKENS: [&str; 5] = [
            "",
            "3.0",
            "x",
            "1.99999999999",
            "18446744073709551615.4294967295",
        ];
        let query = match read {
            Read::Get(name, consistency) => request::get_resource(&pb::GetResourceRequest {
                name: RESOURCES[*name].into(),
                consistency: *consistency,
            }),
            Read::Resources {
                prefix,
                page_size,
                page_token,
            } => request::list_resources(&pb::ListResourcesRequest {
                prefix: PREFIXES[*prefix].into(),
                page_size: *page_size,
                page_token: RESOURCE_TOKENS[*page_token].into(),
                consistency: 0,
            }),
            Read::Leases {
                holder,
                principal,
                page_size,
                page_token,
            } => request::list_leases(&pb::ListLeasesRequest {
                holder: HOLDERS[*holder].into(),
                principal: PRINCIPALS[*principal].into(),
                page_size: *page_size,
                page_token: LEASE_TOKENS[*page_token].into(),
                consistency: 0,
            }),
            Read::History {
                resource,
                page_size,
                page_token,
                order,
                events,
            } => request::history(&pb::HistoryRequest {
                resource: RESOURCES[*resource].into(),
                page_size: *page_size,
                page_token: HISTORY_TOKENS[*page_token].into(),
                order: *order,
                events: events.clone(),
                consistency: 0,
            }),
            Read::Validate {
                target,
                fsm,
                consistency,
            } => {
                let (resource, lease_id, _, fencing_token) = self.aim(target);
                request::validate(&pb::ValidateRequest {
                    resource,
                    lease_id,
                    fencing_token,
                    fsm_machine: label(fsm.0),
                    fsm_transition: label(fsm.1),
                    consistency: *consistency,
                })
            }
        };
        let (query, _stale) = match query {
            Ok(query) => query,
            Err(error) => return client_error(&error),
        };
        match self.log.query(&query) {
            Answer::Resource(view) => drop(convert::resource(&view)),
            Answer::Resources { resources, .. } => {
                resources.iter().for_each(|r| drop(convert::resource(r)));
            }
            Answer::Leases { leases, next } => {
                leases.iter().for_each(|l| drop(convert::lease(l)));
                if let Some((resource, lease_id)) = next {
                    let token = request::lease_page_token(&resource, &lease_id);
                    let again = pb::ListLeasesRequest {
                        holder: "h1".into(),
                        page_token: token,
                        ..Default::default()
                    };
                    request::list_leases(&again).expect("a page token we made parses");
                }
            }
            Answer::History { events, next } => {
                events
                    .iter()
                    .for_each(|e| drop(convert::history_entry("r", e)));
                if let Some(position) = next {
                    let again = pb::HistoryRequest {
                        resource: "db".into(),
                        page_token: request::history_page_token(position),
                        ..Default::default()
                    };
                    request::history(&again).expect("a page token we made parses");
                }
            }
            Answer::Validate(v) => {
                assert!(v.valid == (v.reason == "ok"), "{v:?}");
                v.lease.iter().for_each(|l| drop(convert::lease(l)));
            }
            Answer::Rejected(rejection) => {
                assert_eq!(rejection.reason(), "compacted", "{query:?}: {rejection:?}");
            }
            Answer::Session(_) | Answer::Sessions { .. } => {
                panic!("the pipeline asks no session reads: {query:?}")
            }
        }
    }

    /// A snapshot of the state restores to the same state, derived indexes included.
    pub(super) fn check_snapshot(&self) {
        let bytes = encode_state(&self.log.state).expect("state serializes");
        let restored = decode_state(&bytes).expect("state deserializes");
        assert_eq!(restored, self.log.state, "snapshot round trip");
    }
}
