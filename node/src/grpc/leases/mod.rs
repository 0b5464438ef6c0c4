//! `tenure.v1.Leases`: validate, propose or read through the leader, map the reply. The
//! caller is known before the body is read (`grpc::gate` checked the token from the headers);
//! SPEC §3's order of the checks that need the body starts here with the arguments;
//! existence, permission, token, state and policy are the state machine's.

use std::sync::Arc;

use tenure_proto::v1 as pb;
use tenure_proto::v1::leases_server::Leases;
use tonic::{Request, Response, Status, Streaming};

use super::convert::{booking_reply, lease_reply, session_reply, unexpected};
use super::{convert, validate};
use crate::auth::Caller;
use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::{Answer, BookOp, Op, Query, Reply, SessionAcquireOp};

mod calls;

pub struct LeasesApi {
    pub node: Arc<Node>,
}

#[tonic::async_trait]
impl Leases for LeasesApi {
    async fn create_resource(
        &self,
        request: Request<pb::CreateResourceRequest>,
    ) -> Result<Response<pb::CreateResourceResponse>, Status> {
        let req = request.get_ref();
        let op = validate::create_resource(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        match self
            .propose(caller, request_id, Op::CreateResource(op))
            .await?
        {
            Reply::Resource(view) => Ok(Response::new(pb::CreateResourceResponse {
                resource: Some(convert::resource(&view)),
            })),
            Reply::Rejected(rejection) => Err(ApiError::from(rejection).into()),
            other => Err(unexpected(other).into()),
        }
    }

    async fn get_resource(
        &self,
        request: Request<pb::GetResourceRequest>,
    ) -> Result<Response<pb::GetResourceResponse>, Status> {
        let (query, stale) = validate::get_resource(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::Resource(view), read_revision) => Ok(Response::new(pb::GetResourceResponse {
                resource: Some(convert::resource(&view)),
                read_revision,
                stale,
            })),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    async fn list_resources(
        &self,
        request: Request<pb::ListResourcesRequest>,
    ) -> Result<Response<pb::ListResourcesResponse>, Status> {
        let (query, stale) = validate::list_resources(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::Resources { resources, next }, read_revision) => {
                Ok(Response::new(pb::ListResourcesResponse {
                    resources: resources.iter().map(convert::resource).collect(),
                    next_page_token: next.unwrap_or_default(),
                    read_revision,
                    stale,
                }))
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }

    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let req = request.get_ref();
        let op = validate::acquire(req)?;
        let session_id = match req.session_id.as_str() {
            "" => None,
            id => Some(validate::session_id(id)?),
        };
        if session_id.is_some() && op.ttl_ms.is_some() {
            return Err(ApiError::invalid(
                "ttl",
                "a lease on a session lives while its session lives: leave ttl unset",
            )
            .into());
        }
        let request_id = validate::request_id(&req.request_id)?;
        let op = match session_id {
            None => Op::Acquire(op),
            Some(session_id) => Op::AcquireOnSession(SessionAcquireOp {
                session_id,
                acquire: op,
            }),
        };
        let reply = self.propose_acquire(&request, request_id, op).await?;
        match reply {
            Reply::Acquire(outcome) => Ok(Response::new(pb::AcquireResponse {
                granted: outcome.granted,
                lease: outcome.lease.as_ref().map(convert::lease),
                reason: outcome
                    .refusal
                    .map(|r| r.reason().to_string())
                    .unwrap_or_default(),
                holders: outcome.holders.iter().map(convert::lease).collect(),
                queue_position: outcome.queue_position,
                booked_from: convert::booked_from(outcome.refusal),
                closed_until: outcome.closed_until_wall_ms.map(convert::timestamp),
            })),
            Reply::Rejected(rejection) => Err(ApiError::from(rejection).into()),
            other => Err(unexpected(other).into()),
        }
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        let req = request.get_ref();
        let op = validate::renew(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        let reply = self.propose(caller, request_id, op).await?;
        Ok(Response::new(pb::RenewResponse {
            lease: Some(lease_reply(reply)?),
        }))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let req = request.get_ref();
        let op = validate::release(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        let reply = self.propose(caller, request_id, Op::Release(op)).await?;
        Ok(Response::new(pb::ReleaseResponse {
            lease: Some(lease_reply(reply)?),
        }))
    }

    async fn transfer(
        &self,
        request: Request<pb::TransferRequest>,
    ) -> Result<Response<pb::TransferResponse>, Status> {
        let req = request.get_ref();
        let op = validate::transfer(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        // A lease handed to a principal nobody can call as would count against no one's
        // quota, and one handed to the nodes' principal could never be used: only client and
        // admin principals of the token file receive leases.
        if let Some(to) = op.to_principal.as_deref() {
            if !self.node.auth().may_hold(to) {
                return Err(ApiError::invalid(
                    "to_principal",
                    format!("{to} is not a client or admin principal of this cluster's token file"),
                )
                .into());
            }
        }
        let reply = self.propose(caller, request_id, Op::Transfer(op)).await?;
        Ok(Response::new(pb::TransferResponse {
            lease: Some(lease_reply(reply)?),
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        let (query, stale) = validate::validate(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::Validate(v), read_revision) => Ok(Response::new(pb::ValidateResponse {
                valid: v.valid,
                reason: v.reason,
                lease: v.lease.as_ref().map(convert::lease),
                read_revision,
                stale,
            })),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    async fn list_leases(
        &self,
        request: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        let (query, stale) = validate::list_leases(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::Leases { leases, next }, read_revision) => {
                Ok(Response::new(pb::ListLeasesResponse {
                    leases: leases.iter().map(convert::lease).collect(),
                    next_page_token: next
                        .map(|(r, l)| validate::lease_page_token(&r, &l))
                        .unwrap_or_default(),
                    read_revision,
                    stale,
                }))
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }

    async fn cancel_wait(
        &self,
        request: Request<pb::CancelWaitRequest>,
    ) -> Result<Response<pb::CancelWaitResponse>, Status> {
        let req = request.get_ref();
        let op = validate::cancel_wait(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        match self.propose(caller, request_id, Op::CancelWait(op)).await? {
            Reply::Cancelled {
                cancelled,
                revision,
            } => Ok(Response::new(pb::CancelWaitResponse {
                cancelled,
                revision,
            })),
            Reply::Rejected(rejection) => Err(ApiError::from(rejection).into()),
            other => Err(unexpected(other).into()),
        }
    }

    async fn book(
        &self,
        request: Request<pb::BookRequest>,
    ) -> Result<Response<pb::BookResponse>, Status> {
        let req = request.get_ref();
        let op = BookOp {
            ad_hoc_bookable: self.node.config.ad_hoc_bookable,
            ..validate::book(req)?
        };
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        let resource = op.resource.clone();
        let reply = self.propose(caller, request_id, Op::Book(op)).await?;
        Ok(Response::new(pb::BookResponse {
            booking: Some(booking_reply(&resource, reply)?),
        }))
    }

    async fn cancel_booking(
        &self,
        request: Request<pb::CancelBookingRequest>,
    ) -> Result<Response<pb::CancelBookingResponse>, Status> {
        let req = request.get_ref();
        let op = validate::cancel_booking(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        let caller = self.caller(&request)?;
        let resource = op.resource.clone();
        let reply = self
            .propose(caller, request_id, Op::CancelBooking(op))
            .await?;
        Ok(Response::new(pb::CancelBookingResponse {
            booking: Some(booking_reply(&resource, reply)?),
        }))
    }

    type WatchStream = super::watch::WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = self.caller(&request)?;
        let spec = validate::watch(request.get_ref())?;
        let open_stream = self.node.enter_stream(&caller)?;
        let open_stream =
            self.node
                .open_stream_of(&caller, crate::lease::quota::Quota::Watches, open_stream)?;
        // A watch of every resource reads every event: an admin's, or one a quota allows.
        let open_stream = match &spec.scope {
            crate::lease::Scope::Prefix(prefix) if prefix.is_empty() => self.node.open_stream_of(
                &caller,
                crate::lease::quota::Quota::AllResourceWatches,
                open_stream,
            )?,
            _ => open_stream,
        };
        let credential = crate::auth::credential_in(request.extensions());
        Ok(Response::new(super::watch::start(
            self.node.clone(),
            spec,
            (open_stream, credential, &caller.principal),
        )))
    }

    type KeepAliveStream = super::keepalive::KeepAliveStream;

    async fn keep_alive(
        &self,
        request: Request<Streaming<pb::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        super::keepalive::keep_alive(&self.node, request).await
    }

    type ServeStream = super::owner::ServeStream;

    async fn serve(
        &self,
        request: Request<Streaming<pb::ServeRequest>>,
    ) -> Result<Response<Self::ServeStream>, Status> {
        super::owner::serve(&self.node, request).await
    }

    async fn forward(
        &self,
        request: Request<pb::ForwardRequest>,
    ) -> Result<Response<pb::ForwardResponse>, Status> {
        super::owner::forward(&self.node, request).await
    }

    async fn acquire_many(
        &self,
        request: Request<pb::AcquireManyRequest>,
    ) -> Result<Response<pb::AcquireManyResponse>, Status> {
        let req = request.get_ref();
        let op = validate::acquire_many(req)?;
        let request_id = validate::request_id(&req.request_id)?;
        match self
            .propose_acquire(&request, request_id, Op::AcquireMany(op))
            .await?
        {
            Reply::Many(outcome) => Ok(Response::new(convert::acquire_many(&outcome))),
            Reply::Rejected(rejection) => Err(ApiError::from(rejection).into()),
            other => Err(unexpected(other).into()),
        }
    }

    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::SessionResponse>, Status> {
        let req = request.get_ref();
        let op = Op::CreateSession(validate::create_session(req)?);
        self.session_write(&request, &req.request_id, op).await
    }

    async fn renew_session(
        &self,
        request: Request<pb::RenewSessionRequest>,
    ) -> Result<Response<pb::SessionResponse>, Status> {
        let req = request.get_ref();
        let op = Op::RenewSession(validate::renew_session(req)?);
        self.session_write(&request, &req.request_id, op).await
    }

    async fn close_session(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::SessionResponse>, Status> {
        let req = request.get_ref();
        let op = Op::CloseSession(validate::close_session(req)?);
        self.session_write(&request, &req.request_id, op).await
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::SessionResponse>, Status> {
        let (query, stale) = validate::get_session(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::Session(view), read_revision) => Ok(Response::new(pb::SessionResponse {
                session: Some(convert::session(&view)),
                read_revision,
                stale,
            })),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let (query, stale) = validate::list_sessions(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::Sessions { sessions, next }, read_revision) => {
                Ok(Response::new(pb::ListSessionsResponse {
                    sessions: sessions.iter().map(convert::session).collect(),
                    next_page_token: next
                        .map(crate::lease::session::session_name)
                        .unwrap_or_default(),
                    read_revision,
                    stale,
                }))
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }

    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let resource = request.get_ref().resource.clone();
        let (query, stale) = validate::history(request.get_ref())?;
        match self.read(&request, (query, stale)).await? {
            (Answer::History { events, next }, read_revision) => {
                Ok(Response::new(pb::HistoryResponse {
                    entries: events
                        .iter()
                        .map(|e| convert::history_entry(&resource, e))
                        .collect(),
                    next_page_token: next.map(validate::history_page_token).unwrap_or_default(),
                    read_revision,
                    stale,
                }))
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }
}
