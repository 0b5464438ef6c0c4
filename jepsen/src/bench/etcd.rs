//! The same workloads through etcd's own API (the `etcd-client` crate), with etcd's standard
//! recipes: a lock is lease grant + put-if-absent txn bound to the lease + revoke; the
//! contended lock is the concurrency mutex (etcd's Lock service) on a session lease; renew is
//! a keepalive stream; the owner read is a linearizable range read.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    LockOptions, PutOptions, Txn, TxnOp,
};

use super::Workload;

const TTL_S: i64 = 30;

pub struct Session {
    client: Client,
    workload: Workload,
    prefix: String,
    resource: String,
    lease: Option<i64>,
    keepalive: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// `Handoff`: the lock key this client holds, and the other client of the pair with its
    /// session lease; after each handoff the two swap places.
    locked: Option<Vec<u8>>,
    other: Option<(Client, i64)>,
}

async fn connect(endpoints: &[String]) -> Result<Client> {
    let urls: Vec<String> = endpoints.iter().map(|e| format!("http://{e}")).collect();
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(10));
    Client::connect(urls, Some(options))
        .await
        .context("connecting to etcd")
}

impl Session {
    /// A client with its own connections to every endpoint (etcd-client balances over them).
    pub async fn open(
        endpoints: &[String],
        workload: Workload,
        prefix: String,
        resource: String,
    ) -> Result<Session> {
        let mut client = connect(endpoints).await?;
        let mut session = Session {
            client: client.clone(),
            workload,
            prefix,
            resource,
            lease: None,
            keepalive: None,
            locked: None,
            other: None,
        };
        match workload {
            Workload::Handoff => {
                let lease = client.lease_grant(120, None).await?.id();
                session.lease = Some(lease);
                let options = LockOptions::new().with_lease(lease);
                let locked = client.lock(session.resource.clone(), Some(options)).await?;
                session.locked = Some(locked.key().to_vec());
                let mut other = connect(endpoints).await?;
                let other_lease = other.lease_grant(120, None).await?.id();
                session.other = Some((other, other_lease));
            }
            Workload::Contended => {
                // The concurrency session's lease; the runs are far shorter than its ttl.
                session.lease = Some(client.lease_grant(120, None).await?.id());
            }
            Workload::Renew | Workload::RenewUnary => {
                let id = client.lease_grant(TTL_S, None).await?.id();
                session.lease = Some(id);
                session.keepalive = Some(client.lease_keep_alive(id).await?);
            }
            Workload::Read => {
                client.put(session.resource.clone(), "owner", None).await?;
            }
            _ => {}
        }
        Ok(session)
    }

    pub async fn op(&mut self, n: u64) -> Result<Option<Duration>> {
        if self.workload == Workload::Handoff {
            return self.handoff().await.map(Some);
        }
        let client = &mut self.client;
        match self.workload {
            Workload::Acquire => {
                client
                    .put(format!("{}/{n}", self.prefix), "b", None)
                    .await?;
            }
            Workload::Lock | Workload::Failover => {
                let key = format!("{}/{n}", self.prefix);
                let lease = client.lease_grant(TTL_S, None).await?.id();
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key,
                        "b",
                        Some(PutOptions::new().with_lease(lease)),
                    )]);
                let taken = client.txn(txn).await?.succeeded();
                client.lease_revoke(lease).await?;
                if !taken {
                    bail!("not granted: the key exists");
                }
            }
            Workload::Contended => {
                let options = self.lease.map(|id| LockOptions::new().with_lease(id));
                let locked = client.lock(self.resource.clone(), options).await?;
                client.unlock(locked.key().to_vec()).await?;
            }
            Workload::Handoff => unreachable!("handled above"),
            Workload::Renew | Workload::RenewUnary => {
                let Some((keeper, stream)) = self.keepalive.as_mut() else {
                    bail!("no keepalive stream")
                };
                keeper.keep_alive().await?;
                match stream.message().await? {
                    Some(answer) if answer.ttl() > 0 => {}
                    Some(_) => bail!("the lease expired"),
                    None => bail!("the keepalive stream ended"),
                }
            }
            Workload::Read => {
                let answer = client.get(self.resource.clone(), None).await?;
                if answer.kvs().len() != 1 {
                    bail!("the owner read shows {} keys, not 1", answer.kvs().len());
                }
            }
        }
        Ok(None)
    }

    /// The other client's Lock waits (its key is the second under the lock's prefix), then
    /// this one unlocks: the time from sending the unlock to the waiter's Lock returning.
    /// The two then swap places.
    async fn handoff(&mut self) -> Result<Duration> {
        let key = self.locked.take().context("no lock to hand over")?;
        let (other, other_lease) = self.other.take().context("no second client")?;
        let waiter = tokio::spawn({
            let (mut other, resource) = (other.clone(), self.resource.clone());
            async move {
                let options = LockOptions::new().with_lease(other_lease);
                other.lock(resource, Some(options)).await
            }
        });
        let queue = format!("{}/", self.resource);
        let holder = &self.client;
        let queued = || {
            let (mut client, queue) = (holder.clone(), queue.clone());
            async move {
                let options = GetOptions::new().with_prefix().with_count_only();
                Ok(client.get(queue, Some(options)).await?.count() >= 2)
            }
        };
        let unlock = {
            let mut client = self.client.clone();
            async move { client.unlock(key).await.map(drop) }
        };
        let (locked, handoff) = super::workload::time_handoff(waiter, queued, unlock).await?;
        let next = locked.key().to_vec();
        self.locked = Some(next);
        let lease = self
            .lease
            .replace(other_lease)
            .context("no session lease")?;
        self.other = Some((std::mem::replace(&mut self.client, other), lease));
        Ok(handoff)
    }

    pub async fn close(mut self) {
        if let Some(id) = self.lease {
            let _ = self.client.lease_revoke(id).await;
        }
        if let Some((mut other, id)) = self.other {
            let _ = other.lease_revoke(id).await;
        }
    }
}

/// The node that leads now (1-based): the one whose member id its own status calls leader.
pub async fn leader(endpoints: &[String]) -> Result<u64> {
    for (i, endpoint) in endpoints.iter().enumerate() {
        let Ok(mut client) = connect(std::slice::from_ref(endpoint)).await else {
            continue;
        };
        if let Ok(status) = client.status().await {
            let me = status.header().map(|h| h.member_id());
            if me == Some(status.leader()) {
                return Ok(i as u64 + 1);
            }
        }
    }
    bail!("no member says it leads")
}

/// The highest Raft term any member reports.
pub async fn term(endpoints: &[String]) -> Result<u64> {
    let mut highest = 0;
    for endpoint in endpoints {
        let mut client = connect(std::slice::from_ref(endpoint)).await?;
        highest = highest.max(client.status().await?.raft_term());
    }
    Ok(highest)
}

/// Every running member names the same leader and a put through each commits.
pub async fn ready(endpoints: &[String], running: &[bool]) -> Result<()> {
    let mut leaders = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        if !running[i] {
            continue;
        }
        let mut client = connect(std::slice::from_ref(endpoint)).await?;
        let status = client.status().await?;
        if status.leader() == 0 {
            bail!("member {} knows no leader", i + 1);
        }
        leaders.push(status.leader());
        client.put("ready", "x", None).await?;
    }
    super::one_leader(leaders)
}
