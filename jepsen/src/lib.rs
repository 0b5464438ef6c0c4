//! Tenure's fault-injection harness: real `tenured` processes on network-namespace hosts,
//! concurrent clients recording a history, nemeses that partition, kill, pause and skew the
//! nodes, an independent checker of SPEC §4, and a report a person reads at a glance.

pub mod abuse;
pub mod bench;
pub mod checker;
pub mod history;
pub mod hosts;
pub mod nemesis;
pub mod power;
pub mod procs;
pub mod releases;
pub mod report;
pub mod run;
pub mod secure;
pub mod workload;
