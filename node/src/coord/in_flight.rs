//! The copies of each write with a request id that this node serves as leader and has not
//! answered yet (`Node::writes_on_their_way`): a retry that finds its first copy still on its
//! way to the log is proposed, never refused before it (SPEC §4.21, `forward`).

use crate::coord::Node;
use crate::lease::Proposal;

/// One copy of a write with a request id that this node serves as leader, counted in
/// `Node::writes_on_their_way` from before its refusal is considered until it is answered (or
/// its caller goes away).
pub struct InFlight<'a> {
    node: &'a Node,
    key: Option<(String, String)>,
}

impl<'a> InFlight<'a> {
    pub(crate) fn enter(node: &'a Node, proposal: &Proposal) -> Self {
        match &proposal.request_id {
            Some(id) => node.copy_on_its_way(&proposal.principal, id),
            None => InFlight { node, key: None },
        }
    }

    /// Whether another copy of this write is on its way here.
    pub(crate) fn has_another(&self) -> bool {
        self.key.as_ref().is_some_and(|key| {
            self.node
                .in_flight_copies()
                .get(key)
                .is_some_and(|n| *n > 1)
        })
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut copies = self.node.in_flight_copies();
        if let std::collections::hash_map::Entry::Occupied(mut entry) = copies.entry(key) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }
}

impl Node {
    /// Counts a copy of the write `principal` sends with `request_id` as on its way here
    /// until the returned guard is dropped.
    pub fn copy_on_its_way(&self, principal: &str, request_id: &str) -> InFlight<'_> {
        let key = (principal.to_string(), request_id.to_string());
        *self.in_flight_copies().entry(key.clone()).or_insert(0) += 1;
        InFlight {
            node: self,
            key: Some(key),
        }
    }

    fn in_flight_copies(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, String), u32>> {
        self.writes_on_their_way
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
