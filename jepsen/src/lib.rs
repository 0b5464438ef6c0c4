//! Tenure's fault-injection harness. Empty until issue 3 lands: network-namespace hosts,
//! nemeses, a history recorder and a linearizability checker will live here.
