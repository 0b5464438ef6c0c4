//! The benchmark workloads through Tenure's own client.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use tenure_client::{pb, prost_duration, release_request, renew_request, Client};

use super::Workload;

const TTL: Duration = Duration::from_secs(30);

pub struct Session {
    client: Client,
    workload: Workload,
    prefix: String,
    /// This client's resource for `Contended`, or its held lease for `Renew` and `Read`.
    resource: String,
    held: Option<pb::Lease>,
    /// `Handoff`: the other client of the pair (its own connections) and its holder name;
    /// after each handoff the two swap places with `client` and `prefix`.
    other: Option<(Client, String)>,
}

pub(crate) fn acquire_request(resource: &str, holder: &str, ttl: Duration) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.to_string(),
        holder: holder.to_string(),
        ttl: Some(prost_duration(ttl)),
        ..Default::default()
    }
}

/// The resource as a linearizable read finds it.
async fn read(client: &Client, name: &str) -> Result<Option<pb::Resource>> {
    let answer = client
        .get_resource(pb::GetResourceRequest {
            name: name.to_string(),
            consistency: pb::Consistency::Linearizable as i32,
        })
        .await?;
    Ok(answer.resource)
}

fn granted(response: pb::AcquireResponse) -> Result<pb::Lease> {
    match response.lease {
        Some(lease) if response.granted => Ok(lease),
        _ => bail!("not granted: {}", response.reason),
    }
}

impl Session {
    /// A client with its own connections to every endpoint, `endpoints[0]` tried first.
    pub async fn open(
        endpoints: &[String],
        workload: Workload,
        prefix: String,
        resource: String,
    ) -> Result<Session> {
        let client = Client::new(endpoints)?;
        let mut session = Session {
            client,
            workload,
            prefix,
            resource,
            held: None,
            other: None,
        };
        if workload == Workload::Handoff {
            let other = format!("{}/other", session.prefix);
            session.other = Some((Client::new(endpoints)?, other));
        }
        let ttl = match workload {
            Workload::Renew | Workload::RenewUnary | Workload::Handoff => Some(TTL),
            Workload::Read => Some(Duration::from_secs(600)),
            _ => None,
        };
        if let Some(ttl) = ttl {
            let response = session
                .client
                .acquire(acquire_request(&session.resource, &session.prefix, ttl))
                .await?;
            session.held = Some(granted(response)?);
        }
        Ok(session)
    }

    pub async fn op(&mut self, n: u64) -> Result<Option<Duration>> {
        if self.workload == Workload::Handoff {
            return self.handoff().await.map(Some);
        }
        let client = &self.client;
        match self.workload {
            Workload::Acquire => {
                let resource = format!("{}/{n}", self.prefix);
                granted(client.acquire(acquire_request(&resource, "b", TTL)).await?)?;
            }
            Workload::Lock | Workload::Failover => {
                let resource = format!("{}/{n}", self.prefix);
                let lease = granted(client.acquire(acquire_request(&resource, "b", TTL)).await?)?;
                client.release(release_request(&lease)).await?;
            }
            Workload::Contended => {
                let mut request = acquire_request(&self.resource, &self.prefix, TTL);
                request.on_conflict = pb::OnConflict::Wait as i32;
                request.wait_timeout = Some(prost_duration(Duration::from_secs(60)));
                let lease = granted(client.acquire(request).await?)?;
                client.release(release_request(&lease)).await?;
            }
            Workload::Handoff => unreachable!("handled above"),
            Workload::Renew => {
                let Some(lease) = &self.held else {
                    bail!("no lease to renew")
                };
                // On the client's KeepAlive stream, as a lease handle renews.
                client.keep_alive(renew_request(lease, TTL)).await?;
            }
            Workload::RenewUnary => {
                let Some(lease) = &self.held else {
                    bail!("no lease to renew")
                };
                if client
                    .renew(renew_request(lease, TTL))
                    .await?
                    .lease
                    .is_none()
                {
                    bail!("renew answered without a lease");
                }
            }
            Workload::Read => {
                let holders = read(client, &self.resource)
                    .await?
                    .map_or(0, |r| r.leases.len());
                if holders != 1 {
                    bail!("the owner read shows {holders} holders, not 1");
                }
            }
        }
        Ok(None)
    }

    /// The other client queues for the resource this one holds (a linearizable read sees
    /// it waiting), then this one releases: the time from sending the release to the
    /// waiter's grant. The two then swap places.
    async fn handoff(&mut self) -> Result<Duration> {
        let lease = self.held.take().context("no lease to hand over")?;
        let (other, other_holder) = self.other.take().context("no second client")?;
        let mut request = acquire_request(&self.resource, &other_holder, TTL);
        request.on_conflict = pb::OnConflict::Wait as i32;
        request.wait_timeout = Some(prost_duration(Duration::from_secs(60)));
        let waiter = tokio::spawn({
            let other = other.clone();
            async move { other.acquire(request).await }
        });
        let (client, resource) = (&self.client, &self.resource);
        let queued =
            || async move { Ok(read(client, resource).await?.is_some_and(|r| r.waiting > 0)) };
        let release = {
            let client = self.client.clone();
            async move { client.release(release_request(&lease)).await.map(drop) }
        };
        let (answer, handoff) = super::workload::time_handoff(waiter, queued, release).await?;
        let next = granted(answer)?;
        self.held = Some(next);
        let holder = std::mem::replace(&mut self.prefix, other_holder);
        self.other = Some((std::mem::replace(&mut self.client, other), holder));
        Ok(handoff)
    }

    pub async fn close(self) {
        if let Some(lease) = &self.held {
            let _ = self.client.release(release_request(lease)).await;
        }
    }
}

/// The node that leads now, by its own word (1-based), if one does.
pub async fn leader(endpoints: &[String]) -> Result<u64> {
    for (i, endpoint) in endpoints.iter().enumerate() {
        let client = Client::new([endpoint])?.with_timeout(Duration::from_secs(1));
        if let Ok(status) = client.node_status(0).await {
            if status.state == "Leader" {
                return Ok(i as u64 + 1);
            }
        }
    }
    bail!("no node says it leads")
}

/// The highest term any node reports.
pub async fn term(endpoints: &[String]) -> Result<u64> {
    let client = Client::new(endpoints)?.with_timeout(Duration::from_secs(2));
    let mut highest = 0;
    for i in 0..endpoints.len() {
        highest = highest.max(client.node_status(i).await?.term);
    }
    Ok(highest)
}

/// Raises the quotas of `anonymous` (every caller of a cluster without a token file, which
/// the benchmarks run) past what any workload here holds: a million leases, their exactly-once
/// records, 10,000 sessions. With auth off `anonymous` is held to the default quotas like any
/// client (SPEC §4.17); an operator whose development cluster must hold more raises them so.
pub async fn unbounded_anonymous(endpoints: &[String]) -> Result<()> {
    let changes = [
        "leases",
        "ad_hoc_resources",
        "waiters",
        "metadata_bytes",
        "exactly_once_bytes",
        "sessions",
    ]
    .into_iter()
    .map(|quota| pb::QuotaChange {
        quota: quota.into(),
        limit: 1 << 40,
        reset: false,
    })
    .collect();
    Client::new(endpoints)?
        .set_quota(pb::SetQuotaRequest {
            principal: "anonymous".into(),
            changes,
            request_id: String::new(),
        })
        .await?;
    Ok(())
}

/// Every running node names the same leader and an acquire through each commits.
pub async fn ready(endpoints: &[String], running: &[bool]) -> Result<()> {
    let mut leaders = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        if !running[i] {
            continue;
        }
        let client = Client::new([endpoint])?.with_timeout(Duration::from_secs(2));
        let status = client.node_status(0).await?;
        if status.leader_id == 0 {
            bail!("node {} knows no leader", i + 1);
        }
        leaders.push(status.leader_id);
        let probe = format!("ready/{}", uuid::Uuid::new_v4().simple());
        granted(
            client
                .acquire(acquire_request(&probe, "ready", Duration::from_secs(1)))
                .await?,
        )?;
    }
    super::one_leader(leaders)
}
