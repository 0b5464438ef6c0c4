//! The gateway calls the gRPC handlers themselves: the request it built, decoded as the
//! handler's message, with the caller the gate put in its extensions. No rule of the API has a
//! second implementation here.

use std::future::Future;
use std::sync::Arc;

use prost::Message;
use tenure_proto::v1::cluster_server::Cluster;
use tenure_proto::v1::leases_server::Leases;
use tonic::{Request, Response, Status};

use crate::coord::Node;
use crate::grpc::cluster::ClusterApi;
use crate::grpc::leases::LeasesApi;
use crate::grpc::watch::WatchStream;

/// The request `encoded` as `Req`, carrying `extensions`.
fn decoded<Req: Message + Default>(
    encoded: &[u8],
    extensions: http::Extensions,
) -> Result<Request<Req>, Status> {
    let message = Req::decode(encoded)
        .map_err(|e| Status::invalid_argument(format!("the request does not decode: {e}")))?;
    let mut request = Request::new(message);
    *request.extensions_mut() = extensions;
    Ok(request)
}

/// Runs one unary handler on the encoded request; its encoded reply.
async fn run<Req, Resp, F, Fut>(
    encoded: &[u8],
    extensions: http::Extensions,
    handler: F,
) -> Result<Vec<u8>, Status>
where
    Req: Message + Default,
    Resp: Message,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    let request = decoded(encoded, extensions)?;
    Ok(handler(request).await?.into_inner().encode_to_vec())
}

/// Calls `rpc` of `service` (a unary call of the route table) with the encoded request.
pub async fn unary(
    node: &Arc<Node>,
    service: &str,
    rpc: &str,
    encoded: &[u8],
    extensions: http::Extensions,
) -> Result<Vec<u8>, Status> {
    let leases = LeasesApi { node: node.clone() };
    let cluster = ClusterApi { node: node.clone() };
    macro_rules! call {
        ($api:ident . $method:ident) => {
            run(encoded, extensions, |r| async { $api.$method(r).await }).await
        };
    }
    match (service, rpc) {
        ("tenure.v1.Leases", "CreateResource") => call!(leases.create_resource),
        ("tenure.v1.Leases", "GetResource") => call!(leases.get_resource),
        ("tenure.v1.Leases", "ListResources") => call!(leases.list_resources),
        ("tenure.v1.Leases", "Acquire") => call!(leases.acquire),
        ("tenure.v1.Leases", "AcquireMany") => call!(leases.acquire_many),
        ("tenure.v1.Leases", "Renew") => call!(leases.renew),
        ("tenure.v1.Leases", "Release") => call!(leases.release),
        ("tenure.v1.Leases", "Transfer") => call!(leases.transfer),
        ("tenure.v1.Leases", "Validate") => call!(leases.validate),
        ("tenure.v1.Leases", "ListLeases") => call!(leases.list_leases),
        ("tenure.v1.Leases", "History") => call!(leases.history),
        ("tenure.v1.Leases", "CancelWait") => call!(leases.cancel_wait),
        ("tenure.v1.Leases", "Book") => call!(leases.book),
        ("tenure.v1.Leases", "CancelBooking") => call!(leases.cancel_booking),
        ("tenure.v1.Leases", "Forward") => call!(leases.forward),
        ("tenure.v1.Leases", "CreateSession") => call!(leases.create_session),
        ("tenure.v1.Leases", "RenewSession") => call!(leases.renew_session),
        ("tenure.v1.Leases", "CloseSession") => call!(leases.close_session),
        ("tenure.v1.Leases", "GetSession") => call!(leases.get_session),
        ("tenure.v1.Leases", "ListSessions") => call!(leases.list_sessions),
        ("tenure.v1.Cluster", "Status") => call!(cluster.status),
        ("tenure.v1.Cluster", "AddLearner") => call!(cluster.add_learner),
        ("tenure.v1.Cluster", "ChangeMembership") => call!(cluster.change_membership),
        ("tenure.v1.Cluster", "TransferLeader") => call!(cluster.transfer_leader),
        ("tenure.v1.Cluster", "Snapshot") => call!(cluster.snapshot),
        ("tenure.v1.Cluster", "SetQuota") => call!(cluster.set_quota),
        ("tenure.v1.Cluster", "GetQuota") => call!(cluster.get_quota),
        _ => Err(Status::unimplemented(format!(
            "{service}/{rpc} has no HTTP route"
        ))),
    }
}

/// Opens a `Watch` with the encoded request.
pub async fn watch(
    node: &Arc<Node>,
    encoded: &[u8],
    extensions: http::Extensions,
) -> Result<WatchStream, Status> {
    let leases = LeasesApi { node: node.clone() };
    let request = decoded(encoded, extensions)?;
    Ok(leases.watch(request).await?.into_inner())
}
