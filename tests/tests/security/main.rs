//! Who may do what, and what a node refuses to hold (t70, t71, t92, t98): auth and roles,
//! the gate in front of every request, TLS, quotas per principal. The numbering is in
//! `tests/README.md`.

mod t70_auth;
mod t71_gate;
mod t92_tls;
mod t98_quotas;
