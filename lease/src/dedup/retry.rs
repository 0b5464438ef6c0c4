//! A retry's answer: the remembered reply made whole again from the state (SPEC §4.18).

use super::Kept;
use crate::command::{Op, Reply};
use crate::machine::State;
use std::collections::BTreeMap;

use crate::types::{Held, LeaseId, LeaseView};

impl State {
    /// A remembered reply made whole again for a retry: metadata from the lease (or the
    /// request), the current holders (and reopening) of a refused acquire, a registered
    /// resource as it is.
    pub fn rebuild(&self, kept: Kept, op: &Op) -> Reply {
        let mut reply = match kept {
            Kept::Resource(name) => return Reply::Resource(Box::new(self.resource_view(&name))),
            Kept::Reply(reply) => reply,
        };
        match (&mut reply, op) {
            (Reply::Acquire(outcome), op) => {
                let Some(op) = op.acquire_op() else {
                    return reply;
                };
                if let Some(view) = &mut outcome.lease {
                    self.make_whole(view, Some(&op.metadata));
                }
                if !outcome.granted {
                    outcome.holders = self.holders_of(&op.resource);
                    outcome.closed_until_wall_ms =
                        self.closed_until_for(&op.resource, outcome.refusal);
                }
            }
            (Reply::Many(outcome), Op::AcquireMany(op)) => {
                for view in &mut outcome.leases {
                    self.make_whole(view, Some(&op.metadata));
                }
                for claim in &mut outcome.claims {
                    claim.holders = self.claim_holders(&claim.resource);
                    claim.closed_until_wall_ms =
                        self.closed_until_for(&claim.resource, claim.refusal);
                }
            }
            (Reply::Lease(view), _) => self.make_whole(view, None),
            // A closed session's answer lists the leases it ended, every one on it.
            (Reply::Session(view), _) => {
                let session = std::num::NonZeroU64::new(view.id);
                for lease in &mut view.leases {
                    lease.lease.session = session;
                }
            }
            _ => {}
        }
        reply
    }

    /// A kept lease view with its session and metadata again, read from the lease (or, if
    /// no longer remembered, the request's `asked` metadata).
    fn make_whole(&self, view: &mut LeaseView, asked: Option<&BTreeMap<String, String>>) {
        let lease = self.remembered(&view.lease.resource, view.lease.lease_id());
        view.lease.session = lease.as_ref().and_then(|l| l.session);
        view.lease.metadata = match (lease, asked) {
            (Some(l), _) => l.metadata,
            (None, Some(asked)) => asked.clone().into(),
            (None, None) => Default::default(),
        };
    }

    /// A live or remembered ended lease: what a record leaves out (metadata, session) is
    /// read from it.
    fn remembered(&self, resource: &str, lease_id: LeaseId) -> Option<Held> {
        let rs = self.resource_ref(resource)?;
        let found = rs.lease(lease_id).or_else(|| {
            rs.ended
                .iter()
                .map(|e| &e.lease.held)
                .find(|l| l.lease_id() == lease_id)
        });
        found.cloned()
    }
}
