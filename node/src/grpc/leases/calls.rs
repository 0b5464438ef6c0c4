//! How a `Leases` call reaches the cluster: as its caller, proposed through the leader (a
//! `WAIT` acquire holding a place among the open streams while it waits), or read at the
//! consistency it asked for, paced by its principal's read rate.

use super::*;

impl LeasesApi {
    pub(super) fn caller<T>(&self, request: &Request<T>) -> Result<Caller, ApiError> {
        crate::auth::caller_of(request)
    }

    /// Proposes `op` as `caller`; a node that receives a call without a `request_id` assigns
    /// one, so its own retries across elections are exactly-once too.
    pub(super) async fn propose(
        &self,
        caller: Caller,
        request_id: Option<String>,
        op: Op,
    ) -> Result<Reply, ApiError> {
        let request_id = request_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        crate::metrics::record_request_id(Some(&request_id));
        let waits = crate::coord::wait::waits(&op);
        let request = self.node.proposal(caller, request_id, op);
        if waits {
            crate::coord::wait::acquire(&self.node, request).await
        } else {
            self.node.propose(request).await
        }
    }

    /// Proposes an acquire (of one resource or several) as the caller of `request`. A `WAIT`
    /// holds a place among the open streams instead of one in flight (its wait's, which a call
    /// that rejoins the wait shares), and ends as when its client goes away if a reload
    /// revokes the caller's token.
    pub(super) async fn propose_acquire<T>(
        &self,
        request: &Request<T>,
        request_id: Option<String>,
        op: Op,
    ) -> Result<Reply, ApiError> {
        let caller = self.caller(request)?;
        let wait = crate::coord::wait::wait_of(&op);
        let waits = wait.is_some();
        let _open_stream = match &wait {
            Some((resource, holder)) => {
                let open_stream = self.node.enter_wait(&caller, resource, holder)?;
                if let Some(in_flight) = request.extensions().get::<crate::limits::InFlight>() {
                    in_flight.release();
                }
                Some(open_stream)
            }
            None => None,
        };
        let proposed = self.propose(caller, request_id, op);
        let credential = crate::auth::credential_in(request.extensions()).filter(|_| waits);
        tokio::select! {
            reply = proposed => reply,
            () = self.node.revoked(credential) => Err(ApiError::revoked()),
        }
    }

    /// Authenticates, then answers a read; a rejection in the answer becomes the error.
    pub(super) async fn read<T>(
        &self,
        request: &Request<T>,
        (query, stale): (Query, bool),
    ) -> Result<(Answer, u64), ApiError> {
        crate::metrics::record_request_id(None);
        let caller = self.caller(request)?;
        if !caller.admin {
            self.node
                .read_pacer
                .admit(&caller.principal, query.items())
                .await;
        }
        match self.node.query(query, stale).await? {
            (Answer::Rejected(rejection), _) => Err(rejection.into()),
            answered => Ok(answered),
        }
    }

    /// Proposes a session write (`op`) as the caller of `request`, under `request_id`: the
    /// session as the entry left it.
    pub(super) async fn session_write<T>(
        &self,
        request: &Request<T>,
        request_id: &str,
        op: Op,
    ) -> Result<Response<pb::SessionResponse>, Status> {
        let request_id = validate::request_id(request_id)?;
        let caller = self.caller(request)?;
        let reply = self.propose(caller, request_id, op).await?;
        Ok(Response::new(pb::SessionResponse {
            session: Some(session_reply(reply)?),
            ..Default::default()
        }))
    }
}
