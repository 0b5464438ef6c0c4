//! A retry's answer: the remembered reply made whole again from the state (SPEC §4.18).

use super::Kept;
use crate::lease::command::{Op, Reply};
use crate::lease::machine::State;
use crate::lease::types::{LeaseId, Metadata};

impl State {
    /// A remembered reply made whole again for a retry: metadata from the lease (or the
    /// request), the current holders of a refused acquire, a registered resource as it is.
    pub(crate) fn rebuild(&self, kept: Kept, op: &Op) -> Reply {
        let mut reply = match kept {
            Kept::Resource(name) => return Reply::Resource(Box::new(self.resource_view(&name))),
            Kept::Reply(reply) => reply,
        };
        match (&mut reply, op) {
            (Reply::Acquire(outcome), Op::Acquire(op)) => {
                if let Some(view) = &mut outcome.lease {
                    view.lease.metadata = self
                        .metadata_of(&view.lease.resource, view.lease.lease_id())
                        .unwrap_or_else(|| op.metadata.clone().into());
                }
                if !outcome.granted {
                    outcome.holders = self.holders_of(&op.resource);
                }
            }
            (Reply::Lease(view), _) => {
                view.lease.metadata = self
                    .metadata_of(&view.lease.resource, view.lease.lease_id())
                    .unwrap_or_default();
            }
            _ => {}
        }
        reply
    }

    /// The metadata of a live or remembered ended lease.
    fn metadata_of(&self, resource: &str, lease_id: LeaseId) -> Option<Metadata> {
        let rs = self.resources.get(resource)?;
        rs.lease(lease_id)
            .or_else(|| {
                rs.ended
                    .iter()
                    .map(|e| &e.lease)
                    .find(|l| l.lease_id() == lease_id)
            })
            .map(|l| l.metadata.clone())
    }
}
