//! Every node of the cluster as tasks of the test's own runtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tenure_client::Client;
use tenure_node::app::{self, Node, Running};
use tenure_node::config::Config;
use tenure_node::store::WatchReceiver as _;
use tokio::net::TcpListener;

use crate::peers_arg;
use crate::scenario;

pub struct InProcessCluster {
    pub dir: tempfile::TempDir,
    pub addrs: BTreeMap<u64, String>,
    running: BTreeMap<u64, Running>,
    extra: BTreeMap<u64, Vec<String>>,
    /// Files the nodes read (a token file), removed with the cluster.
    kept: Vec<tempfile::TempDir>,
}

impl InProcessCluster {
    /// Starts `n` nodes; `extra` adds command-line flags per node id.
    pub async fn start(n: u64, extra: BTreeMap<u64, Vec<String>>) -> anyhow::Result<Self> {
        Self::start_prepared(n, extra, |_, _| async { Ok(()) }).await
    }

    /// Starts `n` nodes as a cluster restored from the snapshot file `backup` (`tenured
    /// restore`, the index moved on by `bump`): node 1 on a data directory seeded from it with
    /// all `n` as the voters, the others on empty ones.
    pub async fn restored(n: u64, backup: &std::path::Path, bump: u64) -> anyhow::Result<Self> {
        Self::start_prepared(n, BTreeMap::new(), |id, cluster: &InProcessCluster| {
            let restore = (id == 1).then(|| tenure_node::store::restore::Restore {
                snapshot: backup.to_path_buf(),
                data_dir: cluster.data_dir(id),
                id,
                peers: cluster.addrs.clone(),
                bump_index: bump,
            });
            async move {
                if let Some(restore) = restore {
                    restore.run().await?;
                }
                Ok(())
            }
        })
        .await
    }

    /// Starts `n` nodes, running `prepare` for each (its id, the cluster before it starts)
    /// first.
    pub async fn start_prepared<F, P>(
        n: u64,
        extra: BTreeMap<u64, Vec<String>>,
        prepare: P,
    ) -> anyhow::Result<Self>
    where
        P: Fn(u64, &InProcessCluster) -> F,
        F: std::future::Future<Output = anyhow::Result<()>>,
    {
        crate::init_tracing();
        let dir = tempfile::tempdir()?;
        let mut listeners = BTreeMap::new();
        for id in crate::ids(n) {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            listeners.insert(id, listener);
        }
        let addrs: BTreeMap<u64, String> = listeners
            .iter()
            .map(|(id, l)| Ok((*id, l.local_addr()?.to_string())))
            .collect::<std::io::Result<_>>()?;
        let mut cluster = InProcessCluster {
            dir,
            addrs,
            running: BTreeMap::new(),
            extra,
            kept: Vec::new(),
        };
        for id in cluster.addrs.keys() {
            prepare(*id, &cluster).await?;
        }
        for (id, listener) in listeners {
            let running = app::start(cluster.config(id)?, listener).await?;
            cluster.running.insert(id, running);
        }
        Ok(cluster)
    }

    fn config(&self, id: u64) -> anyhow::Result<Config> {
        let mut args = vec![
            "tenured".to_string(),
            "--id".into(),
            id.to_string(),
            "--listen".into(),
            self.addrs[&id].clone(),
            "--data-dir".into(),
            self.data_dir(id).display().to_string(),
            "--peers".into(),
            peers_arg(&self.addrs),
        ];
        args.extend(self.extra.get(&id).cloned().unwrap_or_default());
        Ok(Config::try_parse_from(args)?)
    }

    /// Keeps `dir` (files the nodes read) until the cluster is dropped.
    pub fn keep(&mut self, dir: tempfile::TempDir) {
        self.kept.push(dir);
    }

    /// Node `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> std::path::PathBuf {
        self.dir.path().join(format!("node{id}"))
    }

    pub fn node(&self, id: u64) -> &Arc<Node> {
        &self.running[&id].node
    }

    /// Where node `id` serves `GET /metrics` (with `--metrics-listen`).
    pub fn metrics_addr(&self, id: u64) -> Option<std::net::SocketAddr> {
        self.running.get(&id)?.metrics_addr
    }

    /// Where node `id` serves the HTTP/JSON gateway (with `--http-listen`).
    pub fn http_addr(&self, id: u64) -> Option<std::net::SocketAddr> {
        self.running.get(&id)?.http_addr
    }

    /// A live node other than `leader` (the lowest id).
    pub fn follower_of(&self, leader: u64) -> u64 {
        self.live_ids()
            .into_iter()
            .find(|id| *id != leader)
            .expect("a live node besides the leader")
    }

    pub fn live_ids(&self) -> Vec<u64> {
        self.running.keys().copied().collect()
    }

    /// A client of every node (live or not).
    pub fn client(&self) -> Client {
        Client::new(self.addrs.values()).expect("valid endpoints")
    }

    /// A client of one node only.
    pub fn client_of(&self, id: u64) -> Client {
        Client::new([&self.addrs[&id]]).expect("valid endpoint")
    }

    /// Waits until every live node agrees on one live leader; returns it.
    pub async fn leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        let live = self.live_ids();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut leaders = Vec::new();
            for id in &live {
                let metrics = self.node(*id).raft.wait(Some(
                    deadline.saturating_duration_since(tokio::time::Instant::now()),
                ));
                let m = metrics
                    .metrics(
                        |m| m.current_leader.is_some_and(|l| live.contains(&l)),
                        "a live leader",
                    )
                    .await?;
                leaders.push(m.current_leader);
            }
            if leaders.windows(2).all(|w| w[0] == w[1]) {
                if let Some(Some(leader)) = leaders.first() {
                    return Ok(*leader);
                }
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no agreed leader within {timeout:?}"
            );
            let mut changed = self.node(live[0]).raft.metrics();
            let _ = tokio::time::timeout(Duration::from_millis(100), changed.changed()).await;
        }
    }

    /// Stops a node abruptly: no call is finished, its port closes.
    pub async fn kill(&mut self, id: u64) {
        if let Some(running) = self.running.remove(&id) {
            running.kill().await;
        }
    }

    /// Node `id`'s extra flags from its next start on.
    pub fn set_flags(&mut self, id: u64, flags: Vec<String>) {
        self.extra.insert(id, flags);
    }

    /// Starts a killed node again on its port and data dir.
    pub async fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let listener = TcpListener::bind(&self.addrs[&id]).await?;
        let running = app::start(self.config(id)?, listener).await?;
        self.running.insert(id, running);
        Ok(())
    }

    /// Starts a new node `id` with `--join` (it waits to be added) on a fresh port, or on
    /// `addr` (a wiped node's old address); returns its address.
    pub async fn join(&mut self, id: u64, addr: Option<&str>) -> anyhow::Result<String> {
        let listener = TcpListener::bind(addr.unwrap_or("127.0.0.1:0")).await?;
        let addr = listener.local_addr()?.to_string();
        self.addrs.insert(id, addr.clone());
        self.extra.entry(id).or_default().push("--join".into());
        let running = app::start(self.config(id)?, listener).await?;
        self.running.insert(id, running);
        Ok(addr)
    }

    /// Kills node `id` and deletes its data, as a lost disk would; returns its address.
    pub async fn wipe(&mut self, id: u64) -> anyhow::Result<String> {
        self.kill(id).await;
        std::fs::remove_dir_all(self.data_dir(id))?;
        self.addrs
            .remove(&id)
            .ok_or_else(|| anyhow::anyhow!("no node {id}"))
    }

    /// Stops node `id` gracefully, as SIGTERM does (a leader hands leadership over first; the
    /// node keeps its data).
    pub async fn stop(&mut self, id: u64) {
        if let Some(running) = self.running.remove(&id) {
            running.shutdown().await;
        }
    }

    /// Stops every node gracefully, without handing leadership from one to the next.
    pub async fn shutdown(mut self) {
        for (_, running) in std::mem::take(&mut self.running) {
            running.shutdown_in_place().await;
        }
    }
}

impl InProcessCluster {
    /// The leases node `id` has committed on `resource`, as (holder, fencing token).
    pub fn local_leases(&self, id: u64, resource: &str) -> Vec<(String, u64)> {
        let applied = self.node(id).sm.read();
        applied
            .state
            .resource_view(resource)
            .leases
            .iter()
            .map(|l| (l.lease.holder.to_string(), l.lease.fencing_token))
            .collect()
    }

    /// The index node `id` has applied up to.
    pub fn applied_index(&self, id: u64) -> u64 {
        self.node(id)
            .sm
            .read()
            .last_applied
            .map_or(0, |log_id| log_id.index)
    }

    /// Resolves once node `id` has applied at least `index`.
    pub async fn applied_at_least(&self, id: u64, index: u64) {
        let mut applied = self.node(id).sm.subscribe();
        let _ = applied.wait_for(|i| *i >= index).await;
    }

    /// Resolves at the first applied entry after which node `id` shows no lease on `resource`.
    pub async fn freed_on(&self, id: u64, resource: &str) -> tokio::time::Instant {
        let mut applied = self.node(id).sm.subscribe();
        while !self.local_leases(id, resource).is_empty() {
            if applied.changed().await.is_err() {
                break;
            }
        }
        tokio::time::Instant::now()
    }
}

impl scenario::Cluster for InProcessCluster {
    fn client(&self) -> Client {
        InProcessCluster::client(self)
    }

    fn client_of(&self, id: u64) -> Client {
        InProcessCluster::client_of(self, id)
    }

    fn live_ids(&self) -> Vec<u64> {
        InProcessCluster::live_ids(self)
    }

    async fn leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        InProcessCluster::leader(self, timeout).await
    }

    async fn crash(&mut self, id: u64) {
        self.kill(id).await;
    }

    async fn until_free(&self, resource: &str) {
        // A linearizable read first, so the survivor has applied the grant.
        let _ = crate::get_resource(&InProcessCluster::client(self), resource).await;
        let id = self.live_ids()[0];
        self.freed_on(id, resource).await;
    }

    fn describe(&self, id: u64) -> String {
        format!("in-process node {id} at {}", self.addrs[&id])
    }
}
