//! The connection to a cluster: endpoints, the leader hint, deadlines and retries.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backon::Retryable;
use tenure_proto::contract::{Reason, LEADER_HEADER};
use tenure_proto::v1 as pb;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::leases_client::LeasesClient;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::error::Error;
use crate::retry;

/// The endpoints of `deploy/local-cluster.sh`'s three nodes, as a comma-separated list for
/// [`Client::from_list`]: the CLI's and the examples' default.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103";
pub use tenure_proto::contract::DEFAULT_WAIT_TIMEOUT;

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

/// TLS to nodes whose certificates `ca_pem` signed.
fn tls_to(ca_pem: &[u8]) -> ClientTlsConfig {
    ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem))
}

/// The endpoints as given, trimmed.
fn trimmed<I, S>(endpoints: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    endpoints
        .into_iter()
        .map(|e| e.as_ref().trim().to_string())
        .collect()
}

/// A lazily connecting channel per endpoint, over TLS when `tls` is given.
fn channels(endpoints: &[String], tls: Option<ClientTlsConfig>) -> Result<Vec<Channel>, Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    endpoints
        .iter()
        .map(|addr| {
            let bad =
                |e: tonic::transport::Error| Error::Local(format!("bad endpoint {addr}: {e}"));
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}")).map_err(bad)?;
            if let Some(tls) = &tls {
                endpoint = endpoint.tls_config(tls.clone()).map_err(bad)?;
            }
            Ok(endpoint
                .connect_timeout(Duration::from_secs(1))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(Duration::from_secs(5))
                .connect_lazy())
        })
        .collect()
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

/// A handle to a Tenure cluster. Cheap to clone; clones share channels and the leader hint.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<String>,
    channels: Vec<Channel>,
    /// Index of the endpoint to try first: the leader, once a reply named it.
    preferred: AtomicUsize,
    timeout: Duration,
    /// `Bearer TOKEN`, sent on every call when set.
    authorization: Option<MetadataValue<Ascii>>,
    /// The channels use TLS.
    tls: bool,
    /// A token may go in clear to an endpoint off this machine ([`Client::insecure`]).
    insecure: bool,
}

impl Client {
    /// A client for these `HOST:PORT` endpoints (connects lazily), with a 10 s call deadline.
    /// Plain HTTP/2: an `https://` endpoint is refused here, so that a bearer token never goes
    /// out in clear text to a node meant to be reached over TLS ([`Client::new_with_ca`]).
    pub fn new<I, S>(endpoints: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let raw = trimmed(endpoints);
        if let Some(tls) = raw.iter().find(|e| e.starts_with("https://")) {
            return Err(Error::Local(format!(
                "{tls} needs TLS: give the cluster CA (tenure --ca-cert, Client::new_with_ca)"
            )));
        }
        Self::build(raw, None)
    }

    /// A client for these endpoints over TLS, verifying the nodes against `ca_pem`, the
    /// cluster CA (PEM) that signed their certificates (`tenured --tls-ca`).
    pub fn new_with_ca<I, S>(endpoints: I, ca_pem: &[u8]) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::build(trimmed(endpoints), Some(tls_to(ca_pem)))
    }

    fn build(raw: Vec<String>, tls: Option<ClientTlsConfig>) -> Result<Self, Error> {
        let endpoints: Vec<String> = raw
            .iter()
            .map(|e| {
                e.trim_start_matches("http://")
                    .trim_start_matches("https://")
                    .to_string()
            })
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(Error::Local("no endpoints given".into()));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                tls: tls.is_some(),
                channels: channels(&endpoints, tls)?,
                endpoints,
                preferred: AtomicUsize::new(0),
                timeout: Duration::from_secs(10),
                authorization: None,
                insecure: false,
            }),
        })
    }

    /// Parses a comma-separated endpoint list.
    pub fn from_list(list: &str) -> Result<Self, Error> {
        Self::new(list.split(','))
    }

    /// The same client with another per-call deadline (all retries included).
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        self.rebuilt(|inner| inner.timeout = timeout)
    }

    /// The same client sending `authorization: Bearer TOKEN` on every call. Refused for a
    /// plain-text client with an endpoint off this machine (anyone on the path could read the
    /// token), unless [`Client::insecure`] allowed it: use [`Client::new_with_ca`].
    pub fn with_token(&self, token: &str) -> Result<Self, Error> {
        let inner = &self.inner;
        if !inner.tls && !inner.insecure {
            if let Some(exposed) = inner
                .endpoints
                .iter()
                .find(|e| !tenure_proto::is_loopback(e))
            {
                return Err(Error::Local(format!(
                    "refusing to send a bearer token in clear to {exposed}: give the cluster CA \
                     (tenure --ca-cert, Client::new_with_ca) to use TLS, or allow it with \
                     --insecure (Client::insecure)"
                )));
            }
        }
        let value: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Local("the token must be printable ASCII".into()))?;
        Ok(self.rebuilt(|inner| inner.authorization = Some(value)))
    }

    /// The same client, allowed to send a token in clear to endpoints off this machine
    /// ([`Client::with_token`] refuses that otherwise). For test clusters on private networks.
    pub fn insecure(&self) -> Self {
        self.rebuilt(|inner| inner.insecure = true)
    }

    fn rebuilt(&self, change: impl FnOnce(&mut Inner)) -> Self {
        let inner = &self.inner;
        let mut copy = Inner {
            endpoints: inner.endpoints.clone(),
            channels: inner.channels.clone(),
            preferred: AtomicUsize::new(inner.preferred.load(Ordering::Relaxed)),
            timeout: inner.timeout,
            authorization: inner.authorization.clone(),
            tls: inner.tls,
            insecure: inner.insecure,
        };
        change(&mut copy);
        Client {
            inner: Arc::new(copy),
        }
    }

    /// The deadline of each call, all its retries included (10 s unless
    /// [`Client::with_timeout`] changed it).
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Runs `call` against the preferred endpoint, then the others in turn, until it is
    /// answered or the deadline passes. Only `unavailable` answers and transport failures are
    /// retried (same request, so same `request_id`), after a delay of [`retry::CALL`] that
    /// would not end past the deadline.
    async fn call<T, F, Fut>(&self, deadline: Instant, mut call: F) -> Result<T, Error>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let inner = &self.inner;
        let first = inner.preferred.load(Ordering::Relaxed);
        let attempts = AtomicUsize::new(0);
        // What each endpoint last answered, to name them when none answered in time.
        let seen_errors = std::sync::Mutex::new(vec![None::<String>; inner.channels.len()]);
        let last_errors = &seen_errors;
        let endpoint = |attempt: usize| (first + attempt) % inner.channels.len();
        let attempt = || {
            let index = endpoint(attempts.fetch_add(1, Ordering::Relaxed));
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = (!left.is_zero()).then(|| call(inner.channels[index].clone(), left));
            async move {
                let Some(answer) = answer else {
                    return Err(Error::Status {
                        code: tonic::Code::DeadlineExceeded,
                        reason: Reason::Unavailable.as_str().into(),
                        message: "deadline passed before any node answered; the outcome is unknown"
                            .into(),
                    });
                };
                let result = answer.await;
                if let Err(status) = &result {
                    last_errors.lock().unwrap_or_else(|e| e.into_inner())[index] =
                        Some(tenure_proto::describe(status));
                }
                self.follow_leader_hint(match &result {
                    Ok(response) => response.metadata(),
                    Err(status) => status.metadata(),
                });
                result.map(tonic::Response::into_inner).map_err(Error::from)
            }
        };
        attempt
            .retry(retry::CALL)
            .when(Error::is_retryable)
            .adjust(|_, delay| delay.filter(|delay| Instant::now() + *delay < deadline))
            .notify(|error, _| {
                let endpoint = &inner.endpoints[endpoint(attempts.load(Ordering::Relaxed) - 1)];
                tracing::debug!(%endpoint, %error, "retrying elsewhere");
            })
            .await
            .map_err(|error| {
                let seen = seen_errors.into_inner().unwrap_or_else(|e| e.into_inner());
                name_the_endpoints(error, &inner.endpoints, &seen)
            })
    }

    /// The leader hint, which is ours and not the retry schedule's: a reply, granted or
    /// refused, whose `tenure-leader` header (SPEC §3.3) names one of our endpoints makes it the
    /// endpoint every later call tries first, since the leader answers without forwarding.
    fn follow_leader_hint(&self, metadata: &tonic::metadata::MetadataMap) {
        let inner = &self.inner;
        let Some(leader) = metadata.get(LEADER_HEADER).and_then(|h| h.to_str().ok()) else {
            return;
        };
        if let Some(pos) = leader
            .split_once('=')
            .and_then(|(_, addr)| inner.endpoints.iter().position(|e| e == addr))
        {
            inner.preferred.store(pos, Ordering::Relaxed);
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.timeout
    }

    /// A request with the time left as its gRPC deadline, and the token if there is one.
    pub(crate) fn request<T>(&self, message: T, left: Duration) -> tonic::Request<T> {
        let mut request = self.authorized(message);
        request.set_timeout(left);
        request
    }

    /// A request with the token if there is one, and no deadline (for streams).
    pub(crate) fn authorized<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.inner.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request
    }

    /// Every endpoint's channel once, the preferred one (the leader, once named) first.
    pub(crate) fn channels(&self) -> impl Iterator<Item = Channel> + '_ {
        let channels = &self.inner.channels;
        let start = self.inner.preferred.load(Ordering::Relaxed);
        (0..channels.len()).map(move |k| channels[(start + k) % channels.len()].clone())
    }

    /// Opens a stream on the first endpoint that answers, trying each once; only
    /// `unavailable` answers and transport failures move on to the next.
    pub(crate) async fn open_stream<T, F, Fut>(&self, mut open: F) -> Result<T, Error>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = None;
        for channel in self.channels() {
            match open(channel).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => {
                    let error = Error::from(status);
                    if !error.is_retryable() {
                        return Err(error);
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Local("no endpoints".into())))
    }

    /// `Acquire`. Sets a `request_id` when the request has none. With `on_conflict = WAIT`
    /// the call blocks until the log decides the wait, so its deadline is the request's
    /// `wait_timeout` (60 s when unset) plus the client's timeout; a retry after a lost
    /// connection rejoins the same wait (same `request_id`).
    pub async fn acquire(
        &self,
        mut request: pb::AcquireRequest,
    ) -> Result<pb::AcquireResponse, Error> {
        ensure_request_id(&mut request.request_id);
        let waits = request.on_conflict == pb::OnConflict::Wait as i32;
        let deadline = if waits {
            let wait = request
                .wait_timeout
                .as_ref()
                .map(crate::lease::from_prost_duration)
                .filter(|d| !d.is_zero())
                .unwrap_or(DEFAULT_WAIT_TIMEOUT);
            self.deadline() + wait
        } else {
            self.deadline()
        };
        leases_call!(self, deadline, request, acquire)
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
    pub async fn node_snapshot(&self, endpoint: usize) -> Result<pb::SnapshotResponse, Error> {
        let channel = self.channel_of(endpoint)?;
        let limit = self.inner.timeout.max(Duration::from_secs(120));
        let request = self.request(pb::SnapshotRequest {}, limit);
        Ok(ClusterClient::new(channel)
            .snapshot(request)
            .await?
            .into_inner())
    }

    /// The channel of one endpoint, by its index in the endpoint list.
    fn channel_of(&self, endpoint: usize) -> Result<Channel, Error> {
        self.inner
            .channels
            .get(endpoint)
            .cloned()
            .ok_or_else(|| Error::Local("no such endpoint".into()))
    }

    /// The endpoints as `HOST:PORT`, without scheme; [`Client::node_status`] and the other
    /// per-node calls take an index into this list.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }
}

fn ensure_request_id(request_id: &mut String) {
    if request_id.is_empty() {
        *request_id = uuid::Uuid::new_v4().to_string();
    }
}

/// A call that gave up with no node answering says which endpoints it tried and what each
/// last did, so an address that is wrong or down is named, not only "unavailable".
fn name_the_endpoints(error: Error, endpoints: &[String], seen: &[Option<String>]) -> Error {
    let Error::Status {
        code,
        reason,
        message,
    } = error
    else {
        return error;
    };
    if Reason::Unavailable != reason.as_str() {
        return Error::Status {
            code,
            reason,
            message,
        };
    }
    if seen.iter().all(Option::is_none) {
        return Error::Status {
            code,
            reason,
            message,
        };
    }
    let tried: Vec<String> = endpoints
        .iter()
        .zip(seen)
        .map(|(endpoint, seen)| match seen {
            Some(error) => format!("{endpoint}: {error}"),
            None => format!("{endpoint}: not tried"),
        })
        .collect();
    Error::Status {
        code,
        reason,
        message: format!(
            "no node answered in time; the outcome is unknown ({})",
            tried.join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_token_is_never_sent_in_clear_off_this_machine_unless_allowed() {
        let token = "t".repeat(32);
        for endpoints in [&["10.0.0.1:7101"][..], &["127.0.0.1:7101", "tenure-2:7101"]] {
            let client = Client::new(endpoints).expect("client");
            let Err(Error::Local(refusal)) = client.with_token(&token) else {
                panic!("{endpoints:?}: a token in clear was accepted");
            };
            assert!(refusal.contains("in clear"), "{refusal}");
            client.insecure().with_token(&token).expect("--insecure");
        }
        Client::new(["127.0.0.1:7101", "localhost:7102", "[::1]:7103"])
            .expect("client")
            .with_token(&token)
            .expect("loopback");
    }

    /// Nothing listens on port 1: the call gives up at its deadline naming the endpoint and
    /// what it answered, still as `unavailable`.
    #[tokio::test]
    async fn a_call_no_node_answered_names_each_endpoint_and_its_error() {
        let client = Client::new(["127.0.0.1:1"])
            .expect("client")
            .with_timeout(Duration::from_millis(300));
        let error = client
            .validate(pb::ValidateRequest {
                resource: "r".into(),
                fencing_token: 1,
                ..Default::default()
            })
            .await
            .expect_err("nothing listens");
        assert_eq!(error.reason(), Some(Reason::Unavailable), "{error}");
        let text = error.to_string();
        assert!(
            text.contains("no node answered in time; the outcome is unknown (127.0.0.1:1: "),
            "{text}"
        );
    }
}
