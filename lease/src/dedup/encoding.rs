//! The exactly-once table in snapshots of formats up to 8: the shape the heap table of the
//! release before had (its `entries` map, then its `order`), written from the archive and read
//! into it (`table`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Dedup, Digest128, Remembered};

/// The table as formats up to 8 hold it: the records by key, then the window's order. Both
/// are written in the order the records were remembered: a reader builds its map from the
/// pairs, in whatever order they come.
impl Serialize for Dedup {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut table = serializer.serialize_struct("Dedup", 2)?;
        table.serialize_field("entries", &Entries(self))?;
        table.serialize_field("order", &Order(self))?;
        table.end()
    }
}

/// Stops a write whose count did not hold (never: `len` counts what `each` visits).
fn miscounted<E: serde::ser::Error>(len: usize, written: usize) -> E {
    E::custom(format!(
        "the exactly-once table counted {len} records and holds {written}"
    ))
}

struct Entries<'a>(&'a Dedup);

impl Serialize for Entries<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        let (mut failed, mut written) = (None, 0);
        self.0.each(|_, key, record| {
            written += 1;
            failed = map.serialize_entry(key, record).err();
            failed.is_none()
        });
        match failed {
            Some(error) => Err(error),
            None if written != self.0.len() => Err(miscounted(self.0.len(), written)),
            None => map.end(),
        }
    }
}

struct Order<'a>(&'a Dedup);

impl Serialize for Order<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        let (mut failed, mut written) = (None, 0);
        self.0.each(|at_ms, key, _| {
            written += 1;
            failed = seq.serialize_element(&(at_ms, key)).err();
            failed.is_none()
        });
        match failed {
            Some(error) => Err(error),
            None if written != self.0.len() => Err(miscounted(self.0.len(), written)),
            None => seq.end(),
        }
    }
}

impl<'de> Deserialize<'de> for Dedup {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename = "Dedup")]
        struct Table {
            entries: BTreeMap<Digest128, Remembered>,
            order: Vec<(u64, Digest128)>,
        }
        let table = Table::deserialize(deserializer)?;
        Ok(Dedup::of_table(table.entries, table.order))
    }
}

impl Dedup {
    /// A table as formats up to 8 hold it, in an archive of its own on the heap. Each record
    /// takes its place in the window from the order (the first place that is its own); one
    /// without a place (never written so) goes after, by its time.
    pub(super) fn of_table(
        mut entries: BTreeMap<Digest128, Remembered>,
        order: Vec<(u64, Digest128)>,
    ) -> Dedup {
        let mut records = Vec::with_capacity(entries.len());
        for (place, (at_ms, key)) in order.into_iter().enumerate() {
            if entries.get(&key).is_some_and(|r| r.at_ms == at_ms) {
                if let Some(record) = entries.remove(&key) {
                    records.push((key, place as u64 + 1, record));
                }
            }
        }
        let placed = records.len() as u64;
        for (n, (key, record)) in entries.into_iter().enumerate() {
            records.push((key, placed + n as u64 + 1, record));
        }
        // Lease time never runs backwards: the window's order is by time, then by place.
        records.sort_by_key(|(_, place, record)| (record.at_ms, *place));
        Dedup::of_ordered(records.into_iter().map(|(key, _, record)| (key, record)))
    }
}
