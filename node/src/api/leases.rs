//! `tenure.v1.Leases`: validate, propose or read through the leader, map the reply.

use std::sync::Arc;

use tenure_proto::v1 as pb;
use tenure_proto::v1::leases_server::Leases;
use tonic::{Request, Response, Status};

use super::{convert, validate};
use crate::api::forward::ProposeRequest;
use crate::app::Node;
use crate::error::ApiError;
use crate::lease::{Answer, Op, Reply};

/// Every caller is this principal, with the admin role, until auth arrives (SPEC §6).
pub const ANONYMOUS: &str = "anonymous";

pub struct LeasesApi {
    pub node: Arc<Node>,
}

impl LeasesApi {
    /// Proposes `op`; a node that receives a call without a `request_id` assigns one, so its
    /// own retries across elections are exactly-once too.
    async fn propose(&self, request_id: &str, op: Op) -> Result<Reply, ApiError> {
        let request_id =
            validate::request_id(request_id)?.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let span = tracing::debug_span!("propose", request_id = %request_id);
        let _entered = span.enter();
        self.node
            .propose(ProposeRequest {
                principal: ANONYMOUS.into(),
                admin: true,
                request_id: Some(request_id),
                op,
            })
            .await
    }
}

fn lease_reply(reply: Reply) -> Result<pb::Lease, ApiError> {
    match reply {
        Reply::Lease(view) => Ok(convert::lease(&view)),
        Reply::Rejected(rejection) => Err(rejection.into()),
        other => Err(ApiError::Internal(format!("unexpected reply {other:?}"))),
    }
}

#[tonic::async_trait]
impl Leases for LeasesApi {
    async fn get_resource(
        &self,
        request: Request<pb::GetResourceRequest>,
    ) -> Result<Response<pb::GetResourceResponse>, Status> {
        let (query, stale) = validate::get_resource(request.get_ref())?;
        match self.node.query(query, stale).await? {
            (Answer::Resource(view), read_revision) => Ok(Response::new(pb::GetResourceResponse {
                resource: Some(convert::resource(&view)),
                read_revision,
                stale,
            })),
            (other, _) => Err(ApiError::Internal(format!("unexpected answer {other:?}")).into()),
        }
    }

    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let req = request.get_ref();
        let op = validate::acquire(req)?;
        match self.propose(&req.request_id, Op::Acquire(op)).await? {
            Reply::Acquire(outcome) => Ok(Response::new(pb::AcquireResponse {
                granted: outcome.granted,
                lease: outcome.lease.as_ref().map(convert::lease),
                reason: outcome
                    .refusal
                    .map(|r| r.reason().to_string())
                    .unwrap_or_default(),
                holders: outcome.holders.iter().map(convert::lease).collect(),
                queue_position: 0,
            })),
            Reply::Rejected(rejection) => Err(ApiError::from(rejection).into()),
            other => Err(ApiError::Internal(format!("unexpected reply {other:?}")).into()),
        }
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        let req = request.get_ref();
        let op = validate::renew(req)?;
        let lease = lease_reply(self.propose(&req.request_id, Op::Renew(op)).await?)?;
        Ok(Response::new(pb::RenewResponse { lease: Some(lease) }))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let req = request.get_ref();
        let op = validate::release(req)?;
        let lease = lease_reply(self.propose(&req.request_id, Op::Release(op)).await?)?;
        Ok(Response::new(pb::ReleaseResponse { lease: Some(lease) }))
    }

    async fn validate(
        &self,
        request: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        let (query, stale) = validate::validate(request.get_ref())?;
        match self.node.query(query, stale).await? {
            (Answer::Validate(v), _) => Ok(Response::new(pb::ValidateResponse {
                valid: v.valid,
                reason: v.reason,
                lease: v.lease.as_ref().map(convert::lease),
            })),
            (other, _) => Err(ApiError::Internal(format!("unexpected answer {other:?}")).into()),
        }
    }
}
