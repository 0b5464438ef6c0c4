//! The gate probe of the `upgrade` nemesis (spec §4.26): when leadership moves to a node of
//! this build while the cluster is held at the release before's rules, the nemesis asks that
//! node for what those rules do not have, a renew that replaces its lease's metadata, on a
//! lease of its own. The node must refuse it `rules_not_reached` before proposing it. A node
//! that proposes it anyway gets `invalid_argument` from apply, is served by a leader of the
//! release before (which drops the fields) or refused for what the lease is by then, or,
//! leading followers of the release before that cannot decode the entry, gets no answer at
//! all. The workload's own renews reach a leader of
//! this build in a mixed cluster only by chance; the probe makes such leaderships a check, and
//! is made again at the next one until a node answers it.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Reason};

use super::Nemesis;
use crate::history::now_ns;

/// The `detail` prefix of a probe a node of this build answered past its gate (served, or
/// refused for what apply or the lease decided), or left unanswered while up: it proposed
/// what the cluster's rules do not have yet.
pub const UNGATED: &str = "UNGATED";
/// The rules version a renew that replaces metadata needs (spec §4.3).
const RENEW_METADATA_RULES: u32 = 2;
/// The prefix of the probe's resources (one a probe, so that a lease a probe could not
/// release holds up no later probe) and its holder.
const PROBE: &str = "upgrade-gate-probe";
const HOLDER: &str = "nemesis";
/// The probe lease's ttl: it outlasts every try of the renew.
const TTL: Duration = Duration::from_secs(30);
/// How many times the renew is sent while it goes unanswered.
const TRIES: usize = 3;

impl Nemesis {
    /// Probes the gate of node `slot` (of this build, just made leader) while the cluster is
    /// held at rules `hold`, and records what it answered. Whether the probe settled the
    /// question (refused `rules_not_reached`, or proposed the renew): one that could not take
    /// its lease, was refused before the gate (auth, rate limits) or found the node down is
    /// made again at the next leadership of this build. Nothing to probe once the release
    /// before applies renews that replace metadata.
    pub(super) async fn probe_gate(&self, slot: u64, hold: u32) -> bool {
        if hold >= RENEW_METADATA_RULES {
            return true;
        }
        // A debug build on a loaded machine may take seconds to grant just after an election.
        let client = self.per_node[(slot - 1) as usize].with_timeout(Duration::from_secs(5));
        let start = now_ns();
        let resource = format!("{PROBE}-{start}");
        let acquired = client
            .acquire(pb::AcquireRequest {
                resource: resource.clone(),
                holder: HOLDER.into(),
                ttl: Some(prost_duration(TTL)),
                ..Default::default()
            })
            .await;
        let lease = match acquired {
            Ok(pb::AcquireResponse {
                granted: true,
                lease: Some(lease),
                ..
            }) => Ok(lease),
            Ok(refused) => Err(format!("not granted ({})", refused.reason)),
            Err(e) => Err(format!("not acquired: {e}")),
        };
        let lease = match lease {
            Ok(lease) => lease,
            Err(why) => {
                let detail = format!("gate probe at n{slot}: {why}, not probed");
                self.record("upgrade", detail, start, Some(now_ns()));
                return false;
            }
        };
        // A node of this build refuses the renew at once, before it proposes or hands it on;
        // one that proposes it to a cluster whose majority cannot decode it gets no answer (the
        // entry is never committed: its followers elect another leader, which drops it). Asked
        // [`TRIES`] times over, a node that is up answers, or it proposed.
        let mut unanswered = Vec::new();
        let renewed = loop {
            let renewed = client
                .renew(pb::RenewRequest {
                    resource: resource.clone(),
                    lease_id: lease.lease_id.clone(),
                    holder: HOLDER.into(),
                    fencing_token: lease.fencing_token,
                    ttl: Some(prost_duration(TTL)),
                    metadata: [("probe".to_string(), "gate".to_string())].into(),
                    replace_metadata: true,
                    ..Default::default()
                })
                .await;
            match renewed {
                Err(e) if e.is_retryable() => {
                    unanswered.push(e.to_string());
                    if unanswered.len() == TRIES {
                        break Err(unanswered);
                    }
                }
                renewed => break Ok(renewed),
            }
        };
        // The probed node checks the rules first, before anything the lease or apply decides
        // and before it hands the write on: whatever it answers past the gate (served, by apply
        // of this build or by a leader of the release before, which drops the fields; refused
        // invalid_argument by apply, or for what the lease is by any leader) was proposed.
        let proposed = |how: String| {
            format!(
                "{UNGATED}: n{slot} (this build, the cluster held at rules {hold}) proposed a \
                 renew that replaces metadata, which needs rules {RENEW_METADATA_RULES}: {how}"
            )
        };
        let (settled, detail) = match renewed {
            // Unanswered by a node that is up (its status is local: no Raft round).
            Err(unanswered) => match self.answers_status(slot).await {
                true => (
                    true,
                    proposed(format!(
                        "unanswered {TRIES} times ({})",
                        unanswered.join("; ")
                    )),
                ),
                false => (
                    false,
                    format!("gate probe at n{slot}: the node is not answering, not probed"),
                ),
            },
            Ok(Err(e)) if e.reason() == Some(Reason::RulesNotReached) => (
                true,
                format!("gate probe at n{slot}: refused rules_not_reached at rules {hold}"),
            ),
            Ok(Err(e)) if before_the_gate(&e) => (
                false,
                format!("gate probe at n{slot}: refused before the gate ({e}), not probed"),
            ),
            Ok(Err(e)) => (true, proposed(e.to_string())),
            Ok(Ok(_)) => (true, proposed("served".into())),
        };
        // Released, or left to expire in its ttl.
        let _ = client
            .release(pb::ReleaseRequest {
                resource,
                lease_id: lease.lease_id,
                holder: HOLDER.into(),
                fencing_token: lease.fencing_token,
                request_id: String::new(),
            })
            .await;
        self.record("upgrade", detail, start, Some(now_ns()));
        settled
    }

    /// Whether node `slot` answers a status call within a second.
    async fn answers_status(&self, slot: u64) -> bool {
        let client = self.per_node[(slot - 1) as usize].with_timeout(Duration::from_secs(1));
        client.node_status(0).await.is_ok()
    }
}

/// Whether a node refuses `e` before it reads the rules: the caller's token, its rate, its
/// streams (or a failure of this client's own).
fn before_the_gate(e: &tenure_client::Error) -> bool {
    matches!(
        e.reason(),
        None | Some(
            Reason::Unauthenticated
                | Reason::InsufficientPermissions
                | Reason::TooManyRequests
                | Reason::TooManyStreams
                | Reason::ResourceExhausted
        )
    )
}
