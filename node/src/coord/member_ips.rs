//! The members' IP addresses, their names resolved: the gate never keeps them out
//! (`crate::guard`).

use crate::store::WatchReceiver as _;
use std::sync::Arc;

use tokio::sync::watch;

use super::Node;

impl Node {
    /// The members' IP addresses, their names resolved (kept up to date by
    /// [`resolve_members`]).
    pub fn member_ips(&self) -> Vec<std::net::IpAddr> {
        self.member_ips
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Resolves the members' addresses whenever the membership changes, and every 30 s (names
/// may move), into [`Node::member_ips`].
pub(crate) async fn resolve_members(node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    let mut metrics = node.raft.metrics();
    let mut refresh = tokio::time::interval(std::time::Duration::from_secs(30));
    let mut resolved_for: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            // The first tick comes at once.
            _ = refresh.tick() => resolved_for.clear(),
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let addrs: Vec<String> = metrics
            .borrow_and_update()
            .membership_config
            .membership()
            .nodes()
            .map(|(_, member)| member.addr.clone())
            .collect();
        if addrs == resolved_for {
            continue;
        }
        let mut ips = Vec::new();
        for addr in &addrs {
            if let Ok(resolved) = tokio::net::lookup_host(addr.as_str()).await {
                ips.extend(resolved.map(|socket| socket.ip().to_canonical()));
            }
        }
        ips.sort();
        ips.dedup();
        *node
            .member_ips
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ips;
        resolved_for = addrs;
    }
}
