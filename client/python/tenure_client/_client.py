"""The connection to a Tenure cluster: endpoints, the leader hint, deadlines and retries."""

from __future__ import annotations

import ipaddress
import itertools
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from ._pb.tenure.v1 import cluster_pb2, cluster_pb2_grpc
from ._pb.tenure.v1 import leases_pb2 as pb
from ._pb.tenure.v1 import leases_pb2_grpc
from .contract import LEADER_HEADER, REASON_HEADER, Reason

M = TypeVar("M", bound=Message)
Metadata = Sequence[tuple[str, Union[str, bytes]]]


class TenureError(Exception):
    """A call that failed: `reason` is the SPEC §3 reason (`stale_fencing_token`, …), as sent;
    it equals the `Reason` member of that name."""

    def __init__(self, reason: str, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.code = code
        self.message = message

    @property
    def retryable(self) -> bool:
        """Whether the same request (same `request_id`) may be retried on another node."""
        return self.code == grpc.StatusCode.UNAVAILABLE or self.reason == Reason.UNAVAILABLE

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> TenureError:
        code: grpc.StatusCode = _safe(error, "code") or grpc.StatusCode.UNKNOWN
        message: str = _safe(error, "details") or ""
        # The node always sends the reason as a trailer; without one, the transport failed
        # (no connection, deadline) and the code is all there is.
        reason = _header(_safe(error, "trailing_metadata"), REASON_HEADER)
        return cls(reason or code.name.lower(), code, message)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _safe(error: grpc.RpcError, attribute: str) -> Any:
    method = getattr(error, attribute, None)
    return method() if callable(method) else None


def _header(metadata: Optional[Metadata], key: str) -> Optional[str]:
    for name, value in metadata or ():
        if name == key:
            return value.decode() if isinstance(value, bytes) else value
    return None


def _duration(seconds: Optional[float]) -> Optional[Duration]:
    if seconds is None:
        return None
    duration = Duration()
    duration.FromNanoseconds(round(seconds * 1e9))
    return duration


def _enum(wrapper: Any, prefix: str, value: Union[str, int, None]) -> Any:
    """`"read"` → `LEASE_MODE_READ`; ints pass through; None is UNSPECIFIED (the default).

    Typed `Any`: the generated stubs type each enum field with its own enum class."""
    if value is None:
        return 0
    if isinstance(value, str):
        return wrapper.Value(f"{prefix}_{value.upper()}")
    return int(value)


def _renew_request(lease: pb.Lease, ttl_s: Optional[float], request_id: str) -> pb.RenewRequest:
    return pb.RenewRequest(
        resource=lease.resource,
        lease_id=lease.lease_id,
        holder=lease.holder,
        fencing_token=lease.fencing_token,
        ttl=_duration(ttl_s),
        request_id=request_id,
    )


def _request_id() -> str:
    return str(uuid.uuid4())


def is_loopback(endpoint: str) -> bool:
    """Whether `HOST:PORT` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    host = endpoint
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Client:
    """A synchronous client for a Tenure cluster.

    Tries the endpoints in order, goes to the leader once a reply's `tenure-leader` header
    named one of them, and retries `unavailable` answers and transport failures on the next
    endpoint with the same `request_id` until `timeout` seconds (per call, retries included)
    have passed; an attempt that is not a wait gets at most half of them, so one silent node
    leaves time for another. Any other failure raises `TenureError` at once.
    """

    def __init__(
        self,
        endpoints: Union[Sequence[str], str],
        token: Optional[str] = None,
        timeout: float = 5.0,
        ca_cert: Optional[bytes] = None,
        insecure: bool = False,
    ) -> None:
        """`ca_cert`: the cluster CA (PEM) to reach the nodes over TLS (`tenured --tls-ca`).
        A `token` is never sent in clear to an endpoint off this machine unless `insecure`."""
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self.endpoints = [
            e.strip().removeprefix("http://").removeprefix("https://")
            for e in endpoints
            if e.strip()
        ]
        if not self.endpoints:
            raise ValueError("no endpoints given")
        self.timeout = timeout
        self._credentials = (
            grpc.ssl_channel_credentials(root_certificates=ca_cert) if ca_cert else None
        )
        self._metadata: list[tuple[str, str]] = []
        if token:
            exposed = [e for e in self.endpoints if not is_loopback(e)]
            if exposed and self._credentials is None and not insecure:
                raise ValueError(
                    f"refusing to send a bearer token in clear to {exposed[0]}: give the "
                    "cluster CA (ca_cert=) to use TLS, or insecure=True"
                )
            self._metadata.append(("authorization", f"Bearer {token}"))
        self._channels: dict[int, grpc.Channel] = {}
        self._stubs: dict[tuple[Callable[[grpc.Channel], Any], int], Any] = {}
        self._preferred = 0

    @property
    def endpoint(self) -> str:
        """The endpoint tried first: the leader, once a reply's `tenure-leader` header named it."""
        return self.endpoints[self._preferred]

    # --- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _stub(self, stub: Callable[[grpc.Channel], Any], index: int) -> Any:
        if (stub, index) not in self._stubs:
            if index not in self._channels:
                endpoint = self.endpoints[index]
                self._channels[index] = (
                    grpc.secure_channel(endpoint, self._credentials)
                    if self._credentials
                    else grpc.insecure_channel(endpoint)
                )
            self._stubs[(stub, index)] = stub(self._channels[index])
        return self._stubs[(stub, index)]

    def _leader_index(self, *metadata: Optional[Metadata]) -> Optional[int]:
        """The endpoint a `tenure-leader: ID=HOST:PORT` header names, if it is one of ours."""
        for md in metadata:
            hint = _header(md, LEADER_HEADER)
            if hint and "=" in hint:
                addr = hint.split("=", 1)[1]
                if addr in self.endpoints:
                    return self.endpoints.index(addr)
        return None

    def _call(
        self, stub: Callable[[grpc.Channel], Any], method: str, request: M, extra_s: float = 0.0
    ) -> Any:
        """`extra_s`: seconds the call may block on top of `timeout` (a wait's timeout).

        An attempt that is not a wait gets at most half the budget (and at least 1 s), so a
        node that never answers (paused, or cut off) leaves time to try another."""
        deadline = time.monotonic() + self.timeout + extra_s
        share = float("inf") if extra_s > 0 else max(1.0, self.timeout / 2)
        index = self._preferred
        backoff = 0.01
        while True:
            attempt_ends = min(deadline, time.monotonic() + share)
            rpc = getattr(self._stub(stub, index), method)
            try:
                response, call = rpc.with_call(
                    request,
                    timeout=max(attempt_ends - time.monotonic(), 0.001),
                    metadata=self._metadata,
                )
            except grpc.RpcError as rpc_error:
                error = TenureError.from_rpc(rpc_error)
                leader = self._leader_index(
                    _safe(rpc_error, "initial_metadata"), _safe(rpc_error, "trailing_metadata")
                )
                if leader is not None:
                    self._preferred = leader
                # Our own share of the budget ran out, not the call's: another node may answer.
                share_spent = (
                    _safe(rpc_error, "code") == grpc.StatusCode.DEADLINE_EXCEEDED
                    and not _header(_safe(rpc_error, "trailing_metadata"), REASON_HEADER)
                    and attempt_ends < deadline
                )
                retry = error.retryable or share_spent
                if not retry or time.monotonic() + backoff >= deadline:
                    raise error from None
                # The named leader if it is another node, else the next endpoint.
                index = leader if leader not in (None, index) else (index + 1) % len(self.endpoints)
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.2)
                continue
            leader = self._leader_index(call.initial_metadata())
            self._preferred = leader if leader is not None else index
            return response

    def _leases(self, method: str, request: M, extra_s: float = 0.0) -> Any:
        return self._call(leases_pb2_grpc.LeasesStub, method, request, extra_s)

    # --- tenure.v1.Leases -------------------------------------------------------------------

    def acquire(
        self,
        resource: str,
        holder: str,
        ttl_s: Optional[float] = None,
        mode: Union[str, int, None] = None,
        units: int = 0,
        metadata: Optional[Mapping[str, str]] = None,
        idempotency_key: str = "",
        session_id: str = "",
    ) -> pb.AcquireResponse:
        """Contention is an answer, not an error: branch on `granted` (and `reason`).

        With `session_id` the lease lives on that session (no `ttl_s` of its own): it ends when
        the session does (SPEC §4.24)."""
        request = pb.AcquireRequest(
            resource=resource,
            holder=holder,
            ttl=_duration(ttl_s),
            mode=_enum(pb.LeaseMode, "LEASE_MODE", mode),
            units=units,
            metadata=dict(metadata or {}),
            idempotency_key=idempotency_key,
            request_id=_request_id(),
            session_id=session_id,
        )
        response: pb.AcquireResponse = self._leases("Acquire", request)
        return response

    def acquire_many(
        self,
        holder: str,
        resources: Sequence[str],
        ttl_s: Optional[float] = None,
        metadata: Optional[Mapping[str, str]] = None,
        session_id: str = "",
        wait_s: Optional[float] = None,
    ) -> pb.AcquireManyResponse:
        """Every one of `resources` (exclusive) in one step, all with one fencing token, or
        none: branch on `granted`; when not granted, `claims` says what blocks each resource.

        With `wait_s` it queues in every resource's waiting room and blocks until all are
        granted at once or `wait_s` has passed (`reason` = `wait_timeout`). Two callers that
        name the same resources in opposite orders never deadlock (SPEC §4.25)."""
        request = pb.AcquireManyRequest(
            holder=holder,
            claims=[pb.ResourceClaim(resource=r) for r in resources],
            ttl=_duration(ttl_s),
            metadata=dict(metadata or {}),
            on_conflict=pb.ON_CONFLICT_WAIT if wait_s else pb.ON_CONFLICT_FAIL,
            wait_timeout=_duration(wait_s),
            request_id=_request_id(),
            session_id=session_id,
        )
        response: pb.AcquireManyResponse = self._leases(
            "AcquireMany", request, extra_s=wait_s or 0.0
        )
        return response

    def renew(self, lease: pb.Lease, ttl_s: Optional[float] = None) -> pb.Lease:
        """New expiry = now + ttl (absent: the lease's last ttl). Needs the current token."""
        request = _renew_request(lease, ttl_s, _request_id())
        response: pb.RenewResponse = self._leases("Renew", request)
        return response.lease

    def keep_alive(self) -> KeepAlive:
        """A `KeepAlive` stream on which to renew any number of leases, one message each."""
        return KeepAlive(self)

    def release(self, lease: pb.Lease) -> pb.Lease:
        request = pb.ReleaseRequest(
            resource=lease.resource,
            lease_id=lease.lease_id,
            holder=lease.holder,
            fencing_token=lease.fencing_token,
            request_id=_request_id(),
        )
        response: pb.ReleaseResponse = self._leases("Release", request)
        return response.lease

    def cancel_wait(
        self, resource: str, holder: str, queued_revision: int = 0, request_id: str = ""
    ) -> bool:
        """Takes `holder` out of `resource`'s waiting room (its blocked acquire answers
        `wait_cancelled`); False when it was not waiting. With `queued_revision` (a waiter's)
        only the wait that entry queued, never a newer one of the same holder. A `request_id`
        makes a retry of this call exactly-once (default: a fresh one)."""
        request = pb.CancelWaitRequest(
            resource=resource,
            holder=holder,
            queued_revision=queued_revision,
            request_id=request_id or _request_id(),
        )
        response: pb.CancelWaitResponse = self._leases("CancelWait", request)
        return response.cancelled

    def transfer(self, lease: pb.Lease, to_holder: str, to_principal: str = "") -> pb.Lease:
        """The new holder's lease: a new fencing token, the old expiry."""
        request = pb.TransferRequest(
            resource=lease.resource,
            lease_id=lease.lease_id,
            holder=lease.holder,
            fencing_token=lease.fencing_token,
            to_holder=to_holder,
            to_principal=to_principal,
            request_id=_request_id(),
        )
        response: pb.TransferResponse = self._leases("Transfer", request)
        return response.lease

    def validate(
        self,
        resource: str,
        lease_id: str = "",
        fencing_token: int = 0,
        fsm_machine: str = "",
        fsm_transition: str = "",
    ) -> pb.ValidateResponse:
        """Always answered: branch on `valid`; `reason` says why not."""
        request = pb.ValidateRequest(
            resource=resource,
            lease_id=lease_id,
            fencing_token=fencing_token,
            fsm_machine=fsm_machine,
            fsm_transition=fsm_transition,
        )
        response: pb.ValidateResponse = self._leases("Validate", request)
        return response

    def get_resource(self, name: str) -> pb.Resource:
        request = pb.GetResourceRequest(name=name)
        response: pb.GetResourceResponse = self._leases("GetResource", request)
        return response.resource

    def create_resource(
        self,
        name: str = "",
        policy: Optional[pb.Policy] = None,
        kind: str = "",
        display_name: str = "",
    ) -> pb.Resource:
        """Registers a resource (admin only); absent policy fields take the registered defaults."""
        request = pb.CreateResourceRequest(
            name=name,
            kind=kind,
            display_name=display_name,
            policy=policy,
            request_id=_request_id(),
        )
        response: pb.CreateResourceResponse = self._leases("CreateResource", request)
        return response.resource

    def history(
        self,
        resource: str,
        page_size: int = 100,
        order: Union[str, int, None] = "desc",
        page_token: str = "",
        events: Iterable[Union[str, int]] = (),
    ) -> pb.HistoryResponse:
        """One page of events. `order`: `"desc"` (newest first) or `"asc"`; `events` filters,
        e.g. `["acquired", "released"]` (empty = all)."""
        request = pb.HistoryRequest(
            resource=resource,
            page_size=page_size,
            page_token=page_token,
            order=_enum(pb.Order, "ORDER", order),
            events=[_enum(pb.EventType, "EVENT_TYPE", e) for e in events],
        )
        response: pb.HistoryResponse = self._leases("History", request)
        return response

    def list_leases(
        self, holder: str = "", principal: str = "", page_size: int = 100, page_token: str = ""
    ) -> pb.ListLeasesResponse:
        """One page of the live leases of a holder and/or a principal."""
        request = pb.ListLeasesRequest(
            holder=holder, principal=principal, page_size=page_size, page_token=page_token
        )
        response: pb.ListLeasesResponse = self._leases("ListLeases", request)
        return response

    # --- sessions (SPEC §4.24) ----------------------------------------------------------------

    def create_session(
        self,
        holder: str,
        ttl_s: Optional[float] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> pb.Session:
        """A session: one heartbeat (`renew_session` every ttl/3) for every lease acquired with
        its `session_id`; when it expires or closes they all end together."""
        request = pb.CreateSessionRequest(
            holder=holder,
            ttl=_duration(ttl_s),
            metadata=dict(metadata or {}),
            request_id=_request_id(),
        )
        response: pb.SessionResponse = self._leases("CreateSession", request)
        return response.session

    def renew_session(self, session_id: str) -> pb.Session:
        """New expiry = now + the session's ttl, for the session and everything on it."""
        request = pb.RenewSessionRequest(session_id=session_id)
        response: pb.SessionResponse = self._leases("RenewSession", request)
        return response.session

    def close_session(self, session_id: str) -> pb.Session:
        """Ends the session: every lease on it released and every wait cancelled, at once."""
        request = pb.CloseSessionRequest(session_id=session_id, request_id=_request_id())
        response: pb.SessionResponse = self._leases("CloseSession", request)
        return response.session

    def get_session(self, session_id: str) -> pb.Session:
        request = pb.GetSessionRequest(session_id=session_id)
        response: pb.SessionResponse = self._leases("GetSession", request)
        return response.session

    def list_sessions(
        self, principal: str = "", holder: str = "", page_size: int = 100, page_token: str = ""
    ) -> pb.ListSessionsResponse:
        """One page of live sessions, by id (filters: principal, holder; empty = any)."""
        request = pb.ListSessionsRequest(
            principal=principal, holder=holder, page_size=page_size, page_token=page_token
        )
        response: pb.ListSessionsResponse = self._leases("ListSessions", request)
        return response

    # --- tenure.v1.Cluster ------------------------------------------------------------------

    def cluster_status(self) -> cluster_pb2.StatusResponse:
        """Members, leader, term and indexes, from whichever node answers (admin only)."""
        response: cluster_pb2.StatusResponse = self._call(
            cluster_pb2_grpc.ClusterStub, "Status", cluster_pb2.StatusRequest()
        )
        return response


class KeepAlive:
    """One `KeepAlive` stream (SPEC §2.3): renew any of the caller's leases on it, each
    renewal answered with the lease's new expiry or its own refusal (a `TenureError`), the
    stream staying open. Opened on the client's preferred endpoint (the leader, once named);
    if it breaks, renewals waiting on it fail with a retryable `unavailable` error and the next
    renewal opens it again, on the next endpoint. Use it as a context manager, or `close()` it.

        with client.keep_alive() as stream:
            futures = [stream.renew_async(lease, ttl_s=30) for lease in leases]
            renewed = [f.result() for f in futures]
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._waiting: dict[int, Future[pb.Lease]] = {}
        self._requests: Optional[queue.SimpleQueue[Optional[pb.KeepAliveRequest]]] = None
        self._responses: Any = None
        self._index = client._preferred

    def __enter__(self) -> KeepAlive:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Ends the stream; renewals still waiting fail with `unavailable`."""
        with self._lock:
            waiting = self._hang_up()
        _fail(waiting, _stream_ended("the KeepAlive stream was closed"))

    def renew(self, lease: pb.Lease, ttl_s: Optional[float] = None) -> pb.Lease:
        """Renews `lease` on the stream and waits (at most the client's timeout) for its answer."""
        return self.renew_async(lease, ttl_s).result(timeout=self._client.timeout)

    def renew_async(self, lease: pb.Lease, ttl_s: Optional[float] = None) -> Future[pb.Lease]:
        """Sends the renewal of `lease` and returns its future answer at once (it cannot be
        cancelled: the renewal is on its way)."""
        renewal: Future[pb.Lease] = Future()
        renewal.set_running_or_notify_cancel()
        # Renewals are not remembered (SPEC §4.18): no request_id on the stream.
        request = _renew_request(lease, ttl_s, request_id="")
        with self._lock:
            if self._requests is None:
                self._open()
            assert self._requests is not None
            seq = next(self._seq)
            self._waiting[seq] = renewal
            self._requests.put(pb.KeepAliveRequest(seq=seq, renew=request))
        return renewal

    def _open(self) -> None:
        """Opens the stream (the lock held)."""
        requests: queue.SimpleQueue[Optional[pb.KeepAliveRequest]] = queue.SimpleQueue()
        client = self._client
        stub = client._stub(leases_pb2_grpc.LeasesStub, self._index)
        responses = stub.KeepAlive(iter(requests.get, None), metadata=client._metadata)
        self._requests, self._responses = requests, responses
        threading.Thread(target=self._read, args=(responses,), daemon=True).start()

    def _read(self, responses: Any) -> None:
        failure = _stream_ended("the KeepAlive stream ended")
        try:
            for response in responses:
                with self._lock:
                    renewal = self._waiting.pop(response.seq, None)
                if renewal is None:
                    continue
                if response.HasField("refusal"):
                    refusal = response.refusal
                    code = _CODES.get(refusal.code, grpc.StatusCode.UNKNOWN)
                    renewal.set_exception(TenureError(refusal.reason, code, refusal.message))
                else:
                    renewal.set_result(response.lease)
        except grpc.RpcError as error:
            failure = TenureError.from_rpc(error)
        finally:
            waiting: list[Future[pb.Lease]] = []
            with self._lock:
                if self._responses is responses:
                    waiting = self._hang_up()
                    # A stream that broke: the next one tries the next endpoint.
                    self._index = (self._index + 1) % len(self._client.endpoints)
            _fail(waiting, failure)

    def _hang_up(self) -> list[Future[pb.Lease]]:
        """Ends the current stream (the lock held); returns what waited on it, to be failed
        once the lock is let go."""
        if self._requests is not None:
            self._requests.put(None)
            self._responses.cancel()
        self._requests, self._responses = None, None
        waiting = list(self._waiting.values())
        self._waiting.clear()
        return waiting


def _stream_ended(message: str) -> TenureError:
    return TenureError(Reason.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, message)


def _fail(renewals: Iterable[Future[pb.Lease]], error: TenureError) -> None:
    for renewal in renewals:
        renewal.set_exception(error)
