//! The calls that read: validate a token, a linearizable read through a chosen node, and a
//! listing of a client's leases.

use tenure_client::pb;

use super::{classify, held, holder_name, Env};
use crate::history::{Call, Outcome, Value};

impl Env {
    pub async fn validate(&self, process: u64, resource: &str, token: u64) -> Outcome {
        let pending = self.recorder.invoke(
            process,
            Call::Validate {
                resource: resource.into(),
                token,
            },
        );
        let request = pb::ValidateRequest {
            resource: resource.into(),
            fencing_token: token,
            ..Default::default()
        };
        let outcome = match self.client.validate(request).await {
            Ok(r) => Outcome::Ok {
                value: Value::Validated {
                    valid: r.valid,
                    reason: r.reason,
                },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    /// A linearizable `GetResource` through node `node` (1-based).
    pub async fn read(&self, process: u64, resource: &str, node: u64) -> Outcome {
        let pending = self.recorder.invoke(
            process,
            Call::Read {
                resource: resource.into(),
                node,
            },
        );
        let client = &self.per_node[(node - 1) as usize];
        let request = pb::GetResourceRequest {
            name: resource.into(),
            consistency: pb::Consistency::Linearizable as i32,
        };
        let outcome = match client.get_resource(request).await {
            Ok(r) => {
                let (leases, count) = r
                    .resource
                    .map(|res| (res.leases, res.lease_count))
                    .unwrap_or_default();
                if count as usize > leases.len() {
                    // A view cut short proves nothing about the leases it leaves out.
                    Outcome::Unknown {
                        error: format!("the read shows {} of {count} leases", leases.len()),
                    }
                } else {
                    Outcome::Ok {
                        value: Value::read_at(leases.iter().map(held).collect(), r.read_revision),
                    }
                }
            }
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    /// A linearizable `ListLeases` of this client's leases, recorded as what it shows of
    /// `resource`; the lease there, if any.
    pub async fn list_leases(&self, process: u64, resource: &str) -> Option<pb::Lease> {
        let holder = holder_name(process);
        let pending = self.recorder.invoke(
            process,
            Call::ListLeases {
                resource: resource.into(),
                holder: holder.clone(),
            },
        );
        let request = pb::ListLeasesRequest {
            holder,
            consistency: pb::Consistency::Linearizable as i32,
            ..Default::default()
        };
        let (outcome, found) = match self.client.list_leases(request).await {
            // Every lease of one holder fits the first page (a client holds a few at most).
            Ok(r) => {
                let mine: Vec<pb::Lease> = r
                    .leases
                    .into_iter()
                    .filter(|l| l.resource == resource)
                    .collect();
                let value = Value::Leases {
                    leases: mine.iter().map(held).collect(),
                };
                (Outcome::Ok { value }, mine.into_iter().next())
            }
            Err(e) => (classify(&e), None),
        };
        self.recorder.complete(pending, outcome);
        found
    }
}
