//! The model's rules one by one.

use super::*;

const X: Mode = Mode::Exclusive;

fn lease(holder: HolderId, token: u64, bound: Nanos) -> Lease {
    Lease {
        holder,
        mode: X,
        grace: false,
        units: 0,
        token: Token::known(token),
        expiry: bound,
        bound,
    }
}

fn shared(holder: HolderId, mode: Mode, units: u32, token: u64) -> Lease {
    Lease {
        mode,
        units,
        ..lease(holder, token, 10)
    }
}

fn held(holder: HolderId, token: u64, bound: Nanos) -> State {
    State::with(&[lease(holder, token, bound)], token + 1)
}

fn free(floor: u64) -> State {
    State::with(&[], floor)
}

fn grant(holder: HolderId, mode: Mode, units: u32, token: u64) -> MOp {
    MOp::AcquireGranted {
        holder,
        mode,
        units,
        token,
        expiry: 10,
        bound: 10,
    }
}

fn exclusive_grant(holder: HolderId, token: u64, bound: Nanos) -> MOp {
    MOp::AcquireGranted {
        holder,
        mode: X,
        units: 0,
        token,
        expiry: bound,
        bound,
    }
}

const ADHOC: Rules = Rules {
    read: false,
    write: false,
    pool: 0,
    transferable: false,
    grace: false,
};

const POOL4: Rules = Rules {
    read: true,
    write: true,
    pool: 4,
    transferable: false,
    grace: true,
};

const MOVABLE: Rules = Rules {
    transferable: true,
    ..ADHOC
};

#[test]
fn a_grant_needs_a_free_resource_and_a_higher_token() {
    let f = free(5);
    assert!(step(&ADHOC, &f, &exclusive_grant(0, 4, 10)).is_none());
    let s = step(&ADHOC, &f, &exclusive_grant(0, 5, 10)).expect("grant");
    assert_eq!(s, held(0, 5, 10));
    // Idempotent: same holder, same token, bound not extended.
    assert_eq!(step(&ADHOC, &s, &exclusive_grant(0, 5, 99)), Some(s));
    assert!(step(&ADHOC, &s, &exclusive_grant(0, 6, 99)).is_none());
    assert!(step(&ADHOC, &s, &exclusive_grant(1, 6, 99)).is_none());
    // A shared mode the policy does not list is never granted.
    assert!(step(&ADHOC, &f, &grant(0, Mode::Read, 0, 5)).is_none());
}

#[test]
fn an_unseen_token_is_bound_by_the_first_op_that_reveals_it() {
    let f = free(3);
    let unknown = MOp::AcquireUnknown {
        holder: 1,
        mode: X,
        units: 0,
        expiry: 10,
        bound: 10,
    };
    let s = step(&ADHOC, &f, &unknown).expect("unknown grant");
    assert_eq!(s.floor, 4);
    let read = |token| MOp::Read {
        leases: vec![Seen {
            holder: 1,
            token: Some(token),
            mode: Some(X),
            units: Some(0),
            grace: Some(false),
        }]
        .into_boxed_slice(),
    };
    assert!(step(&ADHOC, &s, &read(2)).is_none());
    let bound = step(&ADHOC, &s, &read(9)).expect("read");
    assert_eq!(bound, held(1, 9, 10));
    let validate_false = MOp::Validate {
        token: 9,
        valid: false,
    };
    assert!(step(&ADHOC, &bound, &validate_false).is_none());
    let not_live = |token| MOp::NotLive { holder: 1, token };
    assert!(step(&ADHOC, &bound, &not_live(9)).is_none());
    assert!(step(&ADHOC, &bound, &not_live(8)).is_some());
}

#[test]
fn a_later_known_grant_caps_an_unseen_token() {
    let s = step(
        &POOL4,
        &free(3),
        &MOp::AcquireUnknown {
            holder: 0,
            mode: Mode::Read,
            units: 1,
            expiry: 10,
            bound: 10,
        },
    )
    .expect("unknown");
    let s = step(&POOL4, &s, &grant(1, Mode::Read, 1, 7)).expect("grant 7");
    // The unknown grant came first: its token is in 3..=6.
    assert_eq!(s.lease_of(0).map(|l| l.token), Some(Token { lo: 3, hi: 6 }));
    let renew = |token| MOp::Renew {
        holder: 0,
        token,
        expiry: 20,
        bound: 20,
    };
    assert!(step(&POOL4, &s, &renew(9)).is_none());
    assert!(step(&POOL4, &s, &renew(5)).is_some());
}

#[test]
fn renew_replaces_the_bound_and_release_frees() {
    let s = held(0, 5, 10);
    let renew = |holder| MOp::Renew {
        holder,
        token: 5,
        expiry: 7,
        bound: 7,
    };
    let r = step(&ADHOC, &s, &renew(0)).expect("renew");
    assert_eq!(r.lease_of(0).map(|l| l.bound), Some(7));
    assert!(step(&ADHOC, &s, &renew(1)).is_none());
    let release = MOp::Release {
        holder: 0,
        token: 5,
    };
    let f = step(&ADHOC, &s, &release).expect("release");
    assert_eq!(f, free(6));
    assert!(step(&ADHOC, &f, &release).is_none());
    let refused = MOp::AcquireRefused {
        holder: 1,
        mode: X,
        units: 0,
        why: Refusal::Unavailable,
        holders: Box::new([]),
        exact: false,
    };
    assert!(step(&ADHOC, &f, &refused).is_none());
}

#[test]
fn shared_leases_coexist_within_the_pool() {
    let s = step(&POOL4, &free(1), &grant(0, Mode::Read, 2, 3)).expect("read 2");
    let s = step(&POOL4, &s, &grant(1, Mode::Write, 1, 4)).expect("write 1");
    assert!(s.within(&POOL4));
    // 3 of 4 units drawn: 2 more do not fit, 1 does; exclusive never fits.
    assert!(step(&POOL4, &s, &grant(2, Mode::Read, 2, 5)).is_none());
    assert!(step(&POOL4, &s, &grant(2, X, 0, 5)).is_none());
    let full = step(&POOL4, &s, &grant(2, Mode::Read, 1, 5)).expect("read 1");
    assert_eq!(full.units_used(), 4);
    let refused = |why, mode, units| MOp::AcquireRefused {
        holder: 3,
        mode,
        units,
        why,
        holders: Box::new([]),
        exact: false,
    };
    assert!(step(&POOL4, &full, &refused(Refusal::Units, Mode::Read, 1)).is_some());
    assert!(step(&POOL4, &full, &refused(Refusal::Unavailable, Mode::Read, 1)).is_none());
    assert!(step(&POOL4, &full, &refused(Refusal::Unavailable, X, 0)).is_some());
    // Room for one unit is not insufficient for one unit.
    assert!(step(&POOL4, &s, &refused(Refusal::Units, Mode::Read, 1)).is_none());
    // Another mode or units for the same holder: already held, never a grant.
    assert!(step(&POOL4, &s, &grant(0, Mode::Read, 1, 9)).is_none());
    let already = MOp::AlreadyHeld {
        holder: 0,
        mode: Mode::Read,
        units: 1,
    };
    assert!(step(&POOL4, &s, &already).is_some());
    let same = MOp::AlreadyHeld {
        holder: 0,
        mode: Mode::Read,
        units: 2,
    };
    assert!(step(&POOL4, &s, &same).is_none());
}

#[test]
fn an_exclusive_lease_excludes_shared_ones() {
    let s = step(&POOL4, &free(1), &grant(0, X, 0, 3)).expect("exclusive");
    assert!(step(&POOL4, &s, &grant(1, Mode::Read, 1, 4)).is_none());
    let r = step(&POOL4, &free(1), &grant(0, Mode::Read, 1, 3)).expect("read");
    assert!(step(&POOL4, &r, &grant(1, X, 0, 4)).is_none());
}

#[test]
fn a_read_must_show_every_live_lease() {
    let s = State::with(
        &[shared(0, Mode::Read, 1, 3), shared(1, Mode::Write, 2, 4)],
        5,
    );
    let seen = |holder, token, mode, units| Seen {
        holder,
        token: Some(token),
        mode: Some(mode),
        units: Some(units),
        grace: Some(false),
    };
    let both = MOp::Read {
        leases: vec![seen(1, 4, Mode::Write, 2), seen(0, 3, Mode::Read, 1)].into_boxed_slice(),
    };
    assert!(step(&POOL4, &s, &both).is_some());
    let one = MOp::Read {
        leases: vec![seen(0, 3, Mode::Read, 1)].into_boxed_slice(),
    };
    assert!(step(&POOL4, &s, &one).is_none());
    let wrong_units = MOp::Read {
        leases: vec![seen(1, 4, Mode::Write, 1), seen(0, 3, Mode::Read, 1)].into_boxed_slice(),
    };
    assert!(step(&POOL4, &s, &wrong_units).is_none());
}

#[test]
fn a_transfer_moves_the_lease_to_a_higher_token() {
    let s = held(0, 5, 10);
    let transfer = |new_token| MOp::Transfer {
        holder: 0,
        token: 5,
        to: 1,
        new_token,
    };
    assert!(
        step(&ADHOC, &s, &transfer(Some(8))).is_none(),
        "not transferable"
    );
    assert!(
        step(&MOVABLE, &s, &transfer(Some(5))).is_none(),
        "token not higher"
    );
    let t = step(&MOVABLE, &s, &transfer(Some(8))).expect("transfer");
    let moved = t.lease_of(1).copied().expect("to holds it");
    assert_eq!(
        (moved.token, moved.bound),
        (Token::known(8), 10),
        "expiry kept"
    );
    assert!(t.lease_of(0).is_none());
    // The old token is dead at once.
    let old_renew = MOp::Renew {
        holder: 0,
        token: 5,
        expiry: 20,
        bound: 20,
    };
    assert!(step(&MOVABLE, &t, &old_renew).is_none());
    assert!(dead(&old_renew, &t));
    let validate = |token, valid| MOp::Validate { token, valid };
    assert!(step(&MOVABLE, &t, &validate(5, true)).is_none());
    assert!(step(&MOVABLE, &t, &validate(8, true)).is_some());
    assert!(step(
        &MOVABLE,
        &t,
        &MOp::NotLive {
            holder: 0,
            token: 5
        }
    )
    .is_some());
    // Not to a holder that holds a lease: that is already_held.
    let busy = State::with(&[lease(0, 5, 10)], 6);
    assert!(step(&MOVABLE, &busy, &transfer(None)).is_some());
    let to_holder = MOp::TransferToHolder {
        holder: 0,
        token: 5,
        to: 1,
    };
    assert!(step(&MOVABLE, &busy, &to_holder).is_none());
}

#[test]
fn the_renewal_grace_is_a_phase_of_its_own() {
    let s = State::with(
        &[Lease {
            expiry: 10,
            bound: 15,
            ..shared(0, Mode::Read, 1, 3)
        }],
        4,
    );
    let moves = s.expiries(&POOL4, 12);
    assert_eq!(
        moves.len(),
        1,
        "grace only: the reclaim bound has not passed"
    );
    let (_, reclaimed, g) = moves[0];
    assert!(!reclaimed);
    // In grace: still live (others refused, renew accepted), but not valid.
    let validate = |valid| MOp::Validate { token: 3, valid };
    assert!(step(&POOL4, &g, &validate(true)).is_none());
    assert!(step(&POOL4, &g, &validate(false)).is_some());
    assert!(step(&POOL4, &s, &validate(false)).is_none());
    let renewed = step(
        &POOL4,
        &g,
        &MOp::Renew {
            holder: 0,
            token: 3,
            expiry: 30,
            bound: 35,
        },
    )
    .expect("renew in grace");
    assert!(step(&POOL4, &renewed, &validate(true)).is_some());
    assert_eq!(s.expiries(&POOL4, 16).len(), 2);
    assert_eq!(
        s.expiries(&ADHOC, 12).len(),
        0,
        "no grace phase without a grace"
    );
}
