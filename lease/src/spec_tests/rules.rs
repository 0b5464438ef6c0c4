//! SPEC §4.26 (rules versions) and the renew that replaces metadata they brought (§4.3): a
//! command of a version the state has not reached is refused by apply, the raise never goes
//! down, a snapshot carries the version in the format the cluster's rules allow, and the
//! metadata a renew sets is bounded, counted and shown.

use super::quotas::{over_quota, recount_agrees, set, usage};
use super::*;
use crate::command::RenewMetadataOp;
use crate::encoding::{decode_state, encode_state};
use crate::history::EventKind;
use crate::quota::{Quota, METADATA_ENTRY_BYTES};
use std::collections::BTreeMap;

fn renew_setting(view: &LeaseView, metadata: &[(&str, &str)]) -> Op {
    Op::RenewWithMetadata(RenewMetadataOp {
        renew: renew_of(view, None),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    })
}

/// The leader's own principal: only its entries raise the rules.
const LEADER_ITSELF: Caller = Caller {
    principal: crate::command::SYSTEM,
    admin: true,
};

fn raise(log: &mut Log, to: u32) {
    let reply = log.propose(LEADER_ITSELF, Op::RaiseRules { to });
    assert!(matches!(reply, Reply::Reclaimed(_)), "{reply:?}");
}

#[test]
fn s4_26_a_command_of_rules_not_reached_is_refused_by_apply_and_taken_after_the_raise() {
    let mut log = Log::new();
    assert_eq!(log.state.rules(), crate::rules::FIRST);
    let a = granted(&log.acquire(ALICE, acq("r", "a")));
    let refused = log.propose(ALICE, renew_setting(&a, &[("k", "v")]));
    assert_eq!(invalid_field(&refused), "op");
    assert!(a.lease.metadata.is_empty(), "nothing changed");
    // Not even an admin raises the rules: only the leader's own entry does.
    let by_admin = log.propose(ROOT, Op::RaiseRules { to: 2 });
    assert!(
        matches!(rejection(&by_admin), Rejection::InsufficientPermissions(_)),
        "{by_admin:?}"
    );
    assert_eq!(log.state.rules(), 1);
    raise(&mut log, 2);
    assert_eq!(log.state.rules(), 2);
    raise(&mut log, 1);
    assert_eq!(log.state.rules(), 2, "never down");
    let renewed = lease(&log.propose(ALICE, renew_setting(&a, &[("k", "v")])));
    assert_eq!(
        renewed.lease.metadata.get("k").map(String::as_str),
        Some("v")
    );
}

#[test]
fn s4_26_a_snapshot_is_written_in_the_format_the_rules_allow_and_keeps_them() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq("r", "a")));
    // Rules 1: format 7, which a 0.1.0 node reads (its reader is the plain state after it).
    let body = encode_state(&log.state.snapshot_copy()).expect("encode");
    let (format, rest) = postcard::take_from_bytes::<u32>(&body).expect("format");
    assert_eq!(format, 7);
    let as_0_1_0: State = postcard::from_bytes(rest).expect("0.1.0 reads format 7");
    assert_eq!(as_0_1_0.restored().live_leases(), 1);
    assert_eq!(decode_state(&body).expect("decode").rules(), 1);
    raise(&mut log, 2);
    let body = encode_state(&log.state.snapshot_copy()).expect("encode");
    let (format, _) = postcard::take_from_bytes::<u32>(&body).expect("format");
    assert_eq!(format, 8);
    let restored = decode_state(&body).expect("decode");
    assert_eq!(restored.rules(), 2);
    assert_eq!(restored.live_leases(), 1);
}

#[test]
fn s4_3_a_renew_replaces_metadata_within_bounds_and_its_principals_quota() {
    let mut log = Log::new();
    raise(&mut log, 2);
    let mut op = acq("r", "a");
    op.metadata = BTreeMap::from([("old".to_string(), "x".repeat(100))]);
    let a = granted(&log.acquire(ALICE, op));
    let before = usage(&log, "alice", Quota::MetadataBytes);
    assert_eq!(before, 3 + 100 + METADATA_ENTRY_BYTES);
    let renewed = lease(&log.propose(ALICE, renew_setting(&a, &[("addr", "10.0.0.7:80")])));
    assert_eq!(renewed.lease.fencing_token, a.lease.fencing_token);
    assert_eq!(
        renewed.lease.metadata.iter().collect::<Vec<_>>(),
        vec![(&"addr".to_string(), &"10.0.0.7:80".to_string())]
    );
    assert_eq!(
        usage(&log, "alice", Quota::MetadataBytes),
        4 + 11 + METADATA_ENTRY_BYTES
    );
    let event = log.events("r").pop().expect("an event");
    assert_eq!(event.kind, EventKind::Renewed);
    assert_eq!(
        event.metadata.get("addr").map(String::as_str),
        Some("10.0.0.7:80")
    );
    // The same metadata again: a plain renewed event, no bytes of metadata in the history.
    lease(&log.propose(ALICE, renew_setting(&a, &[("addr", "10.0.0.7:80")])));
    let event = log.events("r").pop().expect("an event");
    assert_eq!(event.kind, EventKind::Renewed);
    assert!(event.metadata.is_empty());
    // Over the quota: refused, nothing changed.
    set(&mut log, Some("alice"), Quota::MetadataBytes, Some(200));
    let big = "y".repeat(300);
    over_quota(
        &log.propose(ALICE, renew_setting(&a, &[("big", &big)])),
        Quota::MetadataBytes,
    );
    // Over the policy's bound: invalid, before the lease is looked up.
    let huge = "z".repeat(17 * 1024);
    assert_eq!(
        invalid_field(&log.propose(ALICE, renew_setting(&a, &[("huge", &huge)]))),
        "metadata"
    );
    // Empty clears it, and frees the quota.
    let cleared = lease(&log.propose(ALICE, renew_setting(&a, &[])));
    assert!(cleared.lease.metadata.is_empty());
    assert_eq!(usage(&log, "alice", Quota::MetadataBytes), 0);
    recount_agrees(&log);
    // A plain renew keeps what is there.
    let set_again = lease(&log.propose(ALICE, renew_setting(&a, &[("k", "v")])));
    let plain = lease(&log.renew(ALICE, renew_of(&set_again, None)));
    assert_eq!(plain.lease.metadata.get("k").map(String::as_str), Some("v"));
    recount_agrees(&log);
}
