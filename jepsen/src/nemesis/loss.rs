//! Random packet loss on every node.

use std::time::Duration;

use rand::Rng;

use super::Nemesis;
use crate::history::now_ns;

impl Nemesis {
    pub(super) async fn loss(&mut self, nodes: Vec<u64>, hold: Duration) -> anyhow::Result<()> {
        let percent = self.rng.random_range(10..40);
        self.hosts.loss(&nodes, percent)?;
        let start = now_ns();
        self.wait(hold).await;
        self.hosts.heal()?;
        self.record(
            "loss",
            format!("{percent}% on every node"),
            start,
            Some(now_ns()),
        );
        Ok(())
    }
}
