//! The streams a node holds open: each takes a place among the node's open streams and one of
//! its principal's share of them; watches, watches of every resource and owner inboxes count
//! against their quotas too, by principal on this node (they are not replicated). Calls that
//! wait for the same wait (a rejoined wait) share one place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::lease::quota::Quota;
use crate::limits::{Cap, PerPrincipal, Permit, PrincipalPermit};

use super::Node;

/// A count of streams by principal that no limit of its own refuses (a quota does, per call).
pub(super) fn counted() -> PerPrincipal {
    PerPrincipal::new(Cap::PrincipalStreams, usize::MAX)
}

/// A wait, by its resource (a multi-wait's first) and holder: a holder waits at most once for
/// a resource, and a call that asks again rejoins that wait.
type WaitKey = (String, String);

/// The places of the waits that calls wait for on this node.
#[derive(Default)]
pub(super) struct WaitPlaces(Arc<Mutex<HashMap<WaitKey, Weak<WaitPlace>>>>);

/// A wait's place among the open streams, held while any call waits for it here.
pub struct WaitPlace {
    _place: Permit,
    key: WaitKey,
    places: Weak<Mutex<HashMap<WaitKey, Weak<WaitPlace>>>>,
}

impl Drop for WaitPlace {
    fn drop(&mut self) {
        let Some(places) = self.places.upgrade() else {
            return;
        };
        let mut places = places.lock().unwrap_or_else(|p| p.into_inner());
        if places
            .get(&self.key)
            .is_some_and(|place| place.strong_count() == 0)
        {
            places.remove(&self.key);
        }
    }
}

/// What a waiting call holds: its principal's share (with auth off, a share of the node's
/// limit), and its wait's place.
pub struct WaitPermit {
    _share: Option<PrincipalPermit>,
    _place: Arc<WaitPlace>,
}

impl Node {
    /// A place for one more long-lived call (Watch, Serve, KeepAlive) of `caller` on this
    /// node: its principal's share first, when callers are authenticated (with auth off every
    /// caller is `anonymous`), then the node's.
    pub fn enter_stream(&self, caller: &Caller) -> Result<Permit, ApiError> {
        let share = self.stream_share(caller)?;
        let place = self.streams.enter()?;
        Ok(match share {
            Some(share) => place.with(share),
            None => place,
        })
    }

    /// A place for a call that waits for `holder`'s wait on `resource`: its principal's share,
    /// and the wait's place among the open streams, which the calls already waiting for the
    /// same wait on this node hold with it: a call that rejoins a wait takes no second place.
    pub fn enter_wait(
        &self,
        caller: &Caller,
        resource: &str,
        holder: &str,
    ) -> Result<WaitPermit, ApiError> {
        let share = match self.auth().is_on() {
            true => self.stream_share(caller)?,
            // With auth off the calls that rejoin waits share no principal's limit: they are
            // held, between them, to the node's.
            false => Some(
                self.streams_per_principal
                    .enter_up_to(&caller.principal, self.config.limits.max_open_streams)
                    .ok_or_else(|| ApiError::Limit {
                        cap: Cap::Streams,
                        detail: format!(
                            "this node has its limit of {} waiting Acquire calls open (--max-open-streams; with auth off, calls that rejoin a wait count too); close some, or use another node",
                            self.config.limits.max_open_streams
                        ),
                    })?,
            ),
        };
        let key = (resource.to_string(), holder.to_string());
        let mut places = self.waits.0.lock().unwrap_or_else(|p| p.into_inner());
        let place = match places.get(&key).and_then(Weak::upgrade) {
            Some(place) => place,
            None => {
                let place = Arc::new(WaitPlace {
                    _place: self.streams.enter()?,
                    key: key.clone(),
                    places: Arc::downgrade(&self.waits.0),
                });
                places.insert(key, Arc::downgrade(&place));
                place
            }
        };
        Ok(WaitPermit {
            _share: share,
            _place: place,
        })
    }

    /// How many long-lived calls of `principal` are open here (with auth off, only the waiting
    /// calls of `anonymous`).
    pub fn streams_held_by(&self, principal: &str) -> usize {
        self.streams_per_principal.held_by(principal)
    }

    /// `principal`'s watch buffer on this node (`grpc::watch`), shared by its watches.
    pub fn watch_buffer(&self, principal: &str) -> Arc<tokio::sync::Semaphore> {
        let mut buffers = self.watch_buffers.lock().unwrap_or_else(|p| p.into_inner());
        // A principal whose watches all ended (no one else holds its buffer) is forgotten.
        if buffers.len() > 64 {
            buffers.retain(|_, buffer| Arc::strong_count(buffer) > 1);
        }
        buffers
            .entry(principal.to_string())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    crate::grpc::watch::WATCH_BUFFER_BYTES_PER_PRINCIPAL,
                ))
            })
            .clone()
    }

    /// How many waits hold a place among the open streams here.
    pub fn waits_open(&self) -> usize {
        let places = self.waits.0.lock().unwrap_or_else(|p| p.into_inner());
        places.len()
    }

    /// `caller`'s share of the open streams, when callers are authenticated.
    fn stream_share(&self, caller: &Caller) -> Result<Option<PrincipalPermit>, ApiError> {
        match self.auth().is_on() {
            true => Ok(Some(self.streams_per_principal.enter(&caller.principal)?)),
            false => Ok(None),
        }
    }

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
            false => self.sm.read().state.quotas().limits(principal).get(quota),
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
