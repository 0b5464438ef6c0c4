//! Quotas of the streams a node holds open: watches, watches of every resource and owner
//! inboxes, counted by principal on this node (they are not replicated).

use crate::auth::Caller;
use crate::error::ApiError;
use crate::lease::quota::Quota;
use crate::limits::{PerPrincipal, Permit};

use super::Node;

impl Node {
    /// A place for one more watch or Serve inbox (`quota`) of `caller` on this node, with
    /// the node-wide place `open_stream`; past the principal's quota, `resource_exhausted`.
    /// An admin's are counted, not limited (as in the state machine).
    pub fn open_stream_of(
        &self,
        caller: &Caller,
        quota: Quota,
        open_stream: Permit,
    ) -> Result<Permit, ApiError> {
        let principal = caller.principal.as_str();
        let limit = match caller.admin {
            true => u64::MAX,
            false => self.sm.read().state.quotas.limits(principal).get(quota),
        };
        let tally = self.tally(quota);
        let place = tally
            .enter_up_to(principal, usize::try_from(limit).unwrap_or(usize::MAX))
            .ok_or_else(|| crate::lease::Rejection::QuotaExceeded {
                quota: quota.name().to_string(),
                limit,
                principal: principal.to_string(),
            })?;
        Ok(open_stream.with(place))
    }

    /// A client call's places in flight: the node's, and its principal's when callers are
    /// authenticated (`auth_on`; with auth off every caller is `anonymous`). The gate takes
    /// them for a unary call, a `KeepAlive` stream for each renewal on it.
    pub fn enter_in_flight(
        &self,
        caller: &Caller,
        auth_on: bool,
    ) -> Result<crate::limits::InFlight, ApiError> {
        let principal = match auth_on {
            true => Some(self.in_flight_per_principal.enter(&caller.principal)?),
            false => None,
        };
        Ok(crate::limits::InFlight::new(
            principal,
            self.in_flight.enter()?,
        ))
    }

    fn tally(&self, quota: Quota) -> &PerPrincipal {
        match quota {
            Quota::Inboxes => &self.serving,
            Quota::AllResourceWatches => &self.all_watches,
            _ => &self.watches,
        }
    }

    /// How many watches or inboxes (`quota`) `principal` has open on this node.
    pub fn streams_of(&self, principal: &str, quota: Quota) -> u64 {
        let tally = self.tally(quota);
        tally.held_by(principal) as u64
    }
}
