//! The node-wide caps ([`Gauge`]) and each principal's share of them ([`PerPrincipal`]):
//! places taken by calls and streams, given back when they end.

use super::*;

/// Which node-wide cap refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// Client requests in flight (`--max-in-flight`).
    InFlight,
    /// One principal's requests in flight (`--max-in-flight-per-principal`).
    PrincipalInFlight,
    /// Long-lived calls open (`--max-open-streams`).
    Streams,
    /// One principal's long-lived calls open (`--max-open-streams-per-principal`).
    PrincipalStreams,
    /// Health Watch and reflection streams open (`--max-public-streams`).
    PublicStreams,
    /// The same, from one address (`--max-public-streams-per-address`).
    AddressPublicStreams,
    /// A Watch whose client takes no message: cut off rather than held.
    SlowWatcher,
}

impl Cap {
    pub fn reason(self) -> Reason {
        match self {
            Cap::InFlight | Cap::PrincipalInFlight => Reason::TooManyRequests,
            Cap::Streams
            | Cap::PrincipalStreams
            | Cap::PublicStreams
            | Cap::AddressPublicStreams => Reason::TooManyStreams,
            Cap::SlowWatcher => Reason::SlowWatcher,
        }
    }
}

/// One node-wide cap: a count of what is open, refused past its limit.
#[derive(Debug)]
pub struct Gauge {
    cap: Cap,
    limit: usize,
    open: Arc<Semaphore>,
}

/// Held while a counted call is open; dropping it frees its place (and its principal's, for
/// a stream a quota counts).
#[derive(Debug)]
pub struct Permit(
    #[allow(dead_code)] OwnedSemaphorePermit,
    #[allow(dead_code)] Vec<PrincipalPermit>,
);

impl Permit {
    /// The same place, holding a place of the principal's too.
    pub fn with(mut self, principal: PrincipalPermit) -> Permit {
        self.1.push(principal);
        self
    }
}

/// A call's place among the requests in flight, in its extensions: a call that turns into a
/// long wait (an Acquire that queues) gives it up for a place among the open streams, so that
/// waits never crowd out the short calls (a Renew) the in-flight cap is for.
#[derive(Clone, Debug)]
pub struct InFlight(Arc<std::sync::Mutex<Option<Places>>>);

/// One call's places in flight: its principal's (None with auth off) and the node's.
type Places = (Option<PrincipalPermit>, Permit);

impl InFlight {
    /// The places of one call: its principal's (None with auth off) and the node's.
    pub fn new(principal: Option<PrincipalPermit>, node: Permit) -> Self {
        InFlight(Arc::new(std::sync::Mutex::new(Some((principal, node)))))
    }

    /// Frees the place now rather than when the call ends.
    pub fn release(&self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// What each principal holds of one node-wide cap: its requests in flight
/// (`--max-in-flight-per-principal`), its streams open (`--max-open-streams-per-principal`),
/// its watches and inboxes (quotas). Holds an entry only for a principal that holds some.
#[derive(Debug)]
pub struct PerPrincipal {
    cap: Cap,
    limit: usize,
    pub(super) open: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

/// A principal's place among its requests in flight; dropping it frees the place.
#[derive(Debug)]
pub struct PrincipalPermit {
    open: Arc<std::sync::Mutex<HashMap<String, usize>>>,
    principal: String,
}

impl Drop for PrincipalPermit {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.principal);
            }
        }
    }
}

impl PerPrincipal {
    /// Each principal's share of `cap`: at most `limit` places.
    pub fn new(cap: Cap, limit: usize) -> Self {
        PerPrincipal {
            cap,
            limit,
            open: Arc::default(),
        }
    }

    /// A place for one more of `principal`'s, or `resource_exhausted` naming the cap.
    pub fn enter(&self, principal: &str) -> Result<PrincipalPermit, ApiError> {
        self.enter_up_to(principal, self.limit)
            .ok_or_else(|| ApiError::Limit {
                cap: self.cap,
                detail: match self.cap {
                    Cap::PrincipalStreams => format!(
                        "principal {principal} has its limit of {} Watch, Serve, KeepAlive and waiting Acquire calls open on this node (--max-open-streams-per-principal); close some, or use another node",
                        self.limit
                    ),
                    Cap::AddressPublicStreams => format!(
                        "address {principal} has its limit of {} health Watch and reflection streams open on this node (--max-public-streams-per-address)",
                        self.limit
                    ),
                    _ => format!(
                        "principal {principal} has its limit of {} requests in flight on this node (--max-in-flight-per-principal); retry with backoff",
                        self.limit
                    ),
                },
            })
    }

    /// A place for one more of `principal`'s, if it holds fewer than `limit`.
    pub fn enter_up_to(&self, principal: &str, limit: usize) -> Option<PrincipalPermit> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(principal.to_string()).or_default();
        if *count >= limit {
            if *count == 0 {
                open.remove(principal);
            }
            return None;
        }
        *count += 1;
        Some(PrincipalPermit {
            open: self.open.clone(),
            principal: principal.to_string(),
        })
    }

    /// How many places `principal` holds.
    pub fn held_by(&self, principal: &str) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(principal).copied().unwrap_or(0)
    }
}

impl Gauge {
    pub fn new(cap: Cap, limit: usize) -> Self {
        Gauge {
            cap,
            limit,
            open: Arc::new(Semaphore::new(limit)),
        }
    }

    /// A place for one more call, or `resource_exhausted` naming the cap.
    pub fn enter(&self) -> Result<Permit, ApiError> {
        self.open
            .clone()
            .try_acquire_owned()
            .map(|permit| Permit(permit, Vec::new()))
            .map_err(|_| ApiError::Limit {
                cap: self.cap,
                detail: match self.cap {
                    Cap::InFlight => format!(
                        "this node is handling its limit of {} client requests (--max-in-flight); retry with backoff or on another node",
                        self.limit
                    ),
                    Cap::PrincipalInFlight | Cap::PrincipalStreams | Cap::AddressPublicStreams => {
                        format!("this principal has its limit of {} on this node", self.limit)
                    }
                    Cap::Streams => format!(
                        "this node has its limit of {} Watch, Serve and waiting Acquire calls open (--max-open-streams); close some, or use another node",
                        self.limit
                    ),
                    Cap::SlowWatcher => "a watcher that reads nothing is cut off".to_string(),
                    Cap::PublicStreams => format!(
                        "this node has its limit of {} health Watch and reflection streams open (--max-public-streams)",
                        self.limit
                    ),
                },
            })
    }

    /// How many calls hold a place now.
    pub fn open(&self) -> usize {
        self.limit - self.open.available_permits()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}
