use super::*;
use crate::command::ReleaseOp;
use crate::types::Rejection;

fn release(holder: &str) -> Op {
    Op::Release(ReleaseOp {
        resource: "r".into(),
        lease_id: "lse_1_0".into(),
        holder: holder.into(),
        fencing_token: 1,
    })
}

fn remember(dedup: &mut Dedup, principal: &str, request_id: &str, op: &Op, reply: &Reply) {
    match dedup.check(principal, request_id, op) {
        Seen::New(ticket) => {
            dedup.remember(principal, ticket, reply, 0);
        }
        _ => panic!("{principal}/{request_id} was already remembered"),
    }
}

#[test]
fn a_retry_gets_the_original_reply_and_another_request_a_conflict() {
    let mut dedup = Dedup::default();
    let reply = Reply::Rejected(Rejection::invalid("ttl", "too long"));
    remember(&mut dedup, "alice", "req-1", &release("a"), &reply);
    assert!(matches!(
        dedup.check("alice", "req-1", &release("a")),
        Seen::Retry(Kept::Reply(r)) if r == reply
    ));
    assert!(matches!(
        dedup.check("alice", "req-1", &release("b")),
        Seen::Conflict
    ));
}

#[test]
fn keys_of_different_principals_or_splits_do_not_meet() {
    let mut dedup = Dedup::default();
    remember(&mut dedup, "ab", "c", &release("a"), &Reply::None);
    // Same concatenation, other split; other principal, same request_id.
    assert!(matches!(
        dedup.check("a", "bc", &release("a")),
        Seen::New(_)
    ));
    assert!(matches!(
        dedup.check("bob", "c", &release("a")),
        Seen::New(_)
    ));
}

#[test]
fn a_resolved_wait_answers_retries_with_its_outcome_and_the_window_forgets() {
    let mut dedup = Dedup::default();
    remember(&mut dedup, "p", "w", &release("a"), &Reply::None);
    let decided = Reply::Cancelled {
        cancelled: true,
        revision: 9,
    };
    let before = dedup.bytes();
    let (whose, change) = dedup.resolve("p", "w", &decided);
    assert_eq!(whose, "p");
    assert_eq!(dedup.bytes() as i64, before as i64 + change);
    assert!(matches!(
        dedup.check("p", "w", &release("a")),
        Seen::Retry(Kept::Reply(r)) if r == decided
    ));
    let mut freed = Vec::new();
    dedup.prune(DEDUP_WINDOW_MS - 1, |(p, n)| freed.push((p.to_string(), n)));
    assert_eq!(dedup.len(), 1);
    dedup.prune(DEDUP_WINDOW_MS, |(p, n)| freed.push((p.to_string(), n)));
    assert!(dedup.is_empty());
    assert_eq!(dedup.bytes(), 0);
    assert_eq!(freed, vec![("p".to_string(), -(before as i64 + change))]);
}

fn lease_view(metadata: BTreeMap<String, String>) -> crate::types::LeaseView {
    use crate::types::{Lease, LeaseStatus, LeaseView, Mode};
    LeaseView {
        lease: Lease {
            position: 0,
            resource: "r".into(),
            holder: "h".into(),
            principal: "p".into(),
            mode: Mode::Exclusive,
            units: 0,
            fencing_token: 1,
            acquired_at_ms: 0,
            expires_at_ms: 1,
            ttl_ms: 1,
            acquired_wall_ms: 0,
            metadata: metadata.into(),
            idempotency_key: None,
            session: None,
        },
        status: LeaseStatus::Active,
        expires_wall_ms: 0,
        remaining_ms: 0,
    }
}

fn retried(dedup: &Dedup, principal: &str, request_id: &str) -> Kept {
    match dedup.check(principal, request_id, &release("a")) {
        Seen::Retry(kept) => kept,
        _ => panic!("{principal}/{request_id} is not remembered"),
    }
}

#[test]
fn a_record_keeps_no_metadata_and_no_holders_however_large_the_reply() {
    use crate::types::{AcquireOutcome, Refusal};
    let metadata: BTreeMap<String, String> = (0..16)
        .map(|i| (format!("k{i}"), "v".repeat(1000)))
        .collect();
    let view = lease_view(metadata);
    let refused = Reply::Acquire(AcquireOutcome {
        granted: false,
        lease: None,
        refusal: Some(Refusal::ResourceUnavailable),
        holders: vec![view.clone(); 100],
        queue_position: 0,
        wait_id: None,
        closed_until_wall_ms: None,
    });
    let mut dedup = Dedup::default();
    remember(&mut dedup, "p", "1", &release("a"), &refused);
    remember(
        &mut dedup,
        "p",
        "2",
        &release("a"),
        &Reply::Lease(view.clone()),
    );
    assert!(
        dedup.bytes() < 2 * RECORD_BYTES + 200,
        "{} bytes",
        dedup.bytes()
    );
    let Kept::Reply(Reply::Acquire(outcome)) = retried(&dedup, "p", "1") else {
        panic!("an acquire's record keeps an acquire");
    };
    assert!(outcome.holders.is_empty());
    let Kept::Reply(Reply::Lease(kept)) = retried(&dedup, "p", "2") else {
        panic!("a lease's record keeps a lease");
    };
    assert!(kept.lease.metadata.is_empty());
    assert_eq!(kept.lease.lease_id(), view.lease.lease_id());
}

#[test]
fn a_reply_with_nothing_to_leave_out_is_kept_whole() {
    let view = lease_view(BTreeMap::new());
    let mut dedup = Dedup::default();
    let reply = Reply::Lease(view);
    remember(&mut dedup, "p", "1", &release("a"), &reply);
    assert_eq!(retried(&dedup, "p", "1"), Kept::Reply(reply.clone()));
    assert_eq!(Kept::encode_of(&reply), Kept::of(&reply).encode());
}

#[test]
fn the_table_refuses_new_records_past_its_total() {
    let mut dedup = Dedup::default();
    assert!(dedup.room().is_ok());
    dedup.bytes = EXACTLY_ONCE_TOTAL_BYTES;
    let refused = dedup.room().expect_err("over the total");
    assert_eq!(refused.reason(), "resource_exhausted");
}

/// A SetQuota remembered by the release before sessions (nine quotas in its reply) and
/// retried after the upgrade gets its answer, the tenth quota at its compiled default.
#[test]
fn a_set_quota_remembered_before_sessions_is_answered_after_the_upgrade() {
    use crate::command::SetQuotaOp;
    use crate::quota::{Limits, Quota, QuotaViewV5};

    let op = Op::SetQuota(SetQuotaOp {
        principal: Some("alice".into()),
        changes: vec![(Quota::Leases, Some(7))],
    });
    let old = QuotaViewV5 {
        principal: Some("alice".into()),
        settings: [Some(7), None, None, None, None, None, None, None, None],
        limits: [7, 1, 2, 3, 4, 5, 6, 7, 8],
        usage: [1, 0, 0, 0, 0, 0, 0, 0, 0],
    };
    // Kept::Reply (variant 0) of Reply::Quota (variant 9), as postcard numbers variants.
    let mut kept = vec![0u8, 9];
    kept.extend(postcard::to_allocvec(&old).expect("encodes"));
    let mut dedup = Dedup::default();
    dedup.entries.insert(
        key("root", "q-1"),
        Arc::new(Remembered {
            principal: "root".into(),
            op: fingerprint(&op),
            kept: kept.into(),
            at_ms: 0,
        }),
    );
    match dedup.check("root", "q-1", &op) {
        Seen::Retry(Kept::Reply(Reply::Quota(view))) => {
            assert_eq!(view.limits.get(Quota::Leases), 7);
            assert_eq!(view.settings.get(Quota::Leases), Some(7));
            assert_eq!(view.usage.get(Quota::Leases), 1);
            assert_eq!(
                view.limits.get(Quota::Sessions),
                Limits::DEFAULT.get(Quota::Sessions)
            );
        }
        _ => panic!("the old record was not answered"),
    }
}
