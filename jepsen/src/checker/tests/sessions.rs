//! Sessions (SPEC §4.24): leases on a session in the lease model, the clients' answers about
//! sessions, and the cluster's record of how each session ended. Each history has one
//! anomaly, or none.

use super::*;
use crate::history::Ended;
use crate::history::EventKind::{Acquired, Reclaimed, Released};

const S: &str = "ses_1";
const HOLDER: &str = "c1.s1";
const TTL: u64 = 3_000;

fn create() -> Call {
    Call::CreateSession {
        holder: HOLDER.into(),
        ttl_ms: TTL,
    }
}
fn created() -> Outcome {
    ok(Value::Session {
        session_id: S.into(),
    })
}
fn renew_session() -> Call {
    Call::RenewSession {
        holder: HOLDER.into(),
        session_id: S.into(),
        ttl_ms: TTL,
    }
}
fn close() -> Call {
    Call::CloseSession {
        holder: HOLDER.into(),
        session_id: S.into(),
    }
}
/// An acquire of `resource` on the session, known alive from `alive_ms`.
fn acquire_on(resource: &str, alive_ms: u64) -> Call {
    Call::Acquire {
        resource: resource.into(),
        holder: HOLDER.into(),
        ttl_ms: TTL,
        mode: Mode::Exclusive,
        units: 0,
        wait_ms: 0,
        many: 0,
        session_id: S.into(),
        session_alive_ns: alive_ms * MS,
    }
}
fn not_found() -> Outcome {
    fail("session_not_found")
}

impl Builder {
    /// An event about the session's lease or wait (it names the session).
    fn on_session(&mut self, resource: &str, revision: u64, kind: EventKind, token: u64) {
        self.event(resource, revision, kind, HOLDER);
        if let Some(e) = self.events.get_mut(resource).and_then(|e| e.last_mut()) {
            e.session = S.into();
            e.token = token;
        }
    }
}

/// The session is created at 0 and renewed at 2 s and 4 s; its lease on `R` (token 2) is
/// still held at 6 s, past the acquire's own bound (3 s) but within the last renewal's (7 s).
fn renewed_past_its_first_ttl() -> Builder {
    let mut h = Builder::new();
    h.op(create(), 0, 10, created());
    h.op(acquire_on(R, 0), 20, 30, granted(2));
    h.op(renew_session(), 2_000, 2_010, ok(Value::SessionRenewed));
    h.op(renew_session(), 4_000, 4_010, ok(Value::SessionRenewed));
    h.op(read(1), 6_000, 6_010, read_held(HOLDER, 2));
    h
}

#[test]
fn a_session_renewal_keeps_its_lease_alive() {
    let report = renewed_past_its_first_ttl().check();
    assert_ok(&report);
    assert_eq!(report.sessions.created, 1);
    assert_eq!(report.sessions.renewals, 2);
    assert_eq!(report.sessions.leases, 1);
}

#[test]
fn a_lease_on_a_session_that_vanishes_while_the_session_lives_is_not_linearizable() {
    let mut h = renewed_past_its_first_ttl();
    // Another holder is granted the resource while the session was renewed at 4 s.
    h.op(acquire("b", 1_000), 6_100, 6_110, granted(9));
    assert_eq!(the(&h.check(), "nonlinearizable").resource, R);
}

#[test]
fn a_closed_session_frees_its_lease_at_once() {
    let mut h = renewed_past_its_first_ttl();
    h.op(
        close(),
        6_100,
        6_110,
        ok(Value::SessionClosed {
            leases: vec![Ended {
                resource: R.into(),
                token: 2,
            }],
        }),
    );
    h.op(acquire("b", 1_000), 6_200, 6_210, granted(9));
    h.op(write("b", 9), 6_220, 6_221, ok(Value::StoreAccepted));
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.sessions.closed, 1);
}

#[test]
fn a_session_told_gone_before_its_ttl_ended_early() {
    let mut h = Builder::new();
    h.op(create(), 0, 10, created());
    h.op(renew_session(), 1_000, 1_010, ok(Value::SessionRenewed));
    // Alive until at least 1 s + 3 s·(1−ε); told gone at 2 s.
    h.op(renew_session(), 2_000, 2_010, not_found());
    let report = h.check();
    assert_eq!(the(&report, "session_ended_early").ops, vec![1, 2]);
}

#[test]
fn a_session_told_gone_after_its_ttl_is_fine_and_so_is_a_close() {
    let mut h = Builder::new();
    h.op(create(), 0, 10, created());
    h.op(renew_session(), 1_000, 1_010, ok(Value::SessionRenewed));
    h.op(renew_session(), 4_500, 4_510, not_found());
    assert_ok(&h.check());

    let mut h = Builder::new();
    h.op(create(), 0, 10, created());
    h.op(
        close(),
        500,
        510,
        ok(Value::SessionClosed { leases: vec![] }),
    );
    h.op(acquire_on(R, 0), 600, 610, not_found());
    assert_ok(&h.check());
}

#[test]
fn a_session_renewed_after_it_was_told_gone_is_revived() {
    let mut h = Builder::new();
    h.op(create(), 0, 10, created());
    h.op(renew_session(), 4_000, 4_010, not_found());
    h.op(renew_session(), 5_000, 5_010, ok(Value::SessionRenewed));
    assert_eq!(the(&h.check(), "session_revived").ops, vec![1, 2]);
}

/// The session holds `R` (token 2) and `res2` (token 3).
fn two_leases() -> Builder {
    let mut h = Builder::new();
    h.op(create(), 0, 10, created());
    h.op(acquire_on(R, 0), 20, 30, granted(2));
    h.op(acquire_on("res2", 0), 40, 50, granted(3));
    h.on_session(R, 2, Acquired, 2);
    h.on_session("res2", 3, Acquired, 3);
    h
}

/// [`two_leases`], reclaimed at revision 10.
fn reclaimed_together() -> Builder {
    let mut h = two_leases();
    h.on_session(R, 10, Reclaimed, 2);
    h.on_session("res2", 10, Reclaimed, 3);
    h
}

#[test]
fn a_session_reclaimed_in_one_entry_passes() {
    let report = reclaimed_together().check();
    assert_ok(&report);
    assert_eq!(report.sessions.expired, 1);
    assert_eq!(report.sessions.ended_together, 1);
}

#[test]
fn a_session_reclaimed_over_two_entries_is_split() {
    let mut h = reclaimed_together();
    if let Some(e) = h.events.get_mut("res2").and_then(|e| e.last_mut()) {
        e.revision = 11;
    }
    let report = h.check();
    the(&report, "session_split");
}

#[test]
fn a_lease_that_ends_after_its_session_outlived_it() {
    let mut h = two_leases();
    h.on_session(R, 10, Reclaimed, 2);
    h.on_session("res2", 12, Released, 3);
    assert_eq!(the(&h.check(), "outlived_session").resource, "res2");
}

#[test]
fn a_lease_granted_on_a_session_after_it_ended_outlived_it() {
    let mut h = reclaimed_together();
    h.on_session("res3", 12, Acquired, 12);
    assert_eq!(the(&h.check(), "outlived_session").resource, "res3");
}

#[test]
fn a_close_releases_what_it_answered_in_one_entry() {
    let mut h = two_leases();
    let ended = vec![
        Ended {
            resource: R.into(),
            token: 2,
        },
        Ended {
            resource: "res2".into(),
            token: 3,
        },
    ];
    h.op(
        close(),
        100,
        110,
        ok(Value::SessionClosed { leases: ended }),
    );
    h.on_session(R, 7, Released, 2);
    h.on_session("res2", 7, Released, 3);
    let report = h.check();
    assert_ok(&report);
    assert_eq!(report.sessions.ended_together, 1);

    // One lease released by another entry than the close's.
    if let Some(e) = h.events.get_mut("res2").and_then(|e| e.last_mut()) {
        e.revision = 8;
    }
    the(&h.check(), "session_split");

    // One lease never released at all.
    h.events.get_mut("res2").map(|e| e.pop());
    the(&h.check(), "session_end_unrecorded");
}

#[test]
fn a_close_that_answers_a_lease_the_holder_did_not_hold_is_not_linearizable() {
    let mut h = renewed_past_its_first_ttl();
    let ended = |token| {
        ok(Value::SessionClosed {
            leases: vec![Ended {
                resource: R.into(),
                token,
            }],
        })
    };
    h.op(close(), 6_100, 6_110, ended(7));
    the(&h.check(), "nonlinearizable");

    // Nor one that names nothing here while the holder held a lease here.
    let mut h = renewed_past_its_first_ttl();
    h.op(
        close(),
        6_100,
        6_110,
        ok(Value::SessionClosed { leases: vec![] }),
    );
    the(&h.check(), "nonlinearizable");
}

#[test]
fn an_event_about_a_session_holder_that_does_not_name_the_session_is_reported() {
    let mut h = two_leases();
    h.event(R, 10, Released, HOLDER);
    if let Some(e) = h.events.get_mut(R).and_then(|e| e.last_mut()) {
        e.token = 2;
    }
    assert_eq!(the(&h.check(), "session_unnamed").resource, R);
}

#[test]
fn a_session_both_closed_and_reclaimed_is_reported() {
    let mut h = reclaimed_together();
    h.op(
        close(),
        100,
        110,
        ok(Value::SessionClosed { leases: vec![] }),
    );
    the(&h.check(), "outlived_session");
}
