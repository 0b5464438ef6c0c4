//! Fair shares of the log between the principals that contend for it ([`Fairness`]).

use std::collections::{HashMap, VecDeque};

/// How each principal has fared in recent entries: averages over about [`HORIZON`] entries
/// of how often it had a command waiting when an entry formed, how many it had waiting, and
/// how many it got into the entry.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Share {
    pub(super) present: f64,
    pub(super) depth: f64,
    pub(super) taken: f64,
}

/// Entries the averages of [`Share`] span.
pub(super) const HORIZON: f64 = 64.0;
/// A principal with commands waiting at this share of entries or more is contending for the
/// log; one that writes now and then (a heartbeat a second) is not, and paces nobody.
pub(super) const CONTENDER: f64 = 0.02;
/// The longest a command is held back for its principal's share: well within a call's
/// deadline and the nodes' `--request-timeout`, so that holding back never makes a call time
/// out and come back (a flood of 10,000 waits on one resource would then churn for minutes).
pub(super) const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// A principal with this many commands waiting, on average, when an entry forms floods: it
/// has more to send than the log takes. Only such a principal is ever held back; one client
/// with a call in flight never has more than one waiting, and is never slowed for its luck.
pub(super) const FLOODING: f64 = 2.0;
/// How far past the busiest other contender's share a flooding principal may get before it
/// is held back.
pub(super) const SLACK: f64 = 1.25;

/// Fair shares of the log between principals that contend for it. An entry takes at most
/// as many commands of a principal as the busiest other could give ([`Segment::caps`]),
/// but that alone leaves one with many calls in flight a command in every entry, while a
/// client with one call in flight has one waiting in only some. So a principal that floods
/// (has commands waiting at [`FLOODING`] of entries or more) and has got more than [`SLACK`]
/// times the share of the busiest other contender is held back while another entry is being
/// committed, until the others catch up; alone (no other contender) it is never held back. Its clients' calls wait longer, and it gets about the rate of the
/// busiest other principal: honest clients keep their throughput beside one that floods.
#[derive(Debug, Default)]
pub(super) struct Fairness {
    pub(super) shares: HashMap<String, Share>,
}

impl Fairness {
    /// Principals held back now, among `waiting` (those with commands queued).
    pub(super) fn over_share(&self, waiting: &VecDeque<String>) -> Vec<String> {
        let (mut first, mut second) = ((None::<&str>, 0.0f64), 0.0f64);
        let mut contenders = 0;
        for (principal, share) in &self.shares {
            if share.present < CONTENDER {
                continue;
            }
            contenders += 1;
            if share.taken > first.1 {
                second = first.1;
                first = (Some(principal.as_str()), share.taken);
            } else if share.taken > second {
                second = share.taken;
            }
        }
        waiting
            .iter()
            .filter(|principal| {
                let Some(mine) = self.shares.get(principal.as_str()) else {
                    return false;
                };
                if mine.depth < FLOODING {
                    return false;
                }
                let me_contending = usize::from(mine.present >= CONTENDER);
                if contenders <= me_contending {
                    return false;
                }
                let others = if first.0 == Some(principal.as_str()) {
                    second
                } else {
                    first.1
                };
                mine.taken > SLACK * others + 1.0 / HORIZON
            })
            .cloned()
            .collect()
    }

    /// After an entry formed: `waiting` had that many commands queued, `taken` got that
    /// many in.
    pub(super) fn record(&mut self, waiting: &[(String, usize)], taken: &[(String, usize)]) {
        let keep = 1.0 - 1.0 / HORIZON;
        for share in self.shares.values_mut() {
            share.present *= keep;
            share.depth *= keep;
            share.taken *= keep;
        }
        for (principal, n) in waiting {
            let share = self.shares.entry(principal.clone()).or_default();
            share.present += 1.0 / HORIZON;
            share.depth += *n as f64 / HORIZON;
        }
        for (principal, n) in taken {
            self.shares.entry(principal.clone()).or_default().taken += *n as f64 / HORIZON;
        }
        self.shares
            .retain(|_, share| share.present > 1e-3 || share.taken > 1e-3);
    }
}
