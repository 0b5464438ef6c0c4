//! The lease domain's values: leases, their views in replies, and the answers that are not grants.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tenure_proto::contract::Reason;

pub(crate) use super::lease_id::WrittenOrder;
pub use super::lease_id::{lease_order, LeaseId};
pub use super::rejection::Rejection;

/// A name the state keeps many of: resource names, holders, principals, lease ids. Up to 24
/// bytes are stored inline, so most take no allocation of their own; at a million leases that
/// is a few hundred bytes per lease. Encoded as a string, like `String`.
pub type Name = compact_str::CompactString;

/// A lease's or an event's metadata. Most have none, so an empty map takes one pointer
/// (a `BTreeMap` is three words); each lease and its `acquired` event carry one. Encoded as
/// the map, like `BTreeMap`.
#[derive(Clone, Default, PartialEq, Eq)]
#[allow(clippy::box_collection)] // the point: one word when empty, instead of three
pub struct Metadata(Option<Box<BTreeMap<String, String>>>);

const NO_METADATA: &BTreeMap<String, String> = &BTreeMap::new();

impl std::ops::Deref for Metadata {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or(NO_METADATA)
    }
}

impl From<BTreeMap<String, String>> for Metadata {
    fn from(map: BTreeMap<String, String>) -> Self {
        Metadata((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for Metadata {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(Metadata::from)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mode {
    Exclusive,
    Read,
    Write,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseStatus {
    Active,
    /// Past `expires_at` but inside the renewal grace: still holds the resource.
    Grace,
    Released,
    Reclaimed,
    Transferred,
}

/// One holder's time-bound claim, with its resource's name: as replies, the ended list and
/// snapshots show it. A live lease is kept in its resource without the name (a [`Held`],
/// which this derefs to): the resource map's key holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub resource: Name,
    pub held: Held,
}

/// A lease as its resource keeps it: every field of a [`Lease`] but the resource's name.
/// Times are lease-clock milliseconds (see `lease_clock`).
///
/// Its lease id is not stored: by the contract it is `lse_<index>_<position>` of the granting
/// entry, and the index is the fencing token, so the lease keeps only the position
/// ([`Held::lease_id`]). Without the id and the resource's name it is 128 bytes, not 192, and
/// a resource keeps its one lease inside its own allocation (`Leases` in `machine/resource.rs`). Encoded
/// (snapshots, remembered replies) with both in place, as before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub holder: Name,
    pub principal: Name,
    pub mode: Mode,
    /// Where in its granting entry this lease was granted (0 for the first).
    pub position: u32,
    pub units: u64,
    /// The log index of the entry that began this tenure.
    pub fencing_token: u64,
    pub acquired_at_ms: u64,
    pub expires_at_ms: u64,
    /// The ttl of the last acquire or renew.
    pub ttl_ms: u64,
    /// Wall-clock stamp of the granting entry: advisory, for people.
    pub acquired_wall_ms: u64,
    pub metadata: Metadata,
    /// Behind a pointer: few leases have one.
    #[allow(clippy::box_collection)]
    pub idempotency_key: Option<Box<Name>>,
    /// The session it lives on (SPEC §4.24), by the index that names it. Not encoded: the
    /// session keeps its leases, and a loaded snapshot names the session here again.
    pub session: Option<std::num::NonZeroU64>,
}

// Inside its resource's allocation (mimalloc's class of 224 bytes with the resource).
const _: () = assert!(std::mem::size_of::<Held>() <= 128);

impl Held {
    pub fn lease_id(&self) -> LeaseId {
        LeaseId {
            index: self.fencing_token,
            position: self.position,
        }
    }

    /// The lease, named with its resource `resource`.
    pub(crate) fn to_lease(&self, resource: &str) -> Lease {
        self.clone().into_lease(resource)
    }

    /// The same, without a copy.
    pub(crate) fn into_lease(self, resource: &str) -> Lease {
        Lease {
            resource: Name::from(resource),
            held: self,
        }
    }
}

/// A lease is its resource's name and the lease as held: it reads as the latter.
impl std::ops::Deref for Lease {
    type Target = Held;

    fn deref(&self) -> &Held {
        &self.held
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut Held {
        &mut self.held
    }
}

/// The fields of a [`Lease`] in their encoded order, the id among them: borrowed to encode
/// (`S` = `&Name`), owned when decoded.
#[derive(Serialize, Deserialize)]
struct Stored<S, M, K> {
    lease_id: Name,
    resource: S,
    holder: S,
    principal: S,
    mode: Mode,
    units: u64,
    fencing_token: u64,
    acquired_at_ms: u64,
    expires_at_ms: u64,
    ttl_ms: u64,
    acquired_wall_ms: u64,
    metadata: M,
    idempotency_key: Option<K>,
}

impl Serialize for Lease {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.held.named(&self.resource).serialize(serializer)
    }
}

impl Held {
    /// The lease as it is encoded, named with its resource `resource`.
    pub(crate) fn named<'a>(&'a self, resource: &'a Name) -> impl Serialize + 'a {
        Stored {
            lease_id: self.lease_id().to_name(),
            resource,
            holder: &self.holder,
            principal: &self.principal,
            mode: self.mode,
            units: self.units,
            fencing_token: self.fencing_token,
            acquired_at_ms: self.acquired_at_ms,
            expires_at_ms: self.expires_at_ms,
            ttl_ms: self.ttl_ms,
            acquired_wall_ms: self.acquired_wall_ms,
            metadata: &self.metadata,
            idempotency_key: self.idempotency_key.as_deref(),
        }
    }
}

impl<'de> Deserialize<'de> for Lease {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = Stored::<Name, Metadata, Name>::deserialize(deserializer)?;
        // Every release made the id from the granting entry, whose index is the token.
        let position = match LeaseId::parse(&stored.lease_id) {
            Some(id) if id.index == stored.fencing_token => id.position,
            _ => {
                return Err(serde::de::Error::custom(format!(
                    "lease id {} is not lse_<fencing token {}>_<position>",
                    stored.lease_id, stored.fencing_token
                )))
            }
        };
        Ok(Lease {
            resource: stored.resource,
            held: Held {
                holder: stored.holder,
                principal: stored.principal,
                mode: stored.mode,
                position,
                units: stored.units,
                fencing_token: stored.fencing_token,
                acquired_at_ms: stored.acquired_at_ms,
                expires_at_ms: stored.expires_at_ms,
                ttl_ms: stored.ttl_ms,
                acquired_wall_ms: stored.acquired_wall_ms,
                metadata: stored.metadata,
                idempotency_key: stored.idempotency_key.map(Box::new),
                session: None,
            },
        })
    }
}

/// A lease as a reply shows it: with its status and the advisory wall-clock times, all computed
/// deterministically at apply or read time from the committed lease clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    pub lease: Lease,
    pub status: LeaseStatus,
    pub expires_wall_ms: u64,
    /// Lease-clock time left until `expires_at` (0 once past it).
    pub remaining_ms: u64,
}

/// Why an acquire was not granted: a normal answer, not an error (SPEC §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// Held in a mode the request cannot share.
    ResourceUnavailable,
    /// Shared leases hold too much of the unit pool for the request.
    InsufficientUnits,
    /// A reclaim closed the resource for the policy's `lock_delay`.
    LockDelay,
    /// The lease would extend into another holder's booking, which starts at this wall time.
    ResourceBooked { start_wall_ms: u64 },
    /// A waiting acquire's `wait_timeout` passed before it was admitted.
    WaitTimeout,
    /// A waiting acquire was removed by `CancelWait` or because its call went away.
    WaitCancelled,
}

impl Refusal {
    pub fn reason(self) -> Reason {
        match self {
            Refusal::ResourceUnavailable => Reason::ResourceUnavailable,
            Refusal::InsufficientUnits => Reason::InsufficientUnits,
            Refusal::LockDelay => Reason::LockDelay,
            Refusal::ResourceBooked { .. } => Reason::ResourceBooked,
            Refusal::WaitTimeout => Reason::WaitTimeout,
            Refusal::WaitCancelled => Reason::WaitCancelled,
        }
    }
}

impl AcquireOutcome {
    /// A grant of `lease`.
    pub fn granted(lease: LeaseView) -> Self {
        AcquireOutcome {
            granted: true,
            lease: Some(lease),
            refusal: None,
            holders: vec![],
            queue_position: 0,
            wait_id: None,
            closed_until_wall_ms: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireOutcome {
    pub granted: bool,
    pub lease: Option<LeaseView>,
    pub refusal: Option<Refusal>,
    /// The current holders when not granted.
    pub holders: Vec<LeaseView>,
    /// With WAIT and not granted: the caller's place in the waiting room (1 = the head), or
    /// the place it had when its wait ended.
    #[serde(default)]
    pub queue_position: u32,
    /// Set while the caller waits: the index of the entry that queued it, which names the
    /// wait until an admission or removal entry decides it.
    #[serde(default)]
    pub wait_id: Option<u64>,
    /// A `lock_delay` refusal: when the resource opens again (wall-clock estimate), as the
    /// refusing entry saw it. Not encoded (`lease::unencoded`): a retry reads it again.
    #[serde(skip)]
    pub closed_until_wall_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(fencing_token: u64, position: u32) -> Lease {
        Lease {
            resource: "r".into(),
            held: Held {
                holder: "h".into(),
                principal: "p".into(),
                mode: Mode::Read,
                position,
                units: 2,
                fencing_token,
                acquired_at_ms: 10,
                expires_at_ms: 20,
                ttl_ms: 10,
                acquired_wall_ms: 30,
                metadata: BTreeMap::from([("k".to_string(), "v".to_string())]).into(),
                idempotency_key: Some(Box::new("key".into())),
                session: None,
            },
        }
    }

    /// How releases before the id was derived laid a lease out: the id first, as a string.
    #[derive(Serialize, Deserialize)]
    struct Stored {
        lease_id: String,
        resource: String,
        holder: String,
        principal: String,
        mode: Mode,
        units: u64,
        fencing_token: u64,
        acquired_at_ms: u64,
        expires_at_ms: u64,
        ttl_ms: u64,
        acquired_wall_ms: u64,
        metadata: BTreeMap<String, String>,
        idempotency_key: Option<String>,
    }

    fn stored(lease_id: &str, fencing_token: u64) -> Stored {
        Stored {
            lease_id: lease_id.into(),
            resource: "r".into(),
            holder: "h".into(),
            principal: "p".into(),
            mode: Mode::Read,
            units: 2,
            fencing_token,
            acquired_at_ms: 10,
            expires_at_ms: 20,
            ttl_ms: 10,
            acquired_wall_ms: 30,
            metadata: BTreeMap::from([("k".to_string(), "v".to_string())]),
            idempotency_key: Some("key".into()),
        }
    }

    #[test]
    fn a_lease_is_encoded_as_before_with_its_id_in_place() {
        let (old, new) = (stored("lse_7_1", 7), lease(7, 1));
        assert_eq!(
            postcard::to_allocvec(&new).expect("encodes"),
            postcard::to_allocvec(&old).expect("encodes")
        );
        assert_eq!(
            serde_json::to_value(&new).expect("encodes"),
            serde_json::to_value(&old).expect("encodes")
        );
        let bytes = postcard::to_allocvec(&old).expect("encodes");
        assert_eq!(
            postcard::from_bytes::<Lease>(&bytes).expect("round trip"),
            new
        );
        let json = serde_json::to_vec(&old).expect("round trip");
        assert_eq!(
            serde_json::from_slice::<Lease>(&json).expect("round trip"),
            new
        );
    }

    #[test]
    fn a_stored_lease_whose_id_is_not_its_token_is_refused() {
        for (lease_id, token) in [("lse_8_1", 7), ("lse_7_x", 7), ("lease-7", 7)] {
            let bytes = postcard::to_allocvec(&stored(lease_id, token)).expect("round trip");
            assert!(postcard::from_bytes::<Lease>(&bytes).is_err(), "{lease_id}");
        }
    }
}
