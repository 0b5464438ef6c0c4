//! A retry's answer: the remembered reply made whole again from the state (SPEC §4.18).

use super::Kept;
use crate::lease::command::{Op, Reply};
use crate::lease::machine::State;
use crate::lease::types::{Lease, LeaseId};

impl State {
    /// A remembered reply made whole again for a retry: metadata from the lease (or the
    /// request), the current holders of a refused acquire, a registered resource as it is.
    pub(crate) fn rebuild(&self, kept: Kept, op: &Op) -> Reply {
        let mut reply = match kept {
            Kept::Resource(name) => return Reply::Resource(Box::new(self.resource_view(&name))),
            Kept::Reply(reply) => reply,
        };
        match (&mut reply, op.acquire_op()) {
            (Reply::Acquire(outcome), Some(op)) => {
                if let Some(view) = &mut outcome.lease {
                    let lease = self.remembered(&view.lease.resource, view.lease.lease_id());
                    view.lease.session = lease.and_then(|l| l.session);
                    view.lease.metadata =
                        lease.map_or_else(|| op.metadata.clone().into(), |l| l.metadata.clone());
                }
                if !outcome.granted {
                    outcome.holders = self.holders_of(&op.resource);
                }
            }
            (Reply::Lease(view), _) => {
                let lease = self.remembered(&view.lease.resource, view.lease.lease_id());
                view.lease.session = lease.and_then(|l| l.session);
                view.lease.metadata = lease.map(|l| l.metadata.clone()).unwrap_or_default();
            }
            _ => {}
        }
        reply
    }

    /// A live or remembered ended lease: what a record leaves out (metadata, session) is
    /// read from it.
    fn remembered(&self, resource: &str, lease_id: LeaseId) -> Option<&Lease> {
        let rs = self.resources.get(resource)?;
        rs.lease(lease_id).or_else(|| {
            rs.ended
                .iter()
                .map(|e| &e.lease)
                .find(|l| l.lease_id() == lease_id)
        })
    }
}
