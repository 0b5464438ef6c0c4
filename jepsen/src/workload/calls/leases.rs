//! The calls that change leases: acquire (and cancel a wait), renew, release, transfer.

use std::time::Duration;

use tenure_client::{pb, prost_duration, Error};

use super::{classify, held, holder_name, mode_of, pb_mode, Env, SessionRef, Tenancy, Wait};
use crate::history::{Call, Mode, Outcome, Value};

impl Env {
    /// `Acquire`, waiting in the queue with `wait`, on `session` if given (as its holder, with
    /// its ttl); the lease if granted.
    pub async fn acquire(
        &self,
        process: u64,
        resource: &str,
        ttl_ms: u64,
        (mode, units): (Mode, u64),
        wait: Option<Wait>,
        session: Option<&SessionRef>,
    ) -> Option<(u64, String)> {
        let (holder, ttl_ms) = match session {
            Some(s) => (s.holder.clone(), s.ttl_ms),
            None => (holder_name(process), ttl_ms),
        };
        let call = Call::Acquire {
            resource: resource.into(),
            holder: holder.clone(),
            ttl_ms,
            mode,
            units,
            wait_ms: wait.map_or(0, |w| w.timeout_ms),
            many: 0,
            session_id: session.map(|s| s.id.clone()).unwrap_or_default(),
            session_alive_ns: session.map_or(0, |s| s.alive_ns()),
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::AcquireRequest {
            resource: resource.into(),
            holder,
            ttl: match session {
                Some(_) => None,
                None => Some(prost_duration(Duration::from_millis(ttl_ms))),
            },
            session_id: session.map(|s| s.id.clone()).unwrap_or_default(),
            mode: pb_mode(mode) as i32,
            units,
            on_conflict: match wait {
                Some(_) => pb::OnConflict::Wait as i32,
                None => pb::OnConflict::Fail as i32,
            },
            wait_timeout: wait.map(|w| prost_duration(Duration::from_millis(w.timeout_ms))),
            ..Default::default()
        };
        let answer = give_up(
            wait.and_then(|w| w.give_up_after),
            self.client.acquire(request),
        )
        .await;
        let outcome = match answer {
            Ok(r) if r.granted => match r.lease {
                Some(lease) => Outcome::Ok {
                    value: Value::Granted {
                        token: lease.fencing_token,
                        lease_id: lease.lease_id,
                    },
                },
                None => Outcome::Unknown {
                    error: "granted without a lease".into(),
                },
            },
            Ok(r) => {
                let current = r.holders.first();
                Outcome::Ok {
                    value: Value::Refused {
                        reason: r.reason,
                        holder: current.map(|l| l.holder.clone()),
                        token: current.map(|l| l.fencing_token),
                        holders: r.holders.iter().map(held).collect(),
                    },
                }
            }
            Err(e) => classify(&e),
        };
        let outcome = self.recorder.complete(pending, outcome);
        if let Some(session) = session {
            session.learn(&outcome);
        }
        match outcome {
            Outcome::Ok {
                value: Value::Granted { token, lease_id },
            } => Some((token, lease_id)),
            _ => None,
        }
    }

    /// `AcquireMany` of every one of `resources` (exclusive), waiting with `wait`: each
    /// resource's part recorded as an acquire of it, numbered alike. The leases if granted.
    pub async fn acquire_many(
        &self,
        process: u64,
        resources: &[String],
        ttl_ms: u64,
        wait: Wait,
    ) -> Option<Vec<Tenancy>> {
        let holder = holder_name(process);
        let many = self.recorder.next_many();
        let pending: Vec<_> = resources
            .iter()
            .map(|resource| {
                let call = Call::Acquire {
                    resource: resource.clone(),
                    holder: holder.clone(),
                    ttl_ms,
                    mode: Mode::Exclusive,
                    units: 0,
                    wait_ms: wait.timeout_ms,
                    many,
                    session_id: String::new(),
                    session_alive_ns: 0,
                };
                self.recorder.invoke(process, call)
            })
            .collect();
        let request = pb::AcquireManyRequest {
            holder,
            claims: resources
                .iter()
                .map(|resource| pb::ResourceClaim {
                    resource: resource.clone(),
                    ..Default::default()
                })
                .collect(),
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: Some(prost_duration(Duration::from_millis(wait.timeout_ms))),
            ..Default::default()
        };
        let answer = give_up(wait.give_up_after, self.client.acquire_many(request)).await;
        let mut leases = Vec::new();
        for (k, pending) in pending.into_iter().enumerate() {
            let resource = &resources[k];
            let outcome = match &answer {
                Ok(r) if r.granted => match r.leases.iter().find(|l| &l.resource == resource) {
                    Some(lease) => {
                        leases.push(Tenancy {
                            resource: resource.clone(),
                            holder: holder_name(process),
                            lease_id: lease.lease_id.clone(),
                            token: lease.fencing_token,
                            mode: Mode::Exclusive,
                            transferable: false,
                        });
                        Outcome::Ok {
                            value: Value::Granted {
                                token: lease.fencing_token,
                                lease_id: lease.lease_id.clone(),
                            },
                        }
                    }
                    None => Outcome::Unknown {
                        error: format!("granted without a lease on {resource}"),
                    },
                },
                Ok(r) => {
                    let holders = r
                        .claims
                        .iter()
                        .find(|c| &c.resource == resource)
                        .map(|c| c.holders.as_slice())
                        .unwrap_or_default();
                    let current = holders.first();
                    Outcome::Ok {
                        value: Value::Refused {
                            reason: r.reason.clone(),
                            holder: current.map(|l| l.holder.clone()),
                            token: current.map(|l| l.fencing_token),
                            holders: holders.iter().map(held).collect(),
                        },
                    }
                }
                Err(e) => classify(e),
            };
            self.recorder.complete(pending, outcome);
        }
        (leases.len() == resources.len()).then_some(leases)
    }

    /// `CancelWait` of this client's wait on `resource`.
    pub async fn cancel_wait(&self, process: u64, resource: &str) -> Outcome {
        let holder = holder_name(process);
        let call = Call::CancelWait {
            resource: resource.into(),
            holder: holder.clone(),
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::CancelWaitRequest {
            resource: resource.into(),
            holder,
            request_id: String::new(),
            queued_revision: 0,
        };
        let outcome = match self.client.cancel_wait(request).await {
            Ok(r) => Outcome::Ok {
                value: Value::WaitCancelled {
                    cancelled: r.cancelled,
                    revision: r.revision,
                },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub async fn renew(&self, process: u64, lease: &Tenancy, ttl_ms: u64) -> Outcome {
        let holder = lease.holder.clone();
        // A third of the leases publish their holder's name in their metadata as they renew
        // (rules version 2, spec §4.3). Before the cluster runs it, a node of this build
        // refuses them `rules_not_reached` (nothing done), and one of the release before,
        // which does not know the fields, renews without them.
        let replace_metadata = lease.token.is_multiple_of(3);
        let call = Call::Renew {
            resource: lease.resource.clone(),
            holder: holder.clone(),
            lease_id: lease.lease_id.clone(),
            token: lease.token,
            ttl_ms,
            sets_metadata: replace_metadata,
        };
        let pending = self.recorder.invoke(process, call);
        let metadata = match replace_metadata {
            true => [("renewed_by".to_string(), holder.clone())].into(),
            false => Default::default(),
        };
        let request = pb::RenewRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder,
            fencing_token: lease.token,
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            request_id: String::new(),
            metadata,
            replace_metadata,
        };
        let outcome = match self.client.renew(request).await {
            Ok(_) => Outcome::Ok {
                value: Value::Renewed { token: lease.token },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    pub async fn release(&self, process: u64, lease: &Tenancy) -> Outcome {
        let holder = lease.holder.clone();
        let call = Call::Release {
            resource: lease.resource.clone(),
            holder: holder.clone(),
            lease_id: lease.lease_id.clone(),
            token: lease.token,
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::ReleaseRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder,
            fencing_token: lease.token,
            request_id: String::new(),
        };
        let outcome = match self.client.release(request).await {
            Ok(_) => Outcome::Ok {
                value: Value::Released { token: lease.token },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }

    /// `Transfer` of `lease` to client `to`.
    pub async fn transfer(&self, process: u64, lease: &Tenancy, to: u64) -> Outcome {
        let holder = lease.holder.clone();
        let call = Call::Transfer {
            resource: lease.resource.clone(),
            holder: holder.clone(),
            lease_id: lease.lease_id.clone(),
            token: lease.token,
            to_holder: holder_name(to),
        };
        let pending = self.recorder.invoke(process, call);
        let request = pb::TransferRequest {
            resource: lease.resource.clone(),
            lease_id: lease.lease_id.clone(),
            holder,
            fencing_token: lease.token,
            to_holder: holder_name(to),
            ..Default::default()
        };
        let outcome = match self.client.transfer(request).await {
            Ok(r) => match r.lease {
                Some(new) => Outcome::Ok {
                    value: Value::Transferred {
                        token: new.fencing_token,
                        mode: mode_of(&new),
                        units: new.units,
                        lease_id: new.lease_id,
                    },
                },
                None => Outcome::Unknown {
                    error: "transferred without a lease".into(),
                },
            },
            Err(e) => classify(&e),
        };
        self.recorder.complete(pending, outcome)
    }
}

/// `call`, abandoned after `after` if set (a client giving up on its wait: the outcome is then
/// unknown).
async fn give_up<T>(
    after: Option<Duration>,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match after {
        Some(after) => tokio::time::timeout(after, call).await.unwrap_or_else(|_| {
            Err(Error::Local(format!(
                "gave up waiting after {}ms",
                after.as_millis()
            )))
        }),
        None => call.await,
    }
}
