//! The cluster's RPCs as [`Client`]'s methods: the `Leases` service, the `Cluster` service
//! and gRPC health. Each write gets a `request_id` when it has none, reused on its retries.

use std::time::Duration;

use tenure_proto::contract::DEFAULT_WAIT_TIMEOUT;
use tenure_proto::v1 as pb;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::leases_client::LeasesClient;
use tokio::time::Instant;

use super::Client;
use crate::error::Error;

/// One `Leases` RPC with retries and the leader hint, until `deadline`.
macro_rules! leases_call {
    ($client:expr, $deadline:expr, $request:expr, $method:ident) => {
        $client
            .call($deadline, |channel, left| {
                let request = $client.request($request.clone(), left);
                async move { LeasesClient::new(channel).$method(request).await }
            })
            .await
    };
}

/// One `Cluster` RPC with retries and the leader hint, until `deadline`.
macro_rules! cluster_call {
    ($client:expr, $deadline:expr, $request:expr, $method:ident) => {
        $client
            .call($deadline, |channel, left| {
                let request = $client.request($request.clone(), left);
                async move { ClusterClient::new(channel).$method(request).await }
            })
            .await
    };
}

impl Client {
    /// `Acquire`. Sets a `request_id` when the request has none. With `on_conflict = WAIT`
    /// the call blocks until the log decides the wait, so its deadline is the request's
    /// `wait_timeout` (60 s when unset) plus the client's timeout; a retry after a lost
    /// connection rejoins the same wait (same `request_id`).
    pub async fn acquire(
        &self,
        mut request: pb::AcquireRequest,
    ) -> Result<pb::AcquireResponse, Error> {
        ensure_request_id(&mut request.request_id);
        let deadline = self.wait_deadline(request.on_conflict, request.wait_timeout.as_ref());
        leases_call!(self, deadline, request, acquire)
    }

    /// `AcquireMany` (SPEC §4.25): every claim in one entry, or none. Sets a `request_id`
    /// when the request has none; with `on_conflict = WAIT` it blocks, as [`Client::acquire`]
    /// does, until the log admits it in every room or its wait ends.
    pub async fn acquire_many(
        &self,
        mut request: pb::AcquireManyRequest,
    ) -> Result<pb::AcquireManyResponse, Error> {
        ensure_request_id(&mut request.request_id);
        let deadline = self.wait_deadline(request.on_conflict, request.wait_timeout.as_ref());
        leases_call!(self, deadline, request, acquire_many)
    }

    /// An acquire's deadline: with `WAIT`, its `wait_timeout` (60 s when unset) on top of the
    /// client's timeout.
    fn wait_deadline(
        &self,
        on_conflict: i32,
        wait_timeout: Option<&prost_types::Duration>,
    ) -> Instant {
        if on_conflict != pb::OnConflict::Wait as i32 {
            return self.deadline();
        }
        let wait = wait_timeout
            .map(crate::lease::from_prost_duration)
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_WAIT_TIMEOUT);
        self.deadline() + wait
    }

    /// `CancelWait`: removes `holder`'s entry from the resource's waiting room.
    pub async fn cancel_wait(
        &self,
        mut request: pb::CancelWaitRequest,
    ) -> Result<pb::CancelWaitResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, cancel_wait)
    }

    /// `Book`: reserves a future window. Sets a `request_id` when the request has none.
    pub async fn book(&self, mut request: pb::BookRequest) -> Result<pb::BookResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, book)
    }

    /// `CancelBooking`. Sets a `request_id` when the request has none.
    pub async fn cancel_booking(
        &self,
        mut request: pb::CancelBookingRequest,
    ) -> Result<pb::CancelBookingResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, cancel_booking)
    }

    /// `Watch`: opens the event stream on the first endpoint that answers. The stream has no
    /// deadline; to resume after it ends, watch again from the last `revision` received.
    pub async fn watch(
        &self,
        request: pb::WatchRequest,
    ) -> Result<tonic::Streaming<pb::WatchResponse>, Error> {
        self.open_stream(|channel| {
            let call = self.authorized(request.clone());
            async move { LeasesClient::new(channel).watch(call).await }
        })
        .await
    }

    /// `Renew`. Sets a `request_id` when the request has none.
    pub async fn renew(&self, mut request: pb::RenewRequest) -> Result<pb::RenewResponse, Error> {
        ensure_request_id(&mut request.request_id);
        self.renew_until(request, self.deadline()).await
    }

    pub(crate) async fn renew_until(
        &self,
        request: pb::RenewRequest,
        deadline: Instant,
    ) -> Result<pb::RenewResponse, Error> {
        leases_call!(self, deadline, request, renew)
    }

    /// `Release`. Sets a `request_id` when the request has none.
    pub async fn release(
        &self,
        mut request: pb::ReleaseRequest,
    ) -> Result<pb::ReleaseResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, release)
    }

    /// `CreateSession` (SPEC §4.24). Sets a `request_id` when the request has none, so a
    /// retry after a lost connection gets the same session.
    pub async fn create_session(
        &self,
        mut request: pb::CreateSessionRequest,
    ) -> Result<pb::SessionResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, create_session)
    }

    /// `RenewSession`: renews the session and every lease and wait on it.
    pub async fn renew_session(&self, session_id: &str) -> Result<pb::SessionResponse, Error> {
        self.renew_session_until(session_id, self.deadline()).await
    }

    pub(crate) async fn renew_session_until(
        &self,
        session_id: &str,
        deadline: Instant,
    ) -> Result<pb::SessionResponse, Error> {
        let request = pb::RenewSessionRequest {
            session_id: session_id.to_string(),
            request_id: String::new(),
        };
        leases_call!(self, deadline, request, renew_session)
    }

    /// `CloseSession`: releases every lease on the session and cancels its waits, at once.
    pub async fn close_session(&self, session_id: &str) -> Result<pb::SessionResponse, Error> {
        self.close_session_with(pb::CloseSessionRequest {
            session_id: session_id.to_string(),
            request_id: String::new(),
        })
        .await
    }

    /// `CloseSession` as sent. Sets a `request_id` when the request has none.
    pub async fn close_session_with(
        &self,
        mut request: pb::CloseSessionRequest,
    ) -> Result<pb::SessionResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, close_session)
    }

    /// `GetSession`: a live session and its first leases.
    pub async fn get_session(
        &self,
        request: pb::GetSessionRequest,
    ) -> Result<pb::SessionResponse, Error> {
        leases_call!(self, self.deadline(), request, get_session)
    }

    /// `ListSessions`: live sessions of a principal and/or holder, a page at a time.
    pub async fn list_sessions(
        &self,
        request: pb::ListSessionsRequest,
    ) -> Result<pb::ListSessionsResponse, Error> {
        leases_call!(self, self.deadline(), request, list_sessions)
    }

    /// `Validate`: whether a fencing token (or lease id) is the resource's live tenure
    /// (SPEC §4.10). A well-formed request is always answered: branch on `valid`.
    pub async fn validate(
        &self,
        request: pb::ValidateRequest,
    ) -> Result<pb::ValidateResponse, Error> {
        leases_call!(self, self.deadline(), request, validate)
    }

    /// `GetResource`: a resource's policy and live leases, as of `read_revision`. A name the
    /// cluster does not know answers with the ad-hoc policy and `ad_hoc = true`.
    pub async fn get_resource(
        &self,
        request: pb::GetResourceRequest,
    ) -> Result<pb::GetResourceResponse, Error> {
        leases_call!(self, self.deadline(), request, get_resource)
    }

    /// `CreateResource` (admin only). Sets a `request_id` when the request has none.
    pub async fn create_resource(
        &self,
        mut request: pb::CreateResourceRequest,
    ) -> Result<pb::CreateResourceResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, create_resource)
    }

    /// `ListResources`: one page of resources in name order; ask again with
    /// `next_page_token` until it comes back empty.
    pub async fn list_resources(
        &self,
        request: pb::ListResourcesRequest,
    ) -> Result<pb::ListResourcesResponse, Error> {
        leases_call!(self, self.deadline(), request, list_resources)
    }

    /// `Transfer`. Sets a `request_id` when the request has none.
    pub async fn transfer(
        &self,
        mut request: pb::TransferRequest,
    ) -> Result<pb::TransferResponse, Error> {
        ensure_request_id(&mut request.request_id);
        leases_call!(self, self.deadline(), request, transfer)
    }

    /// `ListLeases`: one page of the live leases of a holder and/or a principal (how a
    /// restarted process finds what it holds); page on with `next_page_token`.
    pub async fn list_leases(
        &self,
        request: pb::ListLeasesRequest,
    ) -> Result<pb::ListLeasesResponse, Error> {
        leases_call!(self, self.deadline(), request, list_leases)
    }

    /// `History`: one page of a resource's events, newest first unless `order` says
    /// otherwise. Paging ascending past what retention dropped is `compacted`.
    pub async fn history(&self, request: pb::HistoryRequest) -> Result<pb::HistoryResponse, Error> {
        leases_call!(self, self.deadline(), request, history)
    }

    /// `Cluster.Status` of the node at `endpoint` (an index into the endpoint list).
    pub async fn node_status(&self, endpoint: usize) -> Result<pb::StatusResponse, Error> {
        let channel = self.channel_of(endpoint)?;
        let request = self.request(pb::StatusRequest {}, self.inner.timeout);
        Ok(ClusterClient::new(channel)
            .status(request)
            .await?
            .into_inner())
    }

    /// `Cluster.AddLearner`: adds node `id` (started with `--join`) at `addr` as a learner;
    /// with `wait`, answers once it has caught up (or says it has not).
    pub async fn add_learner(
        &self,
        id: u64,
        addr: &str,
        wait: bool,
    ) -> Result<pb::MembershipResponse, Error> {
        let request = pb::AddLearnerRequest {
            id,
            addr: addr.to_string(),
            wait,
        };
        cluster_call!(self, self.deadline(), request, add_learner)
    }

    /// `Cluster.ChangeMembership`: promotes learners to voters and removes members, in one
    /// change.
    pub async fn change_membership(
        &self,
        promote: Vec<u64>,
        remove: Vec<u64>,
    ) -> Result<pb::MembershipResponse, Error> {
        let request = pb::ChangeMembershipRequest { promote, remove };
        cluster_call!(self, self.deadline(), request, change_membership)
    }

    /// `Cluster.TransferLeader` (best effort) to voter `to` (0: the most up-to-date one).
    pub async fn transfer_leader(&self, to: u64) -> Result<pb::TransferLeaderResponse, Error> {
        let request = pb::TransferLeaderRequest { to };
        cluster_call!(self, self.deadline(), request, transfer_leader)
    }

    /// `Cluster.SetQuota` (admin): changes the limits of `principal` (empty: the defaults of
    /// every principal). Exactly-once, like lease writes.
    pub async fn set_quota(
        &self,
        mut request: pb::SetQuotaRequest,
    ) -> Result<pb::QuotaResponse, Error> {
        ensure_request_id(&mut request.request_id);
        cluster_call!(self, self.deadline(), request, set_quota)
    }

    /// `Cluster.GetQuota` (admin): the limits of `principal` (empty: the defaults) and what it
    /// holds, as the answering node counts it.
    pub async fn get_quota(&self, principal: &str) -> Result<pb::QuotaResponse, Error> {
        let request = pb::GetQuotaRequest {
            principal: principal.to_string(),
        };
        cluster_call!(self, self.deadline(), request, get_quota)
    }

    /// `grpc.health.v1` of the node at `endpoint`: true while it is SERVING (it knows a
    /// leader). Needs no token.
    pub async fn node_serving(&self, endpoint: usize) -> Result<bool, Error> {
        use tonic_health::pb::health_check_response::ServingStatus;
        let channel = self.channel_of(endpoint)?;
        let request = self.request(
            tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            },
            self.inner.timeout,
        );
        let status = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(request)
            .await?
            .into_inner()
            .status();
        Ok(status == ServingStatus::Serving)
    }

    /// `Cluster.Snapshot` on the node at `endpoint` (an index into the endpoint list). A
    /// large state takes seconds, so the deadline is at least two minutes.
    /// With `backup`, the node also writes the whole state to a backup file of its own.
    pub async fn node_snapshot(
        &self,
        endpoint: usize,
        backup: bool,
    ) -> Result<pb::SnapshotResponse, Error> {
        let channel = self.channel_of(endpoint)?;
        let limit = self.inner.timeout.max(Duration::from_secs(120));
        let request = self.request(pb::SnapshotRequest { backup }, limit);
        Ok(ClusterClient::new(channel)
            .snapshot(request)
            .await?
            .into_inner())
    }
}

fn ensure_request_id(request_id: &mut String) {
    if request_id.is_empty() {
        *request_id = uuid::Uuid::new_v4().to_string();
    }
}
