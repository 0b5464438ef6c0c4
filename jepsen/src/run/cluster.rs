//! What the run asks of the cluster as an admin: its leader, every change of leader, and the
//! resources and quotas the workload runs under.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Client};
use tokio::time::Instant;

use crate::history::{now_ns, Mode, QuotaSettings, ResourcePolicy};
use crate::nemesis::current_leader;
use crate::workload::WorkloadConfig;

pub(super) async fn wait_for_leader(per_node: &[Client], timeout: Duration) -> Option<u64> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(leader) = current_leader(per_node).await {
            return Some(leader);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// The rules version a cluster of this build runs once its leader has raised it to the
/// highest every member applies (spec §4.26: at once, in a new cluster), waited for up to
/// `timeout`: None if no node showed it by then.
pub(super) async fn wait_for_rules(per_node: &[Client], timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        for client in per_node {
            let Ok(status) = client
                .with_timeout(Duration::from_millis(500))
                .node_status(0)
                .await
            else {
                continue;
            };
            let highest = status
                .rules_range
                .split_once('-')
                .and_then(|(_, max)| max.parse::<u32>().ok());
            if highest.is_some_and(|max| status.rules_version >= max) {
                return Some(status.rules_version);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Records every change of the leader most nodes name.
pub(super) async fn observe_leaders(
    per_node: Vec<Client>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<(u64, u64, u64)> {
    let mut seen: Vec<(u64, u64, u64)> = Vec::new();
    while !*stop.borrow() {
        let mut best: Option<(u64, u64)> = None;
        for client in &per_node {
            if let Ok(status) = client
                .with_timeout(Duration::from_millis(200))
                .node_status(0)
                .await
            {
                if status.state == "Leader" && best.is_none_or(|(_, term)| status.term > term) {
                    best = Some((status.id, status.term));
                }
            }
        }
        if let Some((node, term)) = best {
            if seen.last().is_none_or(|(_, n, t)| (*n, *t) != (node, term)) {
                seen.push((now_ns(), node, term));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// Registers `name` with `policy` (an admin's call), retrying until the
/// cluster confirms it or says it exists.
pub(super) async fn register(
    client: &Client,
    name: &str,
    policy: &ResourcePolicy,
) -> anyhow::Result<()> {
    let ms = |ms: u64| Some(prost_duration(Duration::from_millis(ms)));
    let mode = |m: &Mode| match m {
        Mode::Exclusive => pb::LeaseMode::Exclusive as i32,
        Mode::Read => pb::LeaseMode::Read as i32,
        Mode::Write => pb::LeaseMode::Write as i32,
    };
    let request = pb::CreateResourceRequest {
        name: name.into(),
        kind: "jepsen".into(),
        policy: Some(pb::Policy {
            default_ttl: ms(policy.default_ttl_ms),
            max_ttl: ms(policy.max_ttl_ms),
            renewal_grace: ms(policy.renewal_grace_ms),
            transferable: policy.transferable,
            shared_modes: policy.shared_modes.iter().map(mode).collect(),
            total_units: policy.total_units,
            ..Default::default()
        }),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.create_resource(request.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.reason() == Some(tenure_client::Reason::AlreadyExists) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%name, %e, "registering again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => anyhow::bail!("could not register {name}: {e}"),
        }
    }
}

/// Sets the workload's quotas for `principal` (admin), retrying with the same request id
/// until the cluster confirms them: every later decision of the cluster holds the clients to
/// them.
pub(super) async fn set_quotas(
    client: &Client,
    principal: &str,
    config: &WorkloadConfig,
) -> anyhow::Result<QuotaSettings> {
    let limits = config.quota_limits();
    let request = pb::SetQuotaRequest {
        principal: principal.to_owned(),
        changes: limits
            .iter()
            .map(|(quota, limit)| pb::QuotaChange {
                quota: quota.clone(),
                limit: *limit,
                reset: false,
            })
            .collect(),
        request_id: uuid::Uuid::new_v4().to_string(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.set_quota(request.clone()).await {
            Ok(_) => {
                return Ok(QuotaSettings {
                    principal: principal.to_owned(),
                    limits,
                })
            }
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%e, "setting the quotas again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => anyhow::bail!("could not set the quotas of {principal}: {e}"),
        }
    }
}

/// Whether every node has applied what the leader had committed once the run was healed: a
/// node left behind (one that cannot decode or apply the log, say a command of rules its
/// release does not have, or one halted) fails the run. Empty when they all have.
pub(super) async fn converged(per_node: &[Client], patience: Duration) -> Vec<String> {
    let deadline = Instant::now() + patience;
    let status = |client: &Client| {
        let client = client.with_timeout(Duration::from_secs(1));
        async move { client.node_status(0).await }
    };
    // The leader's commit index; an election under way is waited out.
    let mut target = 0;
    while target == 0 {
        for client in per_node {
            if let Ok(s) = status(client).await {
                if s.state == "Leader" {
                    target = target.max(s.commit_index);
                }
            }
        }
        if target == 0 {
            if Instant::now() >= deadline {
                return vec!["no leader named its commit index after the run".into()];
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    loop {
        let mut behind = Vec::new();
        for (i, client) in per_node.iter().enumerate() {
            match status(client).await {
                Ok(s) if s.applied_index >= target => {}
                Ok(s) => behind.push(format!(
                    "n{} applied {} of {target}{}",
                    i + 1,
                    s.applied_index,
                    match s.halted.as_str() {
                        "" => String::new(),
                        why => format!(" (halted: {why})"),
                    }
                )),
                Err(e) => behind.push(format!("n{} gave no status ({e})", i + 1)),
            }
        }
        if behind.is_empty() {
            return Vec::new();
        }
        if Instant::now() >= deadline {
            return vec![format!(
                "not every node applied the log within {patience:?} after the run: {}",
                behind.join("; ")
            )];
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
