//! kill -9 of a node (the leader half the time), restarted after the hold.

use std::time::Duration;

use rand::seq::IndexedRandom;
use rand::Rng;

use super::Nemesis;
use crate::history::now_ns;

impl Nemesis {
    pub(super) async fn kill(&mut self, nodes: Vec<u64>, hold: Duration) -> anyhow::Result<()> {
        let target = match self.leader_slot().await {
            Some(leader) if self.rng.random_bool(0.5) => leader,
            _ => *nodes.choose(&mut self.rng).unwrap_or(&1),
        };
        self.procs().kill9(target)?;
        let start = now_ns();
        self.wait(hold).await;
        self.procs().restart(target)?;
        self.record(
            "kill",
            format!("n{target} kill -9, restarted"),
            start,
            Some(now_ns()),
        );
        Ok(())
    }
}
