//! SIGSTOP of the leader past the election timeout, then SIGCONT.

use std::time::Duration;

use super::Nemesis;
use crate::history::now_ns;

impl Nemesis {
    pub(super) async fn pause(&self, hold: Duration) -> anyhow::Result<()> {
        let Some(target) = self.leader_slot().await else {
            return Ok(());
        };
        self.procs().pause(target)?;
        let start = now_ns();
        // Past the election timeout (1 s), so the others elect a new leader.
        self.wait(hold.max(Duration::from_millis(1_500))).await;
        self.procs().resume(target)?;
        self.record(
            "pause",
            format!("leader n{target} SIGSTOP"),
            start,
            Some(now_ns()),
        );
        Ok(())
    }
}
