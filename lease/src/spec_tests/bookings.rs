//! SPEC §4.8: bookings never overlap; no lease of another holder extends into a booked window.

use super::*;
use crate::command::{BookOp, CancelBookingOp};

/// The wall clock of the next entry (the harness stamps WALL_BASE_MS + the monotonic clock).
fn wall(log: &Log) -> u64 {
    WALL_BASE_MS + log.mono_ms()
}

fn book(resource: &str, holder: &str, start_wall_ms: u64, duration_ms: u64) -> Op {
    Op::Book(BookOp {
        resource: resource.into(),
        holder: holder.into(),
        start_wall_ms,
        duration_ms,
        ad_hoc_bookable: true,
    })
}

#[track_caller]
fn booked(reply: &Reply) -> crate::Booking {
    match reply {
        Reply::Booking(b) => b.clone(),
        other => panic!("expected a booking, got {other:?}"),
    }
}

#[test]
fn s4_8_bookings_of_one_resource_never_overlap() {
    let mut log = Log::new();
    let start = wall(&log) + 60_000;
    booked(&log.propose(ALICE, book("r", "a", start, 10_000)));
    assert_eq!(
        rejection(&log.propose(BOB, book("r", "b", start + 9_999, 5_000))),
        Rejection::BookingOverlaps {
            holder: "a".into(),
            start_wall_ms: start
        }
    );
    // Back to back is fine.
    booked(&log.propose(BOB, book("r", "b", start + 10_000, 5_000)));
    let view = log.state.resource_view("r");
    assert_eq!(view.bookings.len(), 2);
}

#[test]
fn s4_8_an_acquire_that_would_extend_into_another_holders_window_is_refused_with_its_start() {
    let mut log = Log::new();
    let start = wall(&log) + 60_000;
    booked(&log.propose(ALICE, book("r", "a", start, 10_000)));
    let (refusal, _) = refused(&log.acquire(BOB, acq_ttl("r", "b", 61_000)));
    assert_eq!(
        refusal,
        Refusal::ResourceBooked {
            start_wall_ms: start
        }
    );
    // Ending before the window starts is fine.
    let b = granted(&log.acquire(BOB, acq_ttl("r", "b", 30_000)));
    // Renewing into the window is not (SPEC §3: resource_booked).
    assert_eq!(
        rejection(&log.renew(BOB, renew_of(&b, Some(61_000)))),
        Rejection::ResourceBooked {
            start_wall_ms: start
        }
    );
    log.release(BOB, release_of(&b));
    // The booking's holder can acquire through its window.
    log.elapse(60_000);
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 10_000)));
}

#[test]
fn s4_8_a_window_cannot_be_booked_into_a_lease_of_another_holder() {
    let mut log = Log::new();
    granted(&log.acquire(ALICE, acq_ttl("r", "a", 30_000)));
    let start = wall(&log) + 10_000;
    assert_eq!(
        rejection(&log.propose(BOB, book("r", "b", start, 10_000))),
        Rejection::HeldIntoWindow { holder: "a".into() }
    );
    booked(&log.propose(BOB, book("r", "b", start + 30_000, 10_000)));
}

#[test]
fn s4_8_a_waiter_kept_out_by_a_booking_is_admitted_when_the_window_ends() {
    let mut log = Log::new();
    let start = wall(&log) + 1_000;
    booked(&log.propose(ALICE, book("r", "a", start, 10_000)));
    let reply = log.acquire(
        BOB,
        AcquireOp {
            wait_ms: Some(60_000),
            ..acq_ttl("r", "b", 30_000)
        },
    );
    assert!(
        matches!(&reply, Reply::Acquire(o) if o.wait_id.is_some()),
        "{reply:?}"
    );
    log.elapse(10_999);
    log.tick();
    assert_eq!(log.holders("r"), vec![]);
    log.elapse(1);
    log.tick();
    assert_eq!(log.holders("r"), held(&[("b", log.index)]));
    assert!(log.state.resource_view("r").bookings.is_empty());
}

#[test]
fn s4_8_only_the_bookings_principal_or_an_admin_cancels_it() {
    let mut log = Log::new();
    let start = wall(&log) + 60_000;
    booked(&log.propose(ALICE, book("r", "a", start, 10_000)));
    let cancel = || {
        Op::CancelBooking(CancelBookingOp {
            resource: "r".into(),
            holder: "a".into(),
            start_wall_ms: start,
        })
    };
    assert!(matches!(
        rejection(&log.propose(BOB, cancel())),
        Rejection::InsufficientPermissions(_)
    ));
    booked(&log.propose(ALICE, cancel()));
    assert_eq!(
        rejection(&log.propose(ALICE, cancel())),
        Rejection::BookingNotFound
    );
    granted(&log.acquire(BOB, acq_ttl("r", "b", 600_000)));
}

#[test]
fn s4_8_a_booking_needs_a_window_that_has_not_ended_and_a_sane_duration() {
    let mut log = Log::new();
    let now = wall(&log);
    assert_eq!(
        invalid_field(&log.propose(ALICE, book("r", "a", now - 20_000, 10_000))),
        "start"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, book("r", "a", now, 999))),
        "duration"
    );
    assert_eq!(
        invalid_field(&log.propose(ALICE, book("r", "a", now + 400 * 24 * 3_600_000, 10_000))),
        "start"
    );
}

#[test]
fn s4_8_a_transfer_cannot_carry_a_lease_into_another_holders_window() {
    let mut log = Log::new();
    log.register(
        "r",
        Policy {
            transferable: true,
            renewal_grace_ms: 0,
            bookable: true,
            ..Policy::registered()
        },
    );
    let start = wall(&log) + 60_000;
    booked(&log.propose(ALICE, book("r", "a", start - 1_000, 10_000)));
    booked(&log.propose(BOB, book("r", "b", start + 9_000, 10_000)));
    // a holds through its own window, up to b's.
    let lease = granted(&log.acquire(ALICE, acq_ttl("r", "a", 68_000)));
    assert_eq!(
        rejection(&log.transfer(ALICE, transfer_of(&lease, "c", None))),
        Rejection::ResourceBooked {
            start_wall_ms: start - 1_000
        }
    );
}

/// SPEC §4.8: only a bookable resource may be booked — a registered one by its policy, an
/// ad-hoc one only on a cluster started with `--ad-hoc-bookable` (carried in the entry).
#[test]
fn s4_8_only_a_bookable_resource_may_be_booked() {
    let mut log = Log::new();
    let start = wall(&log) + 60_000;
    let mut closed = BookOp {
        resource: "adhoc".into(),
        holder: "a".into(),
        start_wall_ms: start,
        duration_ms: 10_000,
        ad_hoc_bookable: false,
    };
    assert_eq!(
        rejection(&log.propose(ALICE, Op::Book(closed.clone()))),
        Rejection::NotBookable("adhoc".into())
    );
    closed.ad_hoc_bookable = true;
    booked(&log.propose(ALICE, Op::Book(closed)));
    log.register("plain", Policy::registered());
    log.register(
        "rooms",
        Policy {
            bookable: true,
            ..Policy::registered()
        },
    );
    // A registered resource follows its policy, whatever the node's setting.
    assert_eq!(
        rejection(&log.propose(ALICE, book("plain", "a", start, 10_000))),
        Rejection::NotBookable("plain".into())
    );
    booked(&log.propose(ALICE, book("rooms", "a", start, 10_000)));
    assert_eq!(Rejection::NotBookable("x".into()).reason(), "not_bookable");
}

/// SPEC §4.8: a booking cannot be used against a holder — it never denies renewals of a
/// lease granted before it. A booking made by an entry from before the rule (`Op::BookV1`,
/// replayed from an old log) still does, as it did then.
#[test]
fn s4_8_a_booking_never_denies_renewals_of_a_lease_granted_before_it() {
    for legacy in [false, true] {
        let mut log = Log::new();
        let held = granted(&log.acquire(ALICE, acq_ttl("r", "a", 30_000)));
        let start = wall(&log) + 40_000;
        let op = match legacy {
            false => book("r", "b", start, 10_000),
            true => Op::BookV1(crate::command::BookOpV1 {
                resource: "r".into(),
                holder: "b".into(),
                start_wall_ms: start,
                duration_ms: 10_000,
            }),
        };
        booked(&log.propose(BOB, op));
        let renewed = log.renew(ALICE, renew_of(&held, Some(60_000)));
        match legacy {
            false => {
                lease(&renewed);
            }
            true => assert_eq!(
                rejection(&renewed),
                Rejection::ResourceBooked {
                    start_wall_ms: start
                }
            ),
        }
        // A lease granted after the booking is denied either way.
        log.release(ALICE, release_of(&held));
        let later = granted(&log.acquire(ALICE, acq_ttl("r", "a", 30_000)));
        assert_eq!(
            rejection(&log.renew(ALICE, renew_of(&later, Some(60_000)))),
            Rejection::ResourceBooked {
                start_wall_ms: start
            }
        );
    }
}
