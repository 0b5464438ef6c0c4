//! The lease domain's spec tests: one test per rule of SPEC §4.1–4.8, 4.10–4.13, 4.17, 4.18,
//! §5.3 and the order of checks of §3, each named after its rule and kept in the file of its
//! section, driving [`apply`] directly through the harness (`crate::testkit`). The property
//! test of the whole pipeline (request validation → command → apply, and reads) is the
//! node's (`grpc::pipeline_tests`); the reference model and its property test are in `model`.

mod acquire;
mod batch;
mod bookings;
mod event_log;
mod exactly_once;
mod history;
mod limits;
mod listing;
mod many;
mod mutate;
mod order;
mod quotas;
mod rules;
mod sessions;
mod time;
mod transfer;
mod validate;
mod waiting;
mod watch;

use super::command::{AcquireOp, Op, ReleaseOp, RenewOp, Reply};
use super::history::Event;
use super::lease_clock::LeaderKey;
use super::machine::State;
use super::policy::Policy;
use super::query::{Answer, Query, Validation};
use super::types::{LeaseView, Mode, Refusal, Rejection};

pub(super) use crate::testkit::*;
