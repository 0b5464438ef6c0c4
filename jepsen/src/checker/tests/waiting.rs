//! The waiting room: a queue replayed from the cluster's record, the clients' answers against
//! it, and the lease model's view of admissions. Each history has one anomaly, or none.

use super::*;
use crate::history::EventKind::{
    Acquired, Admitted, Queued, Registered, Released, WaitCancelled, WaitTimedOut,
};

fn wait_ended(reason: &str) -> Outcome {
    ok(Value::Refused {
        reason: reason.into(),
        holder: None,
        token: None,
        holders: vec![],
    })
}

fn cancel_wait(holder: &str) -> Call {
    Call::CancelWait {
        resource: R.into(),
        holder: holder.into(),
    }
}

/// a holds token 2 (revision 2); b queues behind it (revision 3) and times out at last.
fn b_waits_for_a() -> Builder {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.event(R, 2, Acquired, "a");
    h.op(
        acquire_waiting("b", 5000, 3000),
        20,
        3100,
        wait_ended("wait_timeout"),
    );
    h.event(R, 3, Queued, "b");
    h
}

fn cancelled_at(revision: u64) -> Outcome {
    ok(Value::WaitCancelled {
        cancelled: true,
        revision,
    })
}

/// a holds token 2; b and c queue behind it; a's release at 5 admits b; c's wait times out;
/// d queues behind b and cancels it; b releases at 9 with nobody left to admit.
fn control() -> Builder {
    let mut h = Builder::new();
    h.event(R, 1, Registered, "");
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.event(R, 2, Acquired, "a");
    h.op(acquire_waiting("b", 5000, 3000), 20, 300, granted(5));
    h.event(R, 3, Queued, "b");
    h.op(
        acquire_waiting("c", 5000, 1000),
        30,
        1100,
        wait_ended("wait_timeout"),
    );
    h.event(R, 4, Queued, "c");
    h.op(release("a", 2), 290, 295, ok(Value::Released { token: 2 }));
    h.event(R, 5, Released, "a");
    h.event(R, 5, Admitted, "b");
    h.op(write("b", 5), 310, 311, ok(Value::StoreAccepted));
    h.op(
        acquire_waiting("d", 5000, 3000),
        400,
        700,
        wait_ended("wait_cancelled"),
    );
    h.event(R, 6, Queued, "d");
    h.op(cancel_wait("d"), 600, 650, cancelled_at(7));
    h.event(R, 7, WaitCancelled, "d");
    h.op(
        release("b", 5),
        1000,
        1010,
        ok(Value::Released { token: 5 }),
    );
    h.event(R, 8, WaitTimedOut, "c");
    h.event(R, 9, Released, "b");
    h
}

/// The control, its history without the events of one kind.
fn control_without(kind: EventKind) -> Builder {
    let mut h = control();
    h.events
        .get_mut(R)
        .expect("history")
        .retain(|e| e.kind != kind);
    h
}

#[test]
fn a_queue_admitted_in_order_passes() {
    let report = control().check();
    assert_ok(&report);
    let waits = &report.waits;
    assert_eq!(
        (waits.waits, waits.admitted, waits.granted_at_once),
        (3, 1, 0)
    );
    assert_eq!((waits.timed_out, waits.cancelled, waits.unknown), (1, 1, 0));
    assert_eq!(
        (waits.cancels, waits.queued_events, waits.admitted_events),
        (1, 3, 1)
    );
    assert_eq!(waits.resources_checked, 1);
    // The admission is a grant like any other: b's tenure is checked.
    assert_eq!(report.grants, 2);
}

#[test]
fn an_admission_past_the_head_of_the_queue_violates_fifo() {
    let mut h = b_waits_for_a();
    let admitted = h.op(acquire_waiting("c", 5000, 3000), 30, 300, granted(5));
    h.event(R, 4, Queued, "c");
    h.op(release("a", 2), 290, 295, ok(Value::Released { token: 2 }));
    h.event(R, 5, Released, "a");
    h.event(R, 5, Admitted, "c");
    h.event(R, 6, WaitTimedOut, "b");
    let report = h.check();
    let a = the(&report, "fifo_violated");
    assert_eq!(a.ops, vec![admitted]);
    assert!(
        a.message
            .contains("c (queued at revision 4) was admitted at revision 5 ahead of b"),
        "{}",
        a.message
    );
    assert_eq!(kinds(&report), vec!["fifo_violated"]);
}

#[test]
fn an_admission_of_a_holder_that_never_queued_violates_fifo() {
    let mut h = Builder::new();
    h.event(R, 2, Acquired, "a");
    h.event(R, 5, Released, "a");
    h.event(R, 5, Admitted, "b");
    the(&h.check(), "fifo_violated");
}

#[test]
fn a_grant_while_someone_waits_is_barging() {
    let mut h = b_waits_for_a();
    h.op(release("a", 2), 100, 110, ok(Value::Released { token: 2 }));
    h.event(R, 4, Released, "a"); // ... and b is not admitted:
    let barged = h.op(acquire("c", 5000), 200, 210, granted(5));
    h.event(R, 5, Acquired, "c");
    h.event(R, 6, WaitTimedOut, "b");
    let report = h.check();
    let a = the(&report, "barging");
    assert_eq!(a.ops, vec![barged]);
    assert!(a.message.contains("while b waited"), "{}", a.message);
    assert_eq!(kinds(&report), vec!["barging"]);
}

#[test]
fn an_admission_in_an_entry_that_freed_nothing_is_reported() {
    let mut h = Builder::new();
    h.event(R, 2, Acquired, "a");
    h.event(R, 3, Queued, "b");
    h.event(R, 4, Released, "a");
    h.event(R, 7, Admitted, "b");
    let report = h.check();
    let a = the(&report, "admission_not_at_free");
    assert!(a.message.contains("nothing freed"), "{}", a.message);
}

#[test]
fn an_admission_with_a_token_other_than_its_entry_is_reported() {
    let mut h = Builder::new();
    h.event(R, 2, Acquired, "a");
    h.event(R, 3, Queued, "b");
    h.event(R, 4, Released, "a");
    h.event(R, 4, Admitted, "b");
    h.events
        .get_mut(R)
        .and_then(|events| events.last_mut())
        .expect("the admission")
        .token = 3;
    let report = h.check();
    let a = the(&report, "admission_not_at_free");
    assert!(a.message.contains("token 3"), "{}", a.message);
}

#[test]
fn a_waited_grant_the_history_does_not_hold_is_reported() {
    // The history lost b's admission (a release that admitted nobody).
    let report = control_without(Admitted).check();
    let a = the(&report, "grant_unrecorded");
    assert!(a.message.contains("b was granted token 5"), "{}", a.message);
    // The queue then keeps b waiting past a's release: not FIFO-checked as an anomaly here.
    assert!(report.of_kind("barging").is_empty(), "{report:#?}");
}

#[test]
fn a_wait_end_the_history_does_not_hold_is_reported() {
    let report = control_without(WaitTimedOut).check();
    let a = the(&report, "wait_end_unrecorded");
    assert!(a.message.contains("c was told 1 times"), "{}", a.message);
}

#[test]
fn a_cancel_wait_naming_another_entry_is_reported() {
    // As a node answering with the index it had applied by then, not the deciding entry's.
    let mut h = control();
    for op in &mut h.ops {
        if let Call::CancelWait { .. } = op.call {
            op.outcome = cancelled_at(8);
        }
    }
    let report = h.check();
    let a = the(&report, "cancel_revision_wrong");
    assert!(
        a.message.contains(
            "the entry at revision 8 removed d's wait, but that entry recorded no \
             wait_cancelled of d; the nearest wait_cancelled of d is at revision 7"
        ),
        "{}",
        a.message
    );
    assert_eq!(kinds(&report), vec!["cancel_revision_wrong"]);
}

#[test]
fn a_wait_that_ends_refused_for_another_reason_is_unexpected() {
    let mut h = Builder::new();
    h.op(acquire("a", 5000), 0, 10, granted(2));
    h.op(
        acquire_waiting("b", 5000, 1000),
        20,
        30,
        refused(Some("a"), Some(2)),
    );
    the(&h.check(), "unexpected_value");
}

#[test]
fn a_waited_grant_while_the_resource_stays_held_is_nonlinearizable() {
    let mut h = Builder::new();
    h.op(acquire("a", 10_000), 0, 10, granted(2));
    h.op(acquire_waiting("b", 10_000, 3000), 20, 300, granted(5));
    h.op(read(1), 400, 410, read_held("a", 2));
    let report = h.check();
    the(&report, "nonlinearizable");
}

#[test]
fn a_wait_given_up_may_be_admitted_later() {
    let mut h = Builder::new();
    h.op(acquire("a", 1000), 0, 10, granted(2));
    h.op(acquire_waiting("b", 5000, 3000), 20, 500, unknown());
    h.op(release("a", 2), 600, 610, ok(Value::Released { token: 2 }));
    // b's wait was admitted by the release: b holds the resource, unknown to b.
    h.op(read(1), 700, 710, read_held("b", 7));
    h.op(acquire("b", 5000), 720, 730, granted(7));
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.waits.unknown, 1);
}
