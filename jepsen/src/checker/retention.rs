//! What the cluster may have dropped from the histories the run read (SPEC §4.11: by default
//! the newest 10,000 events of each resource and 1,000,000 in all are kept, oldest dropped
//! first; an ad-hoc resource left without any is forgotten). The checkers that compare the
//! cluster's record with the clients' judge only what retention cannot have touched.

use crate::history::{Event, History};

/// Events kept per resource (the default).
pub(crate) const PER_RESOURCE: usize = 10_000;
/// Events kept in all (the default).
pub(crate) const TOTAL: usize = 1_000_000;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention {
    /// The total bound was reached: any resource may have lost events, or been forgotten.
    global: bool,
}

impl Retention {
    pub(crate) fn of(history: &History) -> Self {
        let total: usize = history.events.values().map(Vec::len).sum();
        Retention {
            global: total >= TOTAL,
        }
    }

    /// Nothing anywhere can be judged (every history may be partial).
    pub(crate) fn global(&self) -> bool {
        self.global
    }

    /// The revision up to which `events` (one resource's history, as read) may lack events:
    /// 0 when retention cannot have dropped any of them.
    pub(crate) fn floor(&self, events: &[Event]) -> u64 {
        if self.global || events.len() >= PER_RESOURCE {
            // The oldest retained revision may have lost its first events too.
            events.first().map_or(u64::MAX, |e| e.revision)
        } else {
            0
        }
    }
}
