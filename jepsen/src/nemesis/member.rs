//! Membership changes: a member removed, its disk wiped and its host rejoining under a new
//! Raft id, or leadership handed to another voter; and, after the run, every member a voter
//! again.

use std::time::Duration;

use rand::Rng;
use tenure_client::Client;
use tokio::time::Instant;

use super::Nemesis;
use crate::history::now_ns;

impl Nemesis {
    /// A client of every node for cluster administration (an admin's, with `--secure`).
    fn admin(&self) -> anyhow::Result<Client> {
        Ok(self
            .connect
            .client(self.procs().endpoints())?
            .with_timeout(Duration::from_secs(10)))
    }

    /// A third of the time hands leadership to another voter; otherwise removes a member (the
    /// leader half the time), wipes its host and adds it back under a new Raft id: learner
    /// until caught up, then voter. Each step is retried (the cluster may be electing).
    pub(super) async fn change_member(&mut self) -> anyhow::Result<()> {
        let admin = self.admin()?;
        let start = now_ns();
        if self.rng.random_bool(1.0 / 3.0) {
            let moved = admin.transfer_leader(0).await?;
            self.record(
                "member",
                format!(
                    "transfer leadership {} → {}{}",
                    moved.previous_leader_id,
                    moved.leader_id,
                    if moved.transferred {
                        ""
                    } else {
                        " (did not move as asked)"
                    }
                ),
                start,
                Some(now_ns()),
            );
            return Ok(());
        }
        let slot = match self.leader_slot().await {
            Some(leader) if self.rng.random_bool(0.5) => leader,
            _ => self.rng.random_range(1..=self.nodes),
        };
        let old = self.procs().raft_id(slot);
        let new = self.next_id;
        self.next_id += 1;
        let addr = self.endpoint(slot);
        retry("remove the member", || {
            admin.change_membership(Vec::new(), vec![old])
        })
        .await?;
        self.procs().replace(slot, new)?;
        self.readmit(&admin, new, &addr).await?;
        self.record(
            "member",
            format!("n{slot}: member {old} removed, disk wiped, rejoined as {new}"),
            start,
            Some(now_ns()),
        );
        Ok(())
    }

    /// Adds `id` at `addr` as a learner and promotes it once it has caught up.
    async fn readmit(&self, admin: &Client, id: u64, addr: &str) -> anyhow::Result<()> {
        retry("add the learner", || async {
            let added = admin.add_learner(id, addr, true).await?;
            anyhow::ensure!(added.caught_up, "learner {id} has not caught up yet");
            Ok(added)
        })
        .await?;
        retry("promote the learner", || {
            admin.change_membership(vec![id], Vec::new())
        })
        .await?;
        Ok(())
    }

    /// After the run: every host slot's member is a voter again (a membership change the run
    /// cut short is finished).
    pub(super) async fn readmit_all(&self) -> anyhow::Result<()> {
        let admin = self.admin()?;
        let voters: Vec<u64> = retry("read the membership", || async {
            for i in 0..self.nodes as usize {
                if let Ok(status) = admin.node_status(i).await {
                    if status.state == "Leader" {
                        return Ok(status
                            .members
                            .iter()
                            .filter(|m| m.voter)
                            .map(|m| m.id)
                            .collect());
                    }
                }
            }
            anyhow::bail!("no leader answered")
        })
        .await?;
        for slot in 1..=self.nodes {
            let id = self.procs().raft_id(slot);
            if !voters.contains(&id) {
                tracing::info!(slot, id, "re-admitting a member the run left out");
                self.readmit(&admin, id, &self.endpoint(slot)).await?;
            }
        }
        Ok(())
    }
}

/// Runs `step` until it succeeds, for up to a minute (elections and catching up take time).
async fn retry<T, E, F, Fut>(what: &str, mut step: F) -> anyhow::Result<T>
where
    E: Into<anyhow::Error>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(e) => {
                let e = e.into();
                if Instant::now() > deadline {
                    return Err(e.context(format!("{what}: gave up after a minute")));
                }
                tracing::debug!("{what}: {e:#}; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}
