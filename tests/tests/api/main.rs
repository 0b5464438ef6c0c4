//! The lease API through live clusters (t50, t75–t89): bad input, forwarding to an owner,
//! the waiting room, watch, bookings, lock delay, the KeepAlive stream, sessions, several
//! resources at once. The numbering is in `tests/README.md`.

mod t50_bad_input;
mod t75_forward;
mod t80_waiting;
mod t82_watch;
mod t84_bookings;
mod t86_lock_delay;
mod t87_keep_alive;
mod t88_sessions;
mod t89_acquire_many;
