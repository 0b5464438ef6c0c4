//! Operating a cluster (t90–t97): membership changes, metrics, restore from a backup, a
//! damaged snapshot. The numbering is in `tests/README.md`.

mod t90_membership;
mod t94_metrics;
mod t96_restore;
mod t97_damaged_snapshot;
