//! Node-to-node transport: openraft's RPCs and follower-to-leader forwarding, over one cached
//! tonic `Channel` per peer address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft::BasicNode;
use openraft_legacy::network_v1::{
    Adapter, InstallSnapshotError, InstallSnapshotRequest, InstallSnapshotResponse, RaftNetwork,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tenure_proto::raft::v1::raft_client::RaftClient;
use tenure_proto::raft::v1::RaftBytes;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

pub mod carried;
mod peer_health;

use peer_health::PeerHealth;

use crate::store::codec::{self, CodecError, Wire};
use crate::store::state_machine::Shared;
use crate::store::{NodeId, TypeConfig};

/// Raft bodies carry snapshots; allow far more than the client API's 4 MiB.
pub const PEER_MESSAGE_LIMIT: usize = 256 * 1024 * 1024;

/// Puts on every call to another node this node's peer token (auth on), its id and its
/// configuration digest (`crate::agreement`); a reload may change the digest.
#[derive(Clone, Default)]
pub struct PeerAuth(Arc<std::sync::RwLock<PeerHeaders>>);

#[derive(Default)]
struct PeerHeaders {
    authorization: Option<MetadataValue<Ascii>>,
    from: Option<MetadataValue<Ascii>>,
    digest: Option<MetadataValue<Ascii>>,
    /// This node's rules range (`crate::rules`).
    rules: Option<MetadataValue<Ascii>>,
    /// The rules version this node's state runs.
    cluster_rules: Option<MetadataValue<Ascii>>,
}

impl tonic::service::Interceptor for PeerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let headers = self.0.read().unwrap_or_else(|p| p.into_inner());
        let metadata = request.metadata_mut();
        metadata.insert(
            crate::agreement::PROTOCOL_HEADER,
            MetadataValue::from_static(crate::agreement::RAFT_PROTOCOL),
        );
        metadata.insert(
            carried::CARRIES_HEADER,
            MetadataValue::from_static(carried::PARTS),
        );
        for (name, value) in [
            ("authorization", &headers.authorization),
            (crate::agreement::FROM_HEADER, &headers.from),
            (crate::agreement::DIGEST_HEADER, &headers.digest),
            (crate::rules::HEADER, &headers.rules),
            (crate::rules::CLUSTER_HEADER, &headers.cluster_rules),
        ] {
            if let Some(value) = value {
                metadata.insert(name, value.clone());
            }
        }
        drop(headers);
        Ok(request)
    }
}

pub type PeerClient = RaftClient<InterceptedService<Channel, PeerAuth>>;

/// Cached peer channels, keyed by address. Cheap to clone.
#[derive(Clone, Default)]
pub struct Peers {
    channels: Arc<Mutex<HashMap<String, PeerClient>>>,
    auth: PeerAuth,
    /// Peers whose configuration digest differs from this node's, either way round.
    pub mismatches: Arc<crate::agreement::Mismatches>,
    /// Mutual TLS to peers (None: plain HTTP/2); a reload replaces it ([`Peers::set_tls`]).
    tls: Arc<Mutex<Option<tonic::transport::ClientTlsConfig>>>,
    /// Which peers do not answer Raft calls, for a log line per change, not per call.
    health: Arc<PeerHealth>,
    /// The rules range each peer announced in its answers (`crate::rules`).
    pub rules: Arc<crate::rules::Heard>,
}

/// The id of the node a Raft RPC is meant for. A node refuses RPCs meant for another id: a
/// process that took over a member's address (a wiped node restarted there under a new id)
/// must not answer for that member, or the leader would see the member's log vanish.
pub const TARGET_HEADER: &str = "tenure-raft-to";

/// How the Raft service refuses a body it cannot decode.
pub const UNDECODABLE: &str = "undecodable raft body";

/// Why a call to a peer got no answer body.
#[derive(Debug, thiserror::Error)]
pub enum PeerCallError {
    #[error("{0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("encoding the call: {0}")]
    Encode(#[from] CodecError),
    #[error("{0}")]
    Status(#[from] tonic::Status),
}

impl Peers {
    /// Peers reached with `peer_token` (None: auth is off), over `tls` (None: plain).
    pub fn new(
        peer_token: Option<&str>,
        tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> anyhow::Result<Self> {
        let auth = match peer_token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| anyhow::anyhow!("the peer token must be printable ASCII"))?,
            ),
            None => None,
        };
        let headers = PeerHeaders {
            authorization: auth,
            ..PeerHeaders::default()
        };
        Ok(Peers {
            channels: Arc::default(),
            auth: PeerAuth(Arc::new(std::sync::RwLock::new(headers))),
            mismatches: Arc::default(),
            tls: Arc::new(Mutex::new(tls)),
            health: Arc::default(),
            rules: Arc::default(),
        })
    }

    /// Names this node (`from`) and its configuration digest on every call from now on.
    pub fn identify(&self, from: NodeId, digest: &str) {
        let mut headers = self.auth.0.write().unwrap_or_else(|p| p.into_inner());
        headers.from = from.to_string().parse().ok();
        headers.digest = digest.parse().ok();
    }

    /// Announces this node's rules range on every call from now on.
    pub fn announce(&self, rules: crate::rules::Range) {
        let mut headers = self.auth.0.write().unwrap_or_else(|p| p.into_inner());
        headers.rules = rules.to_string().parse().ok();
    }

    /// Tells every peer called from now on that this node's state runs rules `version`.
    pub fn announce_cluster_rules(&self, version: u32) {
        let mut headers = self.auth.0.write().unwrap_or_else(|p| p.into_inner());
        headers.cluster_rules = Some(MetadataValue::from(version));
    }

    /// Sends `body` to `addr` through `send`, in the binary encoding.
    pub async fn call<T, F, Fut>(
        &self,
        addr: &str,
        body: &T,
        send: F,
    ) -> Result<tonic::Response<RaftBytes>, PeerCallError>
    where
        T: Serialize,
        F: Fn(PeerClient, RaftBytes) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<RaftBytes>, tonic::Status>>,
    {
        match send(self.client(addr)?, encode_as(Wire::Binary, body)?).await {
            Ok(reply) => Ok(reply),
            Err(status) => {
                self.note_refusal(addr, &status);
                Err(status.into())
            }
        }
    }

    /// A peer that refused this node's configuration digest is remembered (and logged once),
    /// with its own digest, for `Cluster.Status`.
    fn note_refusal(&self, addr: &str, status: &tonic::Status) {
        let Some(theirs) = status.metadata().get(crate::agreement::DIGEST_HEADER) else {
            return;
        };
        let theirs = theirs.to_str().unwrap_or("?");
        let peer = format!("the peer at {addr} (it refused this node)");
        if self.mismatches.record(&peer, theirs) {
            tracing::error!(
                peer = addr, their_digest = %theirs,
                "a peer refuses this node: its configuration (token file or --require-registration) differs"
            );
        }
    }

    /// Calls peers with `tls` from now on: the channels made with the old settings are
    /// dropped (calls under way on them finish).
    pub fn set_tls(&self, tls: tonic::transport::ClientTlsConfig) {
        *self.tls.lock().unwrap_or_else(|p| p.into_inner()) = Some(tls);
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The client for `addr`, creating its channel on first use (connects lazily).
    pub fn client(&self, addr: &str) -> Result<PeerClient, tonic::transport::Error> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = channels.get(addr) {
            return Ok(client.clone());
        }
        let tls = self.tls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))?;
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls)?;
        }
        let channel = endpoint
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(3))
            .keep_alive_while_idle(true)
            .connect_lazy();
        let client = RaftClient::with_interceptor(channel, self.auth.clone())
            .max_decoding_message_size(PEER_MESSAGE_LIMIT)
            .max_encoding_message_size(PEER_MESSAGE_LIMIT);
        channels.insert(addr.to_string(), client.clone());
        Ok(client)
    }
}

/// A peer message in `wire`: a reply goes in the encoding its request came in.
pub fn encode_as<T: Serialize>(wire: Wire, value: &T) -> Result<RaftBytes, CodecError> {
    Ok(RaftBytes {
        data: codec::to_bytes_as(wire, value)?,
    })
}

/// A peer message in either encoding, and which it was.
pub fn decode<T: DeserializeOwned>(bytes: &RaftBytes) -> Result<(T, Wire), CodecError> {
    codec::from_bytes(&bytes.data)
}

/// openraft's view of the cluster network.
#[derive(Clone)]
pub struct Network {
    pub peers: Peers,
    /// The state machine's: a snapshot is sent whole ([`Shared::whole_snapshot`]).
    pub snapshots: Arc<Shared>,
}

pub struct PeerConnection {
    target: NodeId,
    addr: String,
    peers: Peers,
    /// Told when the target refuses a snapshot chunk outright (a damaged snapshot): sending
    /// the same bytes again cannot succeed.
    refused: Arc<tokio::sync::Notify>,
}

/// openraft 0.10's network over the chunked snapshot transfer of 0.9 (our `Raft` service's
/// `InstallSnapshot`, whose chunks a follower checks as they come). openraft-legacy's sender
/// retries a chunk the target refused forever, with the same snapshot; here a refusal ends the
/// send as a network error instead, and openraft sends again from the newest snapshot (an
/// operator's `tenure cluster snapshot` replaces a damaged one).
pub struct PeerNetwork(
    Adapter<TypeConfig, PeerConnection, tokio::fs::File>,
    Arc<Shared>,
);

impl openraft::network::v2::RaftNetworkV2<TypeConfig> for PeerNetwork {
    type SnapshotData = tokio::fs::File;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.0.append_entries(rpc, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.0.vote(rpc, option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: openraft::type_config::alias::VoteOf<TypeConfig>,
        snapshot: openraft::type_config::alias::SnapshotOf<TypeConfig, tokio::fs::File>,
        cancel: impl std::future::Future<Output = openraft::error::ReplicationClosed>
            + openraft::OptionalSend
            + 'static,
        option: RPCOption,
    ) -> Result<
        openraft::raft::SnapshotResponse<TypeConfig>,
        openraft::error::StreamingError<TypeConfig>,
    > {
        let refused = self.0.inner().refused.clone();
        // A node keeps the live state alone in its file (from rules version 3): the archive
        // entries it reads are added to what is sent.
        let snapshot = (self.1.whole_to_send(snapshot).await)
            .map_err(|e| openraft::error::StreamingError::Network(NetworkError::new(&e)))?;
        tokio::select! {
            sent = self.0.full_snapshot(vote, snapshot, cancel, option) => sent,
            () = refused.notified() => Err(openraft::error::StreamingError::Network(
                NetworkError::new(&std::io::Error::other("the target refused the snapshot")),
            )),
        }
    }

    async fn transfer_leader(
        &mut self,
        rpc: openraft::raft::TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<openraft::raft::TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.0.transfer_leader(rpc, option).await
    }

    fn backoff(&self) -> Option<openraft::network::Backoff> {
        self.0.backoff()
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerNetwork(
            PeerConnection {
                target,
                addr: node.addr.clone(),
                peers: self.peers.clone(),
                refused: Arc::default(),
            }
            .into_v2(),
            self.snapshots.clone(),
        )
    }
}

type RpcResult<T, E> = Result<T, RPCError<TypeConfig, RaftError<TypeConfig, E>>>;

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &self,
        method: Method,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let timeout = option.hard_ttl();
        let target = MetadataValue::from(self.target);
        let send = |mut client: PeerClient, body| {
            let target = target.clone();
            async move {
                let mut request = tonic::Request::new(body);
                request.set_timeout(timeout);
                request.metadata_mut().insert(TARGET_HEADER, target);
                match method {
                    Method::AppendEntries => client.append_entries(request).await,
                    Method::Vote => client.vote(request).await,
                    Method::InstallSnapshot => client.install_snapshot(request).await,
                }
            }
        };
        let reply = self.peers.call(&self.addr, req, send).await.map(|reply| {
            // Every answer says which rules the peer applies; one of 0.1.0 says nothing.
            let announced = reply.metadata().get(crate::rules::HEADER);
            let range = crate::rules::Range::of_header(announced.map(|v| v.as_bytes()));
            self.peers.rules.record(self.target, range);
            reply.into_inner()
        });
        if reply.is_err() {
            self.peers.rules.forget(self.target);
        }
        let health = &self.peers.health;
        let report = match &reply {
            Ok(_) => health.answered(self.target, tokio::time::Instant::now()),
            Err(_) => health.failed(self.target, tokio::time::Instant::now()),
        };
        if let Some(report) = report {
            let error = reply.as_ref().err().map(|e| match e {
                PeerCallError::Status(status) => tenure_proto::describe(status),
                other => other.to_string(),
            });
            PeerHealth::log(self.target, &self.addr, report, error.as_deref());
        }
        if let (Method::InstallSnapshot, Err(PeerCallError::Status(status))) = (method, &reply) {
            if status.code() != tonic::Code::Unavailable {
                self.refused.notify_one();
            }
        }
        let reply = reply.map_err(|e| match e {
            PeerCallError::Status(status) if status.code() != tonic::Code::Unavailable => {
                RPCError::Network(NetworkError::new(&status))
            }
            PeerCallError::Encode(e) => RPCError::Network(NetworkError::new(&e)),
            unreachable => RPCError::Unreachable(Unreachable::new(&unreachable)),
        })?;
        let (result, _): (Result<Resp, RaftError<TypeConfig, E>>, _) =
            decode(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

#[derive(Clone, Copy)]
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<TypeConfig>, openraft::error::Infallible> {
        self.call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<TypeConfig>, InstallSnapshotError> {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<TypeConfig>, openraft::error::Infallible> {
        self.call(Method::Vote, &rpc, &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_refused_call_is_not_sent_again() {
        for message in [
            "request_id too long",
            "undecodable raft body: expected value",
        ] {
            let peers = Peers::new(None, None).expect("peers");
            let calls = AtomicUsize::new(0);
            let refuse = |_: PeerClient, body: RaftBytes| {
                calls.fetch_add(1, Ordering::SeqCst);
                assert!(
                    matches!(
                        codec::from_bytes::<String>(&body.data),
                        Ok((_, Wire::Binary))
                    ),
                    "every call is binary"
                );
                std::future::ready(Err(tonic::Status::invalid_argument(message)))
            };
            let err = peers
                .call("127.0.0.1:1", &"hello", refuse)
                .await
                .expect_err("refused");
            assert!(matches!(err, PeerCallError::Status(s) if s.message() == message));
            assert_eq!(calls.load(Ordering::SeqCst), 1, "{message}");
        }
    }
}
