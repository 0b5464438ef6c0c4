//! What older releases wrote, and how this one reads it: every format a node may find on its
//! disk or receive from a peer that is not this release's own, in one place.
//!
//! Which release reads and writes what (rules versions: `crate::rules`, spec §4.26):
//!
//! | what | written by this release | also read | code |
//! |---|---|---|---|
//! | log entries, peer bodies | postcard behind tag byte 1 | JSON (before the binary encoding) | the node's `store::codec` |
//! | `Command` | `V1` (one proposal), `Batch` | both | `command` |
//! | `Op` variants | the current ones, by rules version: `RaiseRules` and `RenewWithMetadata` only at rules 2 | `CreateResourceV1` (a `PolicyV1`), `BookV1` (logs from before bookable policies) | `shapes`, `command` |
//! | snapshot body | format 7 at rules 1, format 8 (rules version, then the state) at rules 2, format 9 (the live state, then the archive's entries) at rules 3, format 10 (format 9 with the open chunk of idle resources) from rules 4 | formats 2 (JSON), 3, 4, 5, 6, 7, 8, 9 | `snapshot` (3 to 6), `encoding` (2, 7 to 9), `machine::live` (9, 10) |
//! | idle resources in the archive | slots of chunks (space 5) from rules 4 | a value a key (space 4, rules 1 to 3), read and forgotten as before | `machine::cold` |
//! | exactly-once records | principal, digest and a slim reply (since format 5) | whole replies without principal (formats 3, 4), replies with nine quotas (format 5) | `dedup_format4`, `dedup_format5` (modules of `dedup`) |
//! | resources in snapshots | `StoredResource` with `Policy`, `Booking`, `Event` | with `PolicyV1` and `BookingV1` (format 4), events without a session (`EventV5`, formats 4 and 5) | `machine::resource` |
//! | quotas in snapshots | ten kinds | nine kinds (`QuotasV5`, `QuotaViewV5`, format 5) | `quota` |
//!
//! A release that adds a format adds its reader here and writes the new format only once the
//! cluster's rules version says every member reads it (as format 8 waits for rules 2).

pub mod shapes;
mod snapshot;
