//! The internal `tenure.raft.v1.Raft` service: openraft's RPCs, calls handed over by
//! followers, deliveries to owner inboxes (`grpc::owner`), and (fault-injection builds only)
//! clock control.

use std::sync::Arc;

use tenure_proto::raft::v1::raft_server::Raft;
use tenure_proto::raft::v1::{
    DeliverRequest, DeliverResponse, FindInboxRequest, FindInboxResponse, RaftBytes,
};
use tonic::{Request, Response, Status};

use crate::coord::forward::ReadRequest;
use crate::coord::membership::AdminRequest;
use crate::coord::unstamped::Unstamped;
use crate::coord::Node;
use crate::grpc::validate::MAX_KEY_BYTES;
use crate::lease::unencoded::Unencoded;
use crate::lease::Op;
use crate::network::carried::{self, Carried};
use crate::network::{decode, encode_as, TARGET_HEADER, UNDECODABLE};
use crate::store::codec::Wire;
use crate::store::TypeConfig;

pub struct RaftApi {
    pub node: Arc<Node>,
}

impl RaftApi {
    /// Decodes a call's body once its caller proved to be a peer (auth on: the peer token).
    fn body<T: serde::de::DeserializeOwned>(
        &self,
        request: &Request<RaftBytes>,
    ) -> Result<(T, Wire), Status> {
        self.addressed(request)?;
        decode(request.get_ref())
            .map_err(|e| Status::invalid_argument(format!("{UNDECODABLE}: {e}")))
    }

    /// The body of a leader's call (entries, a snapshot), once it is known to be addressed
    /// here and to carry nothing above this node's rules ([`RaftApi::within_rules`]).
    fn leaders_body<T: serde::de::DeserializeOwned>(
        &self,
        request: &Request<RaftBytes>,
    ) -> Result<(T, Wire), Status> {
        self.addressed(request)?;
        self.within_rules(request)?;
        decode(request.get_ref())
            .map_err(|e| Status::invalid_argument(format!("{UNDECODABLE}: {e}")))
    }

    /// Refuses a call unless its caller proved to be a peer (auth on: the peer token) and it
    /// is meant for this node.
    fn addressed(&self, request: &Request<RaftBytes>) -> Result<(), Status> {
        crate::auth::peer_of(request)?;
        if let Some(to) = request.metadata().get(TARGET_HEADER) {
            if to.to_str().ok() != Some(self.node.id.to_string().as_str()) {
                // UNAVAILABLE: the sender backs off as from an unreachable node, where any
                // other refusal would have openraft resend at once.
                return Err(Status::unavailable(format!(
                    "this is node {}, not node {}: the address now belongs to another node",
                    self.node.id,
                    to.to_str().unwrap_or("?")
                )));
            }
        }
        Ok(())
    }
}

impl RaftApi {
    /// An answer to one of openraft's calls, with this node's rules range: the leader learns
    /// from it what every member applies (`crate::rules`).
    fn announced(
        &self,
        answer: Result<Response<RaftBytes>, Status>,
    ) -> Result<Response<RaftBytes>, Status> {
        let mut answer = answer?;
        answer
            .metadata_mut()
            .insert(crate::rules::HEADER, self.node.rules_header.clone());
        Ok(answer)
    }

    /// Refuses, before decoding it, a leader's call whose state runs rules above this node's
    /// range: what it carries may not decode here, and could never apply. This node stops.
    fn within_rules(&self, request: &Request<RaftBytes>) -> Result<(), Status> {
        let Some(cluster) = request
            .metadata()
            .get(crate::rules::CLUSTER_HEADER)
            .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
        else {
            return Ok(());
        };
        let max = self.node.sm.max_rules();
        if cluster <= max {
            self.node
                .rules_heard
                .fetch_max(cluster, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        let why = crate::store::state_machine::above_rules("the cluster", cluster, max);
        if self.node.sm.halted().is_none() {
            let _ = self.node.sm.halt(why.clone());
            // As a halt in apply does: Raft stops, so that this node, which can take no
            // entry, does not campaign with ever higher terms and unseat the leader.
            let raft = self.node.raft.clone();
            tokio::spawn(async move {
                let _ = raft.shutdown().await;
            });
        }
        Err(Status::failed_precondition(why))
    }
}

/// Answers in the encoding the call came in, so a peer of an earlier release understands.
fn reply<T: serde::Serialize>(wire: Wire, value: &T) -> Result<Response<RaftBytes>, Status> {
    encode_as(wire, value)
        .map(Response::new)
        .map_err(|e| Status::internal(format!("encoding a raft reply: {e}")))
}

/// A handed-over call's reply, with the parts its encoding leaves out when the caller reads them
/// (`network::carried`).
fn carried_reply<T: serde::Serialize + Unencoded>(
    wire: Wire,
    carries: bool,
    value: T,
) -> Result<Response<RaftBytes>, Status> {
    if !carries {
        return reply(wire, &value);
    }
    let mut response = reply(wire, &Carried::of(value))?;
    response.metadata_mut().insert(
        carried::CARRIES_HEADER,
        tonic::metadata::MetadataValue::from_static(carried::PARTS),
    );
    Ok(response)
}

#[tonic::async_trait]
impl Raft for RaftApi {
    async fn append_entries(
        &self,
        request: Request<RaftBytes>,
    ) -> Result<Response<RaftBytes>, Status> {
        let (body, wire) = self.leaders_body(&request)?;
        self.node.succession.heard_from_leader();
        self.announced(reply(wire, &self.node.raft.append_entries(body).await))
    }

    async fn vote(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let (body, wire) = self.body(&request)?;
        self.announced(reply(wire, &self.node.raft.vote(body).await))
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftBytes>,
    ) -> Result<Response<RaftBytes>, Status> {
        let (body, wire): (
            openraft_legacy::network_v1::InstallSnapshotRequest<TypeConfig>,
            _,
        ) = self.leaders_body(&request)?;
        // A damaged file is refused here: openraft stops a node whose install fails. The
        // leader sends it again, so a snapshot damaged in transit heals, and one damaged on the
        // leader's disk is never spread.
        let checked = self
            .node
            .receiving_snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .chunk(&body.meta.snapshot_id, body.offset, &body.data, body.done);
        if let Err(refused) = checked {
            crate::store::StorageStats::add(&self.node.sm.stats.snapshots_refused, 1);
            tracing::error!(snapshot = %body.meta.snapshot_id, "{refused}");
            return Err(Status::data_loss(refused));
        }
        use openraft_legacy::network_v1::ChunkedSnapshotReceiver;
        self.announced(reply(wire, &self.node.raft.install_snapshot(body).await))
    }

    async fn propose(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let carries = carried::carries(request.metadata());
        let (request, wire): (Unstamped<String, Op>, _) = self.body(&request)?;
        let request = request.into_proposal();
        // Only client commands are handed over; the leader proposes Tick and Reclaim itself.
        if matches!(
            request.op,
            Op::Tick | Op::Reclaim { .. } | Op::RaiseRules { .. }
        ) {
            return Err(Status::permission_denied(
                "only client commands may be forwarded",
            ));
        }
        if request
            .request_id
            .as_ref()
            .is_some_and(|id| id.len() > MAX_KEY_BYTES)
        {
            return Err(Status::invalid_argument("request_id too long"));
        }
        // The leader's log of a forwarded write names the write as the follower's does.
        crate::metrics::record_request_id(request.request_id.as_deref());
        carried_reply(wire, carries, self.node.propose_local(request).await)
    }

    async fn read(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let carries = carried::carries(request.metadata());
        let (request, wire): (ReadRequest, _) = self.body(&request)?;
        carried_reply(wire, carries, self.node.query_local(&request.query).await)
    }

    async fn admin(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let (request, wire): (AdminRequest, _) = self.body(&request)?;
        reply(wire, &self.node.admin_local(&request).await)
    }

    async fn find_inbox(
        &self,
        request: Request<FindInboxRequest>,
    ) -> Result<Response<FindInboxResponse>, Status> {
        crate::grpc::owner::find_inbox(&self.node, request)
    }

    async fn deliver(
        &self,
        request: Request<DeliverRequest>,
    ) -> Result<Response<DeliverResponse>, Status> {
        crate::grpc::owner::deliver(&self.node, request).await
    }

    async fn set_clock(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        #[cfg(feature = "fault-injection")]
        {
            let (skew, wire): (crate::coord::stamp_clock::ClockSkew, _) = self.body(&request)?;
            tracing::warn!(?skew, "fault injection: clocks changed");
            self.node.clock.apply_skew(skew);
            reply(wire, &())
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = request;
            Err(Status::permission_denied(
                "this build has no fault injection",
            ))
        }
    }
}
