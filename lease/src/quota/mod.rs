//! Quotas per principal: what one caller may hold at once, so that no principal can grow the
//! replicated state (and every snapshot) without bound.
//!
//! The limits are replicated: compiled defaults, a cluster-wide default an admin may change,
//! and per-principal overrides, all set by log entries ([`super::command::Op::SetQuota`]), so
//! that every node refuses alike. What each principal holds ([`Usage`]) is derived from the
//! state and rebuilt when a snapshot loads. Watches and Serve inboxes live on one node, not in
//! the state: their limits are replicated here, and each node counts its own.

use foldhash::HashMap;
use foldhash::HashMapExt;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use super::types::{Name, Rejection};

/// The exactly-once table of all principals together, in bytes: past it, no new request id is
/// remembered and writes that carry one are refused.
pub const EXACTLY_ONCE_TOTAL_BYTES: u64 = 1 << 30;

/// The principal of every caller when auth is off: the admin for permissions, but held to the
/// quotas like a client (an admin's exemption is from permissions, not from bounds), so that a
/// development cluster without a token file cannot be grown without limit either.
pub const ANONYMOUS: &str = "anonymous";

/// One kind of thing a principal holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Quota {
    /// Live leases (active or in grace).
    Leases,
    /// Ad-hoc (unregistered) resources on which the principal holds, waits or books.
    AdHocResources,
    /// Queued acquires in all waiting rooms.
    Waiters,
    /// Bookings whose window has not ended.
    Bookings,
    /// Metadata of live leases and waiters, keys and values plus [`METADATA_ENTRY_BYTES`]
    /// per entry.
    MetadataBytes,
    /// Remembered exactly-once records (see `dedup`).
    ExactlyOnceBytes,
    /// Open watches, per node.
    Watches,
    /// Open Serve inboxes, per node.
    Inboxes,
    /// Open watches of every resource (prefix ""), per node: none unless an admin allows
    /// them (an admin's own are not limited).
    AllResourceWatches,
    /// Live sessions (SPEC §4.24).
    Sessions,
}

pub const ALL: [Quota; 10] = [
    Quota::Leases,
    Quota::AdHocResources,
    Quota::Waiters,
    Quota::Bookings,
    Quota::MetadataBytes,
    Quota::ExactlyOnceBytes,
    Quota::Watches,
    Quota::Inboxes,
    Quota::AllResourceWatches,
    Quota::Sessions,
];

impl Quota {
    /// The name in errors, metrics, the API and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Quota::Leases => "leases",
            Quota::AdHocResources => "ad_hoc_resources",
            Quota::Waiters => "waiters",
            Quota::Bookings => "bookings",
            Quota::MetadataBytes => "metadata_bytes",
            Quota::ExactlyOnceBytes => "exactly_once_bytes",
            Quota::Watches => "watches",
            Quota::Inboxes => "inboxes",
            Quota::AllResourceWatches => "all_resource_watches",
            Quota::Sessions => "sessions",
        }
    }

    pub fn from_name(name: &str) -> Option<Quota> {
        ALL.into_iter().find(|q| q.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One limit per [`Quota`], in [`ALL`]'s order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits(pub [u64; 10]);

impl Limits {
    /// What a principal may hold when nobody said otherwise.
    pub const DEFAULT: Limits = Limits([
        100_000,  // leases
        100_000,  // ad-hoc resources
        10_000,   // waiters
        1_000,    // bookings
        64 << 20, // metadata bytes
        64 << 20, // exactly-once bytes
        1_000,    // watches per node
        1_000,    // inboxes per node
        0,        // watches of every resource per node
        10_000,   // sessions
    ]);

    pub fn get(&self, quota: Quota) -> u64 {
        self.0[quota.index()]
    }
}

/// Limits set for one principal (or for every principal): `None` keeps the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides(pub [Option<u64>; 10]);

impl Overrides {
    pub fn get(&self, quota: Quota) -> Option<u64> {
        self.0[quota.index()]
    }

    pub fn set(&mut self, quota: Quota, limit: Option<u64>) {
        self.0[quota.index()] = limit;
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

/// What one principal holds now, per [`Quota`] (watches and inboxes are counted by nodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage(pub [u64; 10]);

impl Usage {
    pub fn get(&self, quota: Quota) -> u64 {
        self.0[quota.index()]
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|n| *n == 0)
    }
}

/// What a quota call answers: the settings of the cluster (`principal` None) or of one
/// principal, the limits that hold for it, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaView {
    pub principal: Option<String>,
    pub settings: Overrides,
    pub limits: Limits,
    pub usage: Usage,
}

/// What metadata costs a principal: keys and values, and [`METADATA_ENTRY_BYTES`] per entry
/// for the map's node and the two strings' headers.
pub fn metadata_cost<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> u64 {
    entries
        .into_iter()
        .map(|(k, v)| (k.len() + v.len()) as u64 + METADATA_ENTRY_BYTES)
        .sum()
}

/// The memory of one metadata entry besides its bytes.
pub const METADATA_ENTRY_BYTES: u64 = 64;

/// A quota call's answer as releases before `sessions` encoded it (nine kinds).
#[derive(Deserialize)]
#[cfg_attr(any(test, feature = "testkit"), derive(Serialize))]
pub struct QuotaViewV5 {
    pub principal: Option<String>,
    pub settings: [Option<u64>; 9],
    pub limits: [u64; 9],
    pub usage: [u64; 9],
}

impl From<QuotaViewV5> for QuotaView {
    fn from(old: QuotaViewV5) -> Self {
        let mut settings = Overrides::default();
        settings.0[..9].copy_from_slice(&old.settings);
        // The kind the old release did not know held its compiled default then.
        let mut limits = Limits::DEFAULT;
        limits.0[..9].copy_from_slice(&old.limits);
        let mut usage = Usage::default();
        usage.0[..9].copy_from_slice(&old.usage);
        QuotaView {
            principal: old.principal,
            settings,
            limits,
            usage,
        }
    }
}

/// Quotas as snapshot format 5 holds them: nine kinds, before `sessions`.
#[derive(Deserialize)]
pub struct QuotasV5 {
    defaults: [Option<u64>; 9],
    overrides: Vec<(Name, [Option<u64>; 9])>,
}

impl From<QuotasV5> for Quotas {
    fn from(old: QuotasV5) -> Self {
        let widen = |nine: [Option<u64>; 9]| {
            let mut all = Overrides::default();
            all.0[..9].copy_from_slice(&nine);
            all
        };
        Quotas {
            defaults: widen(old.defaults),
            overrides: old
                .overrides
                .into_iter()
                .map(|(name, nine)| (name, widen(nine)))
                .collect(),
            usage: HashMap::new(),
        }
    }
}

/// The replicated limits and the derived usage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Changes to the compiled defaults, for every principal.
    defaults: Overrides,
    /// Per principal, over the defaults. Persistent: a snapshot's copy is O(1).
    overrides: OrdMap<Name, Overrides>,
    /// Derived: rebuilt from the state when a snapshot loads.
    #[serde(skip)]
    usage: HashMap<Name, Usage>,
}

impl Quotas {
    /// The limits that hold for `principal`.
    pub fn limits(&self, principal: &str) -> Limits {
        self.limits_over(self.overrides.get(principal))
    }

    /// The limits of the principal whose own settings are `own` (None: the defaults').
    fn limits_over(&self, own: Option<&Overrides>) -> Limits {
        Limits(ALL.map(|quota| self.limit(own, quota)))
    }

    /// One limit of the principal whose own settings are `own`.
    fn limit(&self, own: Option<&Overrides>, quota: Quota) -> u64 {
        own.and_then(|own| own.get(quota))
            .or(self.defaults.get(quota))
            .unwrap_or(Limits::DEFAULT.get(quota))
    }

    pub fn usage(&self, principal: &str) -> Usage {
        self.usage.get(principal).copied().unwrap_or_default()
    }

    /// The cluster-wide defaults, and the principal's own settings if it has any.
    pub fn settings(&self, principal: Option<&str>) -> Overrides {
        match principal {
            None => self.defaults,
            Some(p) => self.overrides.get(p).copied().unwrap_or_default(),
        }
    }

    /// The principals with settings of their own.
    #[cfg(any(test, feature = "testkit"))]
    pub fn principals_with_settings(&self) -> impl Iterator<Item = (&Name, &Overrides)> {
        self.overrides.iter()
    }

    /// Changes limits: of every principal (`None`) or of one. A `None` limit goes back to
    /// the default.
    pub fn set(&mut self, principal: Option<&str>, changes: &[(Quota, Option<u64>)]) {
        let target = match principal {
            None => &mut self.defaults,
            Some(p) => self.overrides.entry(Name::from(p)).or_default(),
        };
        for (quota, limit) in changes {
            target.set(*quota, *limit);
        }
        if let Some(p) = principal {
            if self.overrides.get(p).is_some_and(Overrides::is_empty) {
                self.overrides.remove(p);
            }
        }
    }

    /// Refuses to let `principal` hold `more` of `quota` beyond what it holds now.
    pub fn admit(&self, principal: &str, quota: Quota, more: u64) -> Result<(), Rejection> {
        self.admit_all(principal, &[(quota, more)])
    }

    /// Refuses `more` of each quota beyond what `principal` holds now, reading its limits
    /// and usage once.
    pub fn admit_all(&self, principal: &str, wanted: &[(Quota, u64)]) -> Result<(), Rejection> {
        let own = self.overrides.get(principal);
        let usage = self.usage.get(principal);
        for &(quota, more) in wanted {
            if more == 0 {
                continue;
            }
            let held = usage.map_or(0, |usage| usage.get(quota));
            let limit = self.limit(own, quota);
            if held.saturating_add(more) > limit {
                return Err(Rejection::QuotaExceeded {
                    quota: quota.name().to_string(),
                    limit,
                    principal: principal.to_string(),
                });
            }
        }
        Ok(())
    }

    /// `principal` now holds `delta` more (or fewer) of `quota`.
    pub fn add(&mut self, principal: &str, quota: Quota, delta: i64) {
        self.add_all(principal, &[(quota, delta)]);
    }

    /// `principal` now holds each `delta` more (or fewer) of its quota: one lookup.
    pub fn add_all(&mut self, principal: &str, changes: &[(Quota, i64)]) {
        if changes.iter().all(|(_, delta)| *delta == 0) {
            return;
        }
        let growing = changes.iter().any(|(_, delta)| *delta > 0);
        let usage = match self.usage.get_mut(principal) {
            Some(usage) => usage,
            None if !growing => return,
            None => self.usage.entry(Name::from(principal)).or_default(),
        };
        for (quota, delta) in changes {
            let n = &mut usage.0[quota.index()];
            *n = n.saturating_add_signed(*delta);
        }
        if usage.is_empty() {
            self.usage.remove(principal);
        }
    }

    /// The replicated part, for a snapshot (usage is rebuilt when it loads).
    pub fn replicated(&self) -> Quotas {
        Quotas {
            defaults: self.defaults,
            overrides: self.overrides.clone(),
            usage: HashMap::new(),
        }
    }

    /// Forgets all usage (before a rebuild).
    pub(super) fn clear_usage(&mut self) {
        self.usage.clear();
    }

    /// The principals holding the most of `quota`, most first (ties by name), at most `n`.
    pub fn top(&self, quota: Quota, n: usize) -> Vec<(Name, Usage)> {
        let mut all: Vec<(Name, Usage)> = self
            .usage
            .iter()
            .filter(|(_, u)| u.get(quota) > 0)
            .map(|(p, u)| (p.clone(), *u))
            .collect();
        all.sort_by(|a, b| b.1.get(quota).cmp(&a.1.get(quota)).then(a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// The answer of a quota call about `principal` (None = the cluster's defaults).
    pub fn view(&self, principal: Option<&str>) -> QuotaView {
        QuotaView {
            principal: principal.map(str::to_string),
            settings: self.settings(principal),
            limits: match principal {
                Some(p) => self.limits(p),
                None => self.limits_over(None),
            },
            usage: principal.map(|p| self.usage(p)).unwrap_or_default(),
        }
    }
}

mod count;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_override_beats_the_cluster_default_which_beats_the_compiled_one() {
        let mut quotas = Quotas::default();
        assert_eq!(quotas.limits("a").get(Quota::Leases), 100_000);
        quotas.set(None, &[(Quota::Leases, Some(10))]);
        assert_eq!(quotas.limits("a").get(Quota::Leases), 10);
        quotas.set(Some("a"), &[(Quota::Leases, Some(20))]);
        assert_eq!(quotas.limits("a").get(Quota::Leases), 20);
        assert_eq!(quotas.limits("b").get(Quota::Leases), 10);
        quotas.set(Some("a"), &[(Quota::Leases, None)]);
        assert_eq!(quotas.limits("a").get(Quota::Leases), 10);
        assert_eq!(quotas.overrides.len(), 0, "an empty override is forgotten");
    }

    #[test]
    fn admit_refuses_only_past_the_limit_and_usage_forgets_idle_principals() {
        let mut quotas = Quotas::default();
        quotas.set(Some("a"), &[(Quota::Waiters, Some(2))]);
        quotas.add("a", Quota::Waiters, 1);
        assert!(quotas.admit("a", Quota::Waiters, 1).is_ok());
        quotas.add("a", Quota::Waiters, 1);
        let refused = quotas
            .admit("a", Quota::Waiters, 1)
            .expect_err("over the limit");
        assert_eq!(refused.reason(), "resource_exhausted");
        assert!(refused.to_string().contains("waiters"), "{refused}");
        quotas.add("a", Quota::Waiters, -2);
        assert!(quotas.usage.is_empty());
        assert_eq!(quotas.top(Quota::Waiters, 5), vec![]);
    }
}
