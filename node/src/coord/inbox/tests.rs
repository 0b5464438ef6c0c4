//! The inbox registry's rules, driven directly: no node, no network.

use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use super::*;

fn tenure(fencing_token: u64) -> Tenure {
    Tenure {
        resource: "r".into(),
        holder: "h".into(),
        lease_id: format!("lse_{fencing_token}_0"),
        fencing_token,
    }
}

fn parcel(fencing_token: u64, payload: &[u8]) -> Parcel {
    Parcel {
        resource: "r".into(),
        fencing_token,
        payload: payload.to_vec(),
        from_principal: "alice".into(),
        request_id: "req-1".into(),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn reply(delivery_id: u64, payload: &[u8]) -> pb::ServeReply {
    pb::ServeReply {
        delivery_id,
        payload: payload.to_vec(),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_owner_gets_the_payload_with_the_token_and_its_answer_is_the_outcome() {
    let inboxes = Inboxes::default();
    let mut outbox = inboxes.open(tenure(7)).expect("open");
    let delivery = inboxes.deliver(parcel(7, b"ping")).expect("queued");
    let sent = outbox.next().await.expect("a delivery").expect("ok");
    assert_eq!(
        (sent.payload.as_slice(), sent.fencing_token),
        (&b"ping"[..], 7)
    );
    assert_eq!(
        (sent.from_principal.as_str(), sent.request_id.as_str()),
        ("alice", "req-1")
    );
    inboxes.answer(outbox.id(), reply(sent.delivery_id, b"pong"));
    assert_eq!(
        delivery.outcome(soon()).await,
        Outcome::Replied(b"pong".to_vec())
    );
}

#[tokio::test]
async fn no_inbox_or_an_older_tenures_inbox_takes_nothing() {
    let inboxes = Inboxes::default();
    assert!(inboxes.deliver(parcel(7, b"x")).is_err());
    let _outbox = inboxes.open(tenure(5)).expect("open");
    assert_eq!(inboxes.fresh_token("r", 7), None);
    let why = inboxes.deliver(parcel(7, b"x")).err().expect("stale inbox");
    assert!(why.contains("older tenure"), "{why}");
    // A newer inbox than the token read takes it: its owner rejects what is stale.
    assert_eq!(inboxes.fresh_token("r", 3), Some(5));
    assert!(inboxes.deliver(parcel(3, b"x")).is_ok());
}

#[tokio::test]
async fn a_closing_inbox_settles_queued_as_not_delivered_and_sent_as_unanswered() {
    let inboxes = Inboxes::default();
    let mut outbox = inboxes.open(tenure(7)).expect("open");
    let sent = inboxes.deliver(parcel(7, b"one")).expect("queued");
    let queued = inboxes.deliver(parcel(7, b"two")).expect("queued");
    outbox.next().await.expect("one").expect("ok");
    let (id, resource) = (outbox.id(), outbox.resource().to_string());
    drop(outbox);
    assert!(matches!(
        queued.outcome(soon()).await,
        Outcome::NotDelivered(_)
    ));
    assert!(inboxes.deliver(parcel(7, b"x")).is_err(), "retired");
    inboxes.close(id, &resource, None);
    assert!(matches!(sent.outcome(soon()).await, Outcome::Unanswered(_)));
}

#[tokio::test]
async fn a_retired_inbox_takes_nothing_new_but_its_owner_still_answers_what_it_was_sent() {
    let inboxes = Inboxes::default();
    let mut outbox = inboxes.open(tenure(7)).expect("open");
    let sent = inboxes.deliver(parcel(7, b"one")).expect("queued");
    let message = outbox.next().await.expect("one").expect("ok");
    let queued = inboxes.deliver(parcel(7, b"two")).expect("queued");
    inboxes.retire(outbox.id(), "r", None);
    assert!(outbox.next().await.is_none(), "the stream ends");
    assert!(matches!(
        queued.outcome(soon()).await,
        Outcome::NotDelivered(_)
    ));
    assert_eq!(inboxes.fresh_token("r", 7), None);
    inboxes.answer(outbox.id(), reply(message.delivery_id, b"late"));
    assert_eq!(
        sent.outcome(soon()).await,
        Outcome::Replied(b"late".to_vec())
    );
}

#[tokio::test]
async fn past_the_deadline_an_untaken_delivery_is_not_delivered_and_a_taken_one_unanswered() {
    let inboxes = Inboxes::default();
    let mut outbox = inboxes.open(tenure(7)).expect("open");
    let taken = inboxes.deliver(parcel(7, b"one")).expect("queued");
    outbox.next().await.expect("one").expect("ok");
    let untaken = inboxes.deliver(parcel(7, b"two")).expect("queued");
    let past = Instant::now();
    assert!(matches!(
        untaken.outcome(past).await,
        Outcome::NotDelivered(_)
    ));
    assert!(matches!(taken.outcome(past).await, Outcome::Unanswered(_)));
    // The withdrawn delivery is never sent.
    let next = inboxes.deliver(parcel(7, b"three")).expect("queued");
    let sent = outbox.next().await.expect("three").expect("ok");
    assert_eq!(sent.payload, b"three");
    drop(next);
}

#[tokio::test]
async fn a_newer_tenure_replaces_an_inbox_and_an_older_one_is_refused() {
    let inboxes = Inboxes::default();
    let mut old = inboxes.open(tenure(5)).expect("open");
    let mut new = inboxes.open(tenure(9)).expect("newer replaces");
    let ended = old.next().await.expect("a status").expect_err("stale");
    assert_eq!(ended.code(), tonic::Code::FailedPrecondition);
    assert!(old.next().await.is_none());
    let refused = inboxes.open(tenure(5)).err().expect("older refused");
    assert_eq!(refused.reason_and_code().0, "stale_fencing_token");
    // The same tenure may reopen (an owner reconnecting); the earlier stream just ends.
    let again = inboxes.open(tenure(9)).expect("same tenure");
    assert!(new.next().await.is_none());
    assert_eq!(inboxes.fresh_token("r", 9), Some(9));
    drop(again);
    assert_eq!(inboxes.fresh_token("r", 9), None, "dropping closes");
}

#[tokio::test]
async fn answers_are_checked_against_the_inbox_and_the_reply_limit() {
    let inboxes = Inboxes::default();
    let mut outbox = inboxes.open(tenure(7)).expect("open");
    let big = inboxes.deliver(parcel(7, b"one")).expect("queued");
    let rejected = inboxes.deliver(parcel(7, b"two")).expect("queued");
    let one = outbox.next().await.expect("one").expect("ok");
    let two = outbox.next().await.expect("two").expect("ok");
    // Another inbox cannot answer this one's deliveries.
    inboxes.answer(outbox.id() + 1000, reply(one.delivery_id, b"forged"));
    inboxes.answer(
        outbox.id(),
        reply(one.delivery_id, &vec![0; MAX_PAYLOAD_BYTES + 1]),
    );
    assert_eq!(
        big.outcome(soon()).await,
        Outcome::TooLarge(MAX_PAYLOAD_BYTES as u64 + 1)
    );
    inboxes.answer(
        outbox.id(),
        pb::ServeReply {
            delivery_id: two.delivery_id,
            rejected: true,
            reject_reason: "é".repeat(200),
            ..Default::default()
        },
    );
    match rejected.outcome(soon()).await {
        Outcome::Rejected(reason) => assert_eq!(reason.len(), MAX_REASON_BYTES),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn shutting_down_ends_every_inbox_and_opens_none() {
    let inboxes = Inboxes::default();
    let mut outbox = inboxes.open(tenure(7)).expect("open");
    let sent = inboxes.deliver(parcel(7, b"one")).expect("queued");
    outbox.next().await.expect("one").expect("ok");
    inboxes.shut_down();
    inboxes.stopping().await;
    let ended = outbox
        .next()
        .await
        .expect("a status")
        .expect_err("unavailable");
    assert_eq!(ended.code(), tonic::Code::Unavailable);
    assert!(matches!(sent.outcome(soon()).await, Outcome::Unanswered(_)));
    let refused = inboxes.open(tenure(8)).err().expect("no new inbox");
    assert_eq!(refused.reason_and_code().0, "unavailable");
}

#[test]
fn a_full_inbox_refuses_more() {
    let inboxes = Inboxes::default();
    let _outbox = inboxes.open(tenure(7)).expect("open");
    let queued: Vec<Delivery> = (0..MAX_QUEUED)
        .map(|_| inboxes.deliver(parcel(7, b"x")).expect("queued"))
        .collect();
    assert!(inboxes.deliver(parcel(7, b"x")).is_err());
    drop(queued);
    assert!(
        inboxes.deliver(parcel(7, b"x")).is_ok(),
        "withdrawn ones free room"
    );
}
