//! Replication and storage (t10–t40): openraft's storage conformance suite, three-node
//! clusters in one process and of real `tenured` processes, a paused node, clock faults.
//! The numbering is in `tests/README.md`.

mod t10_storage;
mod t20_cluster;
mod t25_answers;
mod t30_process;
mod t35_paused_node;
mod t40_clock;
mod t45_rules;
