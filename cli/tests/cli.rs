//! No tests here: this file makes `cargo test --workspace` build the `tenure` binary (cargo
//! builds a package's binaries for its integration tests), which the tests crate's `client`
//! binary runs (`tests/tests/client/t64_cli_offline.rs` and on).
