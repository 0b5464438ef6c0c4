//! Page sizing: how many items a listing or a reply holds, by count and by estimated encoded
//! bytes, so that no answer nears the transport's limit.

use super::{ResourceView, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use crate::history::Event;
use crate::types::Held;

/// A page's estimated encoded size stops growing past this, well under the 4 MiB transport
/// limit, whatever the metadata (a page always holds at least one item).
pub const PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Estimated bytes of one listed item beside its metadata.
const ITEM_BYTES: usize = 256;

/// The leases a resource view (GetResource, ListResources) or a refused acquire's `holders`
/// shows: the first in grant order, up to about this many bytes; `lease_count` tells the rest.
pub const LEASES_SHOWN_BYTES: usize = 1024 * 1024;
/// At most this many holders in a refused acquire's answer (it is also kept for dedup).
pub const HOLDERS_SHOWN: usize = 100;

/// The first items of `items`, at most `limit` of them and about `budget` bytes as `size`
/// estimates them (always at least one). Returns them and whether anything is left.
pub(crate) fn bounded<T>(
    items: impl Iterator<Item = T>,
    limit: usize,
    budget: usize,
    size: impl Fn(&T) -> usize,
) -> (Vec<T>, bool) {
    let mut taken = Vec::new();
    let mut used = 0;
    for item in items {
        let bytes = size(&item);
        if taken.len() == limit || (!taken.is_empty() && used + bytes > budget) {
            return (taken, true);
        }
        used += bytes;
        taken.push(item);
    }
    (taken, false)
}

/// One page of `items`: at most `page_size` (0 = the default) and about [`PAGE_BYTES`].
pub(super) fn page<T>(
    items: impl Iterator<Item = T>,
    page_size: u32,
    size: impl Fn(&T) -> usize,
) -> (Vec<T>, bool) {
    let limit = match page_size {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    bounded(items, limit as usize, PAGE_BYTES, size)
}

/// Estimated encoded bytes of a string map: keys, values and protobuf's per-entry framing.
pub(super) fn map_bytes(map: &std::collections::BTreeMap<String, String>) -> usize {
    map.iter().map(|(k, v)| k.len() + v.len() + 8).sum()
}

/// Estimated encoded bytes of an event in a reply.
pub(crate) fn event_bytes(event: &Event) -> usize {
    ITEM_BYTES + map_bytes(&event.metadata)
}

pub(crate) fn lease_bytes(lease: &Held) -> usize {
    ITEM_BYTES + map_bytes(&lease.metadata)
}

pub(super) fn resource_bytes(view: &ResourceView) -> usize {
    let policy = &view.policy;
    let fsm: usize = policy
        .fsm_requirements
        .iter()
        .map(|r| r.machine.len() + r.transition.len() + 8)
        .sum();
    2 * ITEM_BYTES
        + policy.kind.len()
        + policy.display_name.len()
        + fsm
        + view
            .leases
            .iter()
            .map(|v| lease_bytes(&v.lease))
            .sum::<usize>()
}
