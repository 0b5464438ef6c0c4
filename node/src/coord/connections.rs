//! The connection tables of this node's ports (`crate::guard::Table`), and the open-file
//! limit they must fit under.

use std::sync::{Arc, Weak};

use crate::guard::{Settings, Table};

use super::Node;

/// Descriptors kept for everything but client connections: the log and snapshot files, the
/// members' connections, the tarpits of the ports, the metrics port.
pub const RESERVED_DESCRIPTORS: u64 = 2048;

/// Connections the metrics port holds open at once (its scrapers), and from one address.
pub const METRICS_CONNECTIONS: usize = 64;
pub const METRICS_CONNECTIONS_PER_ADDRESS: usize = 16;

/// A port this node serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The gRPC port (`--listen`): clients and members.
    Grpc,
    /// The HTTP/JSON gateway (`--http-listen`).
    Http,
    /// The metrics endpoint (`--metrics-listen`).
    Metrics,
}

impl Port {
    pub fn name(self) -> &'static str {
        match self {
            Port::Grpc => "grpc",
            Port::Http => "http",
            Port::Metrics => "metrics",
        }
    }

    /// What `limits` allow this port's connections.
    pub fn settings(self, limits: &crate::limits::Limits) -> Settings {
        let (limit, per_address, idle) = match self {
            Port::Grpc => (
                limits.max_connections,
                limits.max_connections_per_address,
                limits.connection_idle_timeout,
            ),
            Port::Http => (
                limits.http_max_connections,
                limits.max_connections_per_address,
                limits.http_idle_timeout,
            ),
            Port::Metrics => (
                METRICS_CONNECTIONS,
                METRICS_CONNECTIONS_PER_ADDRESS,
                limits.http_idle_timeout,
            ),
        };
        Settings {
            limit,
            per_address,
            greeting: limits.greeting_timeout,
            idle,
            // A quiet gRPC client is one between its calls: only an unproven one goes to
            // make room there.
            evict_proven: self != Port::Grpc,
        }
    }
}

impl Node {
    /// The table of `port`'s connections, listed for the metrics; a member's address has no
    /// share of it.
    pub fn connection_table(self: &Arc<Self>, port: Port) -> Arc<Table> {
        let settings = port.settings(&self.config.limits);
        let node: Weak<Node> = Arc::downgrade(self);
        let table = Table::new(port.name(), settings, move |ip| {
            node.upgrade()
                .is_some_and(|node| node.member_ips().contains(&ip))
        });
        self.connection_tables
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(table.clone());
        table
    }

    /// The connection tables of the ports serving now.
    pub fn connection_tables(&self) -> Vec<Arc<Table>> {
        self.connection_tables
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Raises the process's open-file limit to its hard limit, and lowers the connection caps
/// (`--max-connections`, and `--http-max-connections` when `http` serves) to what it leaves
/// beside [`RESERVED_DESCRIPTORS`], so that the node never runs out of descriptors for its
/// own files and members however many clients connect. Returns what it changed, to log.
pub fn fit_descriptors(limits: &mut crate::limits::Limits, http: bool) -> Option<String> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut soft = limit.current.unwrap_or(u64::MAX);
    if let (Some(current), hard) = (limit.current, limit.maximum) {
        let raised = Rlimit {
            current: hard,
            maximum: hard,
        };
        if hard.is_none_or(|hard| hard > current) && setrlimit(Resource::Nofile, raised).is_ok() {
            soft = hard.unwrap_or(u64::MAX);
        }
    }
    let wanted = limits.max_connections as u64
        + if http {
            limits.http_max_connections as u64
        } else {
            0
        }
        + METRICS_CONNECTIONS as u64;
    let room = soft.saturating_sub(RESERVED_DESCRIPTORS);
    if wanted <= room {
        return None;
    }
    let scale = |cap: usize| ((cap as u64).saturating_mul(room) / wanted.max(1)).max(1) as usize;
    let before = (limits.max_connections, limits.http_max_connections);
    limits.max_connections = scale(limits.max_connections);
    if http {
        limits.http_max_connections = scale(limits.http_max_connections);
    }
    Some(format!(
        "the open-file limit is {soft}: --max-connections lowered from {} to {}{}, to leave {RESERVED_DESCRIPTORS} descriptors for the node's own files and members (raise LimitNOFILE / ulimit -n for more)",
        before.0,
        limits.max_connections,
        match http {
            true => format!(
                ", --http-max-connections from {} to {}",
                before.1, limits.http_max_connections
            ),
            false => String::new(),
        }
    ))
}
