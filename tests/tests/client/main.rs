//! The Rust client, the HTTP/JSON gateway and the `tenure` CLI (t60–t68): the self-renewing
//! lease handle, sessions, several resources at once, every route of the gateway, the CLI
//! without a cluster and against live ones, and the election recipes. The CLI tests run the real binary through [`tenure_tests::cli::Cli`]. The
//! numbering is in `tests/README.md`.

mod t60_client;
mod t61_session;
mod t62_acquire_many;
mod t63_gateway;
mod t64_cli_offline;
mod t65_cli;
mod t66_cli_wait;
mod t68_election;
