//! The gate probe of the `upgrade` nemesis (spec §4.26): each time leadership moves to a node
//! of this build while the cluster is held at the release before's rules, the nemesis asks
//! that node for what those rules do not have, a renew that replaces its lease's metadata, on
//! a lease of its own. The node must refuse it `rules_not_reached` before proposing it; a
//! node that proposes it anyway gets `invalid_argument` from apply (and a node of the release
//! before may not decode the entry at all). The workload's own renews reach a leader of this
//! build in a mixed cluster only by chance; the probe makes every such leadership a check.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Reason};

use super::Nemesis;
use crate::history::now_ns;

/// The `detail` prefix of a probe a node of this build answered `invalid_argument`: it
/// proposed what the cluster's rules do not have yet.
pub const UNGATED: &str = "UNGATED";
/// The rules version a renew that replaces metadata needs (spec §4.3).
const RENEW_METADATA_RULES: u32 = 2;
/// The probe's resource and holder.
const PROBE: &str = "upgrade-gate-probe";
const HOLDER: &str = "nemesis";

impl Nemesis {
    /// Probes the gate of node `slot` (of this build, just made leader) while the cluster is
    /// held at rules `hold`, and records what it answered. Nothing to probe once the release
    /// before applies renews that replace metadata.
    pub(super) async fn probe_gate(&self, slot: u64, hold: u32) {
        if hold >= RENEW_METADATA_RULES {
            return;
        }
        let client = self.per_node[(slot - 1) as usize].with_timeout(Duration::from_secs(2));
        let start = now_ns();
        let acquired = client
            .acquire(pb::AcquireRequest {
                resource: PROBE.into(),
                holder: HOLDER.into(),
                ttl: Some(prost_duration(Duration::from_secs(5))),
                ..Default::default()
            })
            .await;
        // Not granted: a probe of an earlier leadership still holds it (its release failed).
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
                return;
            }
        };
        let renewed = client
            .renew(pb::RenewRequest {
                resource: PROBE.into(),
                lease_id: lease.lease_id.clone(),
                holder: HOLDER.into(),
                fencing_token: lease.fencing_token,
                ttl: Some(prost_duration(Duration::from_secs(5))),
                metadata: [("probe".to_string(), "gate".to_string())].into(),
                replace_metadata: true,
                ..Default::default()
            })
            .await;
        // The probed node checks the rules before it proposes or hands the write on, so a
        // node of this build answers rules_not_reached whoever leads. Served (apply of this
        // build took it, or it reached a leader of the release before, which drops the
        // fields) or refused invalid_argument (apply of this build): it was proposed.
        let proposed = |how: String| {
            format!(
                "{UNGATED}: n{slot} (this build, the cluster held at rules {hold}) proposed a \
                 renew that replaces metadata, which needs rules {RENEW_METADATA_RULES}: {how}"
            )
        };
        let detail = match renewed {
            Err(e) if e.reason() == Some(Reason::InvalidArgument) => proposed(e.to_string()),
            Err(e) if e.reason() == Some(Reason::RulesNotReached) => {
                format!("gate probe at n{slot}: refused rules_not_reached at rules {hold}")
            }
            // Unanswered: a cluster whose majority cannot decode the entry never commits it;
            // the lag checks that follow find the nodes behind.
            Err(e) => format!("gate probe at n{slot}: {e}"),
            Ok(_) => proposed("served".into()),
        };
        // Released, or left to expire in its ttl.
        let _ = client
            .release(pb::ReleaseRequest {
                resource: PROBE.into(),
                lease_id: lease.lease_id,
                holder: HOLDER.into(),
                fencing_token: lease.fencing_token,
                request_id: String::new(),
            })
            .await;
        self.record("upgrade", detail, start, Some(now_ns()));
    }
}
