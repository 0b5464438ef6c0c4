//! Who may do what, and what a node refuses to hold (t70, t71, t92, t98): auth and roles,
//! the gate in front of every request, TLS, quotas per principal. The numbering is in
//! `tests/README.md`.

mod t70_auth;
mod t71_gate;
mod t72_shares;
mod t73_connections;
mod t92_tls;
mod t98_quotas;

use tenure_client::Client;

/// `client`, calling as the principal of `token`.
fn as_(client: &Client, token: &str) -> Client {
    client.with_token(token).expect("an ASCII token")
}
