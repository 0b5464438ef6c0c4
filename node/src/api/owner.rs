//! Forward to owner (SPEC §4.9): the exclusive holder's `Serve` inbox and `Forward` from any
//! client. Work in progress: both answer `unimplemented` until the inbox lands.

use std::pin::Pin;
use std::sync::Arc;

use tenure_proto::v1 as pb;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::app::Node;

pub type ServeStream = Pin<Box<dyn Stream<Item = Result<pb::ServeResponse, Status>> + Send>>;

pub async fn serve(
    _node: &Arc<Node>,
    _request: Request<Streaming<pb::ServeRequest>>,
) -> Result<Response<ServeStream>, Status> {
    Err(Status::unimplemented("Serve is not available yet"))
}

pub async fn forward(
    _node: &Arc<Node>,
    _request: Request<pb::ForwardRequest>,
) -> Result<Response<pb::ForwardResponse>, Status> {
    Err(Status::unimplemented("Forward is not available yet"))
}
