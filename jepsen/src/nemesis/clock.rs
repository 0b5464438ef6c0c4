//! Clock faults through the nodes' fault-injection clock control: a node's rate changed, and a
//! follower's clocks stepped.

use std::time::Duration;

use rand::seq::IndexedRandom;
use rand::Rng;
use tenure_proto::raft::v1::RaftBytes;

use super::Nemesis;
use crate::history::now_ns;
use crate::secure::Connect;

/// Steps and/or re-rates both clocks of a node (its fault-injection `SetClock` RPC).
pub async fn set_clock(
    connect: &Connect,
    endpoint: &str,
    step_ms: i64,
    rate_ppm: i64,
) -> anyhow::Result<()> {
    let (mut client, token) = connect.raft(endpoint).await?;
    let body =
        serde_json::to_vec(&serde_json::json!({ "step_ms": step_ms, "rate_ppm": rate_ppm }))?;
    let mut request = tonic::Request::new(RaftBytes { data: body });
    request.set_timeout(Duration::from_secs(2));
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", token.parse()?);
    }
    client.set_clock(request).await?;
    Ok(())
}

impl Nemesis {
    pub(super) async fn clock(&mut self, nodes: Vec<u64>, hold: Duration) -> anyhow::Result<()> {
        let leader = self.leader_slot().await;
        let target = *nodes.choose(&mut self.rng).unwrap_or(&1);
        let max_ppm = (self.clock_epsilon * 1_000_000.0) as i64;
        let rate_ppm = self.rng.random_range(-max_ppm..=max_ppm);
        // Monotonic clocks never jump on a real leader; step only a follower's clocks.
        let step_ms = if Some(target) != leader {
            self.rng.random_range(-120_000..=3_600_000)
        } else {
            0
        };
        let endpoint = self.endpoint(target);
        set_clock(&self.connect, &endpoint, step_ms, rate_ppm).await?;
        let start = now_ns();
        self.wait(hold).await;
        set_clock(&self.connect, &endpoint, 0, 0).await?;
        self.record(
            "clock",
            format!("n{target} step {step_ms} ms, rate {rate_ppm} ppm"),
            start,
            Some(now_ns()),
        );
        Ok(())
    }
}
