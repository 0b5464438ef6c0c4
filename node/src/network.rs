//! Node-to-node transport: openraft's RPCs and follower-to-leader forwarding, over one cached
//! tonic `Channel` per peer address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tenure_proto::raft::v1::raft_client::RaftClient;
use tenure_proto::raft::v1::RaftBytes;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::store::codec::{self, CodecError, Wire};
use crate::store::{NodeId, TypeConfig};

/// Raft bodies carry snapshots; allow far more than the client API's 4 MiB.
pub const PEER_MESSAGE_LIMIT: usize = 256 * 1024 * 1024;

/// Puts this node's peer token (auth on) on every call to another node.
#[derive(Clone, Default)]
pub struct PeerAuth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for PeerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

pub type PeerClient = RaftClient<InterceptedService<Channel, PeerAuth>>;

/// Cached peer channels, keyed by address. Cheap to clone.
#[derive(Clone, Default)]
pub struct Peers {
    channels: Arc<Mutex<HashMap<String, PeerClient>>>,
    auth: PeerAuth,
}

impl Peers {
    /// Peers reached with `peer_token` (None: auth is off).
    pub fn new(peer_token: Option<&str>) -> anyhow::Result<Self> {
        let auth = match peer_token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| anyhow::anyhow!("the peer token must be printable ASCII"))?,
            ),
            None => None,
        };
        Ok(Peers {
            channels: Arc::default(),
            auth: PeerAuth(auth),
        })
    }

    /// The client for `addr`, creating its channel on first use (connects lazily).
    pub fn client(&self, addr: &str) -> Result<PeerClient, tonic::transport::Error> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = channels.get(addr) {
            return Ok(client.clone());
        }
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
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

/// A peer message in the binary encoding (`store::codec`).
pub fn encode<T: Serialize>(value: &T) -> Result<RaftBytes, CodecError> {
    encode_as(Wire::Binary, value)
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
#[derive(Clone, Default)]
pub struct Network {
    pub peers: Peers,
}

pub struct PeerConnection {
    target: NodeId,
    addr: String,
    peers: Peers,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerConnection {
            target,
            addr: node.addr.clone(),
            peers: self.peers.clone(),
        }
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

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
        let mut client = self
            .peers
            .client(&self.addr)
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let body = encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut request = tonic::Request::new(body);
        request.set_timeout(option.hard_ttl());
        let reply = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = reply.map_err(|status| match status.code() {
            tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(&status)),
            _ => RPCError::Network(NetworkError::new(&status)),
        })?;
        let (result, _): (Result<Resp, RaftError<NodeId, E>>, _) =
            decode(reply.get_ref()).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
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
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        self.call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(Method::Vote, &rpc, &option).await
    }
}
