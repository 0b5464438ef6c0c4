//! Handing leadership over, by Tenure itself (openraft 0.9 had no transfer): the leader stops
//! taking writes and linearizable reads and stops its heartbeats, so that no AppendEntries renews the
//! followers' lease on it; waits until the target has its whole log; asks the target to
//! campaign, which it does once the other voters' lease on the old leader has run out
//! ([`Succession::hand_over`](crate::coord::succession::Succession::hand_over)); and waits for a
//! new leader. Writes that arrive meanwhile wait for that leader, as during an election.

use super::*;

impl Node {
    pub(crate) async fn transfer_leader(&self, to: NodeId, from: Option<NodeId>) -> AdminReply {
        let reply = |to: Option<NodeId>, transferred: bool, detail: String| AdminReply::Transfer {
            from: from.unwrap_or(self.id),
            to,
            transferred,
            detail,
        };
        if let Some(from) = from.filter(|from| *from != self.id) {
            // Leadership moved since the call began (a retry after a lost answer).
            let done = to == 0 || to == self.id;
            let detail = if done {
                String::new()
            } else {
                format!("leadership moved from {from} to {} meanwhile", self.id)
            };
            return reply(Some(self.id), done, detail);
        }
        let metrics = self.metrics_now();
        let membership = metrics.membership_config.membership().clone();
        let target = if to == 0 {
            match membership
                .voter_ids()
                .filter(|id| *id != self.id)
                .max_by_key(|id| (matched_index(&metrics, *id), std::cmp::Reverse(*id)))
            {
                Some(id) => id,
                None => return reply(Some(self.id), false, "there is no other voter".into()),
            }
        } else {
            to
        };
        if target == self.id {
            return reply(Some(self.id), true, String::new());
        }
        let Some(addr) = membership.get_node(&target).map(|n| n.addr.clone()) else {
            return reply(Some(self.id), false, format!("{target} has no address"));
        };
        if self.handing_over.swap(true, Ordering::SeqCst) {
            let detail = "a leadership transfer is already under way".to_string();
            return reply(Some(self.id), false, detail);
        }
        // From here this node takes no writes or reads; whatever happens below, it takes them,
        // and sends heartbeats, again afterwards.
        let _resume = Resume(self);
        tracing::info!(target, "handing leadership over");

        // Entries already proposed still replicate, and the target needs all of them to win.
        // Heartbeats go on meanwhile, and the wait ends before any follower could campaign.
        let last = self.metrics_now().last_log_index.unwrap_or(0);
        if let Err(has) = self.caught_up(target, last, self.config.election_min).await {
            let detail = format!("voter {target} is behind the leader's log ({has} of {last})");
            return reply(Some(self.id), false, detail);
        }
        self.raft.runtime_config().heartbeat(false);
        let send = |mut client: PeerClient, body| async move { client.admin(body).await };
        let asked = self
            .peers
            .call(&addr, &AdminRequest::Campaign { leader: self.id }, send)
            .await
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                decode::<Result<AdminOutcome, NotServed>>(bytes.get_ref())
                    .map_err(|e| e.to_string())
                    .map(|(outcome, _)| outcome)
            });
        if let Err(why) = asked {
            let detail = format!("could not ask voter {target} to campaign: {why}");
            return reply(Some(self.id), false, detail);
        }
        let mut watch = self.raft.metrics();
        let _ = tokio::time::timeout(
            self.succession.hand_over_limit(),
            crate::store::wait_metrics(&mut watch, |m| {
                m.current_leader.is_some_and(|l| l != self.id)
            }),
        )
        .await;
        let now = self.metrics_now().current_leader;
        tracing::info!(target, leader = ?now, "leadership hand-over ended");
        let transferred = if to == 0 {
            now.is_some_and(|l| l != self.id)
        } else {
            now == Some(target)
        };
        let detail = if transferred {
            String::new()
        } else {
            format!("voter {target} did not take over in time")
        };
        reply(now, transferred, detail)
    }
}

/// Ends a hand-over: heartbeats and writes resume (on whichever role the node has now).
struct Resume<'a>(&'a Node);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.raft.runtime_config().heartbeat(true);
        self.0.handing_over.store(false, Ordering::SeqCst);
    }
}
