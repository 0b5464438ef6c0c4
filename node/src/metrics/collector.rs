//! What a scrape reads from the node's state ([`NodeCollector`]).

use super::*;
use crate::store::WatchReceiver as _;

/// Reads the node's state on every scrape.
#[derive(Debug)]
pub(super) struct NodeCollector {
    pub(super) node: Weak<Node>,
}

fn gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn counter<N: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Prometheus's base unit.
fn micros_as_seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

impl Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(node) = self.node.upgrade() else {
            return Ok(());
        };
        let metrics = node.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        let (leases, waiters, applied, exactly_once, top) = {
            let applied = node.sm.read();
            let state = &applied.state;
            (
                state.live_leases(),
                state.waiters(),
                applied.last_applied.map_or(0, |id| id.index),
                (state.dedup().len(), state.dedup().bytes()),
                crate::coord::views::top_principals(state.quotas()),
            )
        };
        let e = &mut encoder;
        let i = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (name, help, gauge_of) in [
            (
                "tenure_requests_in_flight",
                "Client requests being handled (refused past tenure_requests_in_flight_limit)",
                &node.in_flight,
            ),
            (
                "tenure_open_streams",
                "Watch, Serve and waiting Acquire calls open (refused past tenure_open_streams_limit)",
                &node.streams,
            ),
            (
                "tenure_public_streams",
                "Health Watch and reflection streams open (refused past tenure_public_streams_limit)",
                &node.public_streams,
            ),
        ] {
            gauge(e, name, help, gauge_of.open() as i64)?;
            gauge(
                e,
                &format!("{name}_limit"),
                "The node-wide cap (--max-in-flight, --max-open-streams, --max-public-streams)",
                gauge_of.limit() as i64,
            )?;
        }
        gauge(
            e,
            "tenure_raft_term",
            "Current Raft term",
            i(metrics.current_term),
        )?;
        gauge(
            e,
            "tenure_raft_leader_id",
            "Leader this node knows (0: none)",
            i(metrics.current_leader.unwrap_or(0)),
        )?;
        gauge(
            e,
            "tenure_raft_is_leader",
            "1 on the leader",
            i64::from(metrics.state == ServerState::Leader),
        )?;
        gauge(
            e,
            "tenure_raft_last_log_index",
            "Last log index",
            i(metrics.last_log_index.unwrap_or(0)),
        )?;
        let commit = crate::coord::views::commit_index(node.id, &metrics, applied);
        gauge(
            e,
            "tenure_raft_commit_index",
            "Commit index (the quorum's on the leader; the applied index elsewhere)",
            i(commit),
        )?;
        gauge(e, "tenure_raft_applied_index", "Applied index", i(applied))?;
        gauge(
            e,
            "tenure_raft_voters",
            "Voters in the membership",
            membership.voter_ids().count() as i64,
        )?;
        gauge(
            e,
            "tenure_raft_members",
            "Members (voters and learners)",
            membership.nodes().count() as i64,
        )?;
        gauge(e, "tenure_leases_active", "Live leases", leases as i64)?;
        gauge(
            e,
            "tenure_exactly_once_records",
            "Remembered request ids (exactly-once, the last 10 minutes of lease time)",
            exactly_once.0 as i64,
        )?;
        gauge(
            e,
            "tenure_exactly_once_bytes",
            "What the remembered request ids cost, in bytes (refused past 1 GiB)",
            i(exactly_once.1),
        )?;
        {
            let mut used = e.encode_descriptor(
                "tenure_quota_used",
                "What the principals nearest a quota hold (at most 10 principals), by quota",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            let mut limits = Vec::new();
            for view in &top {
                let principal = view.principal.clone().unwrap_or_default();
                for q in crate::lease::quota::ALL {
                    let value = match q {
                        Quota::Watches | Quota::Inboxes | Quota::AllResourceWatches => {
                            node.streams_of(&principal, q)
                        }
                        _ => view.usage.get(q),
                    };
                    let labels = vec![
                        ("principal", principal.clone()),
                        ("quota", q.name().to_string()),
                    ];
                    ConstGauge::new(i(value)).encode(used.encode_family(&labels)?)?;
                    limits.push((labels, view.limits.get(q)));
                }
            }
            let mut limit = e.encode_descriptor(
                "tenure_quota_limit",
                "The limits of the principals in tenure_quota_used, by quota",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (labels, value) in limits {
                ConstGauge::new(i(value)).encode(limit.encode_family(&labels)?)?;
            }
        }
        gauge(
            e,
            "tenure_waiters",
            "Acquires waiting in waiting rooms",
            waiters as i64,
        )?;
        let s = &node.sm.stats;
        counter(
            e,
            "tenure_reclaims",
            "Leases reclaimed after expiry and grace",
            StorageStats::get(&s.reclaims),
        )?;
        counter(
            e,
            "tenure_log_appends",
            "Log appends (each flushed and fdatasynced)",
            StorageStats::get(&s.log_appends),
        )?;
        counter(
            e,
            "tenure_log_entries",
            "Log entries appended",
            StorageStats::get(&s.log_entries),
        )?;
        counter(
            e,
            "tenure_log_fsyncs",
            "Log fdatasyncs",
            StorageStats::get(&s.log_fsyncs),
        )?;
        counter(
            e,
            "tenure_log_sync_seconds",
            "Time in log flush + fdatasync",
            micros_as_seconds(StorageStats::get(&s.log_sync_micros)),
        )?;
        counter(
            e,
            "tenure_snapshots_built",
            "Snapshots this node built",
            StorageStats::get(&s.snapshots_built),
        )?;
        counter(
            e,
            "tenure_snapshots_installed",
            "Snapshots installed from the leader",
            StorageStats::get(&s.snapshots_installed),
        )?;
        counter(
            e,
            "tenure_connections_cut",
            "Connections closed for abuse (out of strikes: --connection-strikes)",
            node.connections_cut
                .load(std::sync::atomic::Ordering::Relaxed),
        )?;
        let tables = node.connection_tables();
        for (name, help, value) in [
            (
                "tenure_connections",
                "Connections open, by port (grpc, http, metrics)",
                (|t: &crate::guard::Table| t.open()) as fn(&crate::guard::Table) -> usize,
            ),
            (
                "tenure_connections_limit",
                "The connection cap of each port (--max-connections, --http-max-connections)",
                |t: &crate::guard::Table| t.settings().limit,
            ),
        ] {
            let mut family = e.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for table in &tables {
                let labels = [("port", table.port)];
                ConstGauge::new(value(table) as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut closed = e.encode_descriptor(
            "tenure_connections_closed",
            "Connections refused or closed by their port's table, by port and why: per_address, full (no quiet one could go), greeting (quiet without an authenticated call), idle, evicted (quiet, to make room)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for table in &tables {
            for why in crate::guard::Closed::ALL {
                let labels = [("port", table.port), ("why", why.as_str())];
                ConstCounter::new(table.closed(why)).encode(closed.encode_family(&labels)?)?;
            }
        }
        counter(
            e,
            "tenure_writes_refused_unproposed",
            "Writes the leader refused without proposing them: certainly refused for their principal's quotas or request id",
            node.refused_before_proposing
                .load(std::sync::atomic::Ordering::Relaxed),
        )?;
        counter(
            e,
            "tenure_snapshots_refused",
            "Snapshots from the leader refused: their checksum did not match",
            StorageStats::get(&s.snapshots_refused),
        )?;
        gauge(
            e,
            "tenure_snapshot_last_index",
            "Last index of the newest snapshot",
            i(StorageStats::get(&s.last_snapshot_index)),
        )?;
        gauge(
            e,
            "tenure_snapshot_bytes",
            "Size of the newest snapshot this node built",
            i(StorageStats::get(&s.last_snapshot_bytes)),
        )?;
        gauge(
            e,
            "tenure_snapshot_build_seconds",
            "How long building the newest snapshot took",
            micros_as_seconds(StorageStats::get(&s.last_snapshot_build_micros)),
        )?;
        gauge(
            e,
            "tenure_snapshot_building",
            "1 while a snapshot is being built",
            i(StorageStats::get(&s.snapshot_building)),
        )?;
        Ok(())
    }
}
