//! Partitions: random halves, the leader alone, or (five nodes or more) a bridge.

use std::time::Duration;

use rand::Rng;

use super::Nemesis;
use crate::history::now_ns;

impl Nemesis {
    /// Cuts the network for `hold`, then heals it.
    pub(super) async fn partition(
        &mut self,
        nodes: Vec<u64>,
        hold: Duration,
    ) -> anyhow::Result<()> {
        let leader = self.leader_slot().await;
        let (groups, detail) = match (self.rng.random_range(0..3), leader) {
            (0, Some(leader)) => {
                let rest: Vec<u64> = nodes.iter().copied().filter(|n| *n != leader).collect();
                (
                    vec![vec![leader], rest],
                    format!("leader n{leader} isolated"),
                )
            }
            (1, _) if self.nodes >= 5 => {
                // A bridge: two halves that each reach one node in the middle.
                let mut shuffled = nodes.clone();
                rand::seq::SliceRandom::shuffle(shuffled.as_mut_slice(), &mut self.rng);
                let (bridge, left, right) =
                    (shuffled[0], shuffled[1..3].to_vec(), shuffled[3..].to_vec());
                for l in &left {
                    for r in &right {
                        self.hosts.one_way(*l, *r)?;
                        self.hosts.one_way(*r, *l)?;
                    }
                }
                let start = now_ns();
                self.wait(hold).await;
                self.hosts.heal()?;
                self.record(
                    "partition",
                    format!("bridge n{bridge} between {left:?} and {right:?}"),
                    start,
                    Some(now_ns()),
                );
                return Ok(());
            }
            _ => {
                let mut shuffled = nodes.clone();
                rand::seq::SliceRandom::shuffle(shuffled.as_mut_slice(), &mut self.rng);
                let cut = (self.nodes as usize) / 2;
                let (a, b) = (shuffled[..cut].to_vec(), shuffled[cut..].to_vec());
                let detail = format!("{a:?} | {b:?}");
                (vec![a, b], detail)
            }
        };
        self.hosts.partition(&groups)?;
        let start = now_ns();
        self.wait(hold).await;
        self.hosts.heal()?;
        self.record("partition", detail, start, Some(now_ns()));
        Ok(())
    }
}
