//! The rules versions the state machine knows (SPEC §4.26): which version introduced each
//! command, field, rule and format. The node negotiates the version in force (its `rules`
//! module: ranges, headers, the raise); the state carries it (`State::rules`) and `apply`
//! refuses what needs a version the state has not reached.
//!
//! What each version brought (the table docs/operations.md's "Upgrade" repeats):
//!
//! | version | release | what it brought |
//! |---|---|---|
//! | 1 | 0.1.0 | everything up to issue 37 (log entries as `Command::V1`/`Batch`, snapshot format 7) |
//! | 2 | 0.2.0 | the version itself (`Op::RaiseRules`), snapshot format 8 (which carries it), `RenewRequest.metadata` (`Op::RenewWithMetadata`) |
//! | 3 | 0.2.0 | snapshot format 9: the live state, then the archive's entries as they are (no event, record or idle resource decoded to write or read one); an `AcquireMany` answers leases it already holds again only when one grant gave them all (`MANY_ONE_GRANT`) |
//! | 4 | 0.2.0 | idle resources' values in chunks of 16 slots (`COLD_CHUNKS`: archive space 5, the open chunk in the live section of snapshot format 10) |

/// The first version: 0.1.0's rules, which any member applies. A member that announces no
/// range (0.1.0 itself) supports exactly this one.
pub const FIRST: u32 = 1;

/// The version of the rules version itself: `Op::RaiseRules`, snapshot format 8.
pub const RAISE: u32 = 2;

/// `RenewRequest.metadata`: a renew that replaces its lease's metadata.
pub const RENEW_METADATA: u32 = 2;

/// Snapshot format 9: the live state and the archive's entries as they are.
pub const LIVE_SNAPSHOTS: u32 = 3;

/// An `AcquireMany` whose claims are all held as asked answers those leases again only when
/// one grant gave them all (one fencing token); leases granted apart are `already_held`.
pub const MANY_ONE_GRANT: u32 = 3;

/// Idle resources' values in chunks of slots, the open chunk carried by snapshot format 10
/// (`machine::cold::chunks`).
pub const COLD_CHUNKS: u32 = 4;

/// Why a request is refused before it is proposed: it needs `needs`, the cluster runs
/// `cluster`.
pub fn not_reached(what: &str, needs: u32, cluster: u32) -> String {
    format!(
        "{what} needs rules version {needs} and the cluster runs {cluster}: every member must run a release that supports {needs} first (`tenure cluster status` shows what holds it back)"
    )
}
