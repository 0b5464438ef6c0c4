"""The Python client against a live cluster: TENURE_ENDPOINTS=HOST:PORT,… (TENURE_TOKEN optional).

    TENURE_ENDPOINTS=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 pytest tests

Every test uses its own resource names (a uuid per run), so reruns against the same
cluster never collide.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import grpc
import pytest

from tenure_client import Client, TenureError, pb

ENDPOINTS = os.environ.get("TENURE_ENDPOINTS", "")
RUN = uuid.uuid4().hex[:12]

pytestmark = pytest.mark.skipif(not ENDPOINTS, reason="TENURE_ENDPOINTS is not set")


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client(ENDPOINTS, token=os.environ.get("TENURE_TOKEN") or None, timeout=10.0) as c:
        # Wait (up to 30 s) until the cluster has a leader and answers a linearizable read.
        deadline = time.monotonic() + 30
        while True:
            try:
                c.get_resource(f"py/{RUN}/ready")
                break
            except TenureError as error:
                if time.monotonic() > deadline:
                    pytest.fail(f"the cluster at {ENDPOINTS} has no leader: {error}")
                time.sleep(0.2)
        yield c


@pytest.fixture
def resource(request: pytest.FixtureRequest) -> str:
    """A fresh, valid resource name: py/<run>/<test function>/<8 hex>."""
    return f"py/{RUN}/{request.node.originalname}/{uuid.uuid4().hex[:8]}"


def acquire(client: Client, resource: str, holder: str, ttl_s: float = 30) -> pb.Lease:
    answer = client.acquire(resource, holder, ttl_s=ttl_s)
    assert answer.granted, answer
    assert answer.reason == ""
    return answer.lease


def test_acquire_grants_a_lease_with_a_fencing_token(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a")
    assert lease.fencing_token > 0
    assert lease.lease_id
    assert (lease.resource, lease.holder) == (resource, "py-a")
    assert lease.status == pb.LEASE_STATUS_ACTIVE
    assert lease.ttl.ToSeconds() == 30
    held = client.get_resource(resource).leases
    assert [(l.holder, l.fencing_token) for l in held] == [("py-a", lease.fencing_token)]


def test_contention_is_an_answer_not_an_error(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a")
    answer = client.acquire(resource, "py-b", ttl_s=30)
    assert not answer.granted
    assert answer.reason == "resource_unavailable"
    assert [(h.holder, h.fencing_token) for h in answer.holders] == [
        ("py-a", lease.fencing_token)
    ]


def test_renew_with_the_current_token_keeps_it(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a", ttl_s=10)
    renewed = client.renew(lease, ttl_s=60)
    assert renewed.fencing_token == lease.fencing_token
    assert renewed.lease_id == lease.lease_id
    assert renewed.ttl.ToSeconds() == 60
    assert renewed.status == pb.LEASE_STATUS_ACTIVE


def test_keep_alive_renews_many_leases_on_one_stream(client: Client, resource: str) -> None:
    leases = [acquire(client, f"{resource}/{k}", "py-a", ttl_s=10) for k in range(5)]
    with client.keep_alive() as stream:
        renewals = [stream.renew_async(lease, ttl_s=60) for lease in leases]
        renewed = [renewal.result(timeout=10) for renewal in renewals]
        # Once more on the same stream.
        again = stream.renew(leases[0], ttl_s=30)
    for before, after in zip(leases, renewed):
        assert (after.lease_id, after.fencing_token) == (before.lease_id, before.fencing_token)
        assert after.ttl.ToSeconds() == 60
    assert again.ttl.ToSeconds() == 30


def test_keep_alive_refuses_a_stale_token_and_stays_open(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a", ttl_s=30)
    stale = pb.Lease()
    stale.CopyFrom(lease)
    stale.fencing_token = lease.fencing_token + 1
    with client.keep_alive() as stream:
        with pytest.raises(TenureError) as refused:
            stream.renew(stale)
        assert refused.value.reason == "stale_fencing_token"
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert stream.renew(lease).fencing_token == lease.fencing_token


def test_an_old_token_is_stale_after_release_and_reacquire(client: Client, resource: str) -> None:
    old = acquire(client, resource, "py-a")
    released = client.release(old)
    assert released.status == pb.LEASE_STATUS_RELEASED
    new = acquire(client, resource, "py-a")
    assert new.fencing_token > old.fencing_token

    # The same holder's current lease, named with the old token.
    stale = pb.Lease()
    stale.CopyFrom(new)
    stale.fencing_token = old.fencing_token
    with pytest.raises(TenureError) as raised:
        client.renew(stale)
    assert raised.value.reason == "stale_fencing_token"
    assert raised.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"expected {new.fencing_token}, got {old.fencing_token}" in raised.value.message

    verdict = client.validate(resource, fencing_token=old.fencing_token)
    assert not verdict.valid
    current = client.validate(resource, lease_id=new.lease_id, fencing_token=new.fencing_token)
    assert current.valid and current.reason == "ok"


def test_release_ends_the_lease(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a")
    released = client.release(lease)
    assert released.status == pb.LEASE_STATUS_RELEASED
    assert released.fencing_token == lease.fencing_token
    assert list(client.get_resource(resource).leases) == []
    verdict = client.validate(resource, lease_id=lease.lease_id, fencing_token=lease.fencing_token)
    assert not verdict.valid
    assert verdict.reason == "lease released"


def test_history_lists_the_lifecycle_newest_first(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a")
    client.renew(lease, ttl_s=45)
    client.release(lease)

    entries = list(client.history(resource).entries)
    assert [e.event for e in entries] == [
        pb.EVENT_TYPE_RELEASED,
        pb.EVENT_TYPE_RENEWED,
        pb.EVENT_TYPE_ACQUIRED,
    ]
    revisions = [e.revision for e in entries]
    assert revisions == sorted(revisions, reverse=True) and len(set(revisions)) == 3
    assert entries[-1].revision == lease.fencing_token
    for entry in entries:
        assert (entry.resource, entry.holder, entry.lease_id) == (resource, "py-a", lease.lease_id)
        assert entry.fencing_token == lease.fencing_token

    oldest_first = list(client.history(resource, order="asc").entries)
    assert [e.revision for e in oldest_first] == revisions[::-1]
    only_acquired = client.history(resource, events=["acquired"]).entries
    assert [e.event for e in only_acquired] == [pb.EVENT_TYPE_ACQUIRED]


def test_list_leases_finds_a_holders_leases(client: Client, resource: str) -> None:
    holder = f"py-{RUN}-lister"
    first = acquire(client, f"{resource}/1", holder)
    second = acquire(client, f"{resource}/2", holder)
    listed = client.list_leases(holder=holder).leases
    assert sorted((l.resource, l.fencing_token) for l in listed) == [
        (first.resource, first.fencing_token),
        (second.resource, second.fencing_token),
    ]


def test_transfer_hands_over_with_a_new_token(client: Client, resource: str) -> None:
    client.create_resource(resource, policy=pb.Policy(transferable=True))
    lease = acquire(client, resource, "py-a")
    time.sleep(1.5)  # a transfer that restarted the ttl would move the expiry by this much
    moved = client.transfer(lease, "py-b")
    assert (moved.resource, moved.holder) == (resource, "py-b")
    assert moved.fencing_token > lease.fencing_token
    drift = moved.expires_at.ToMilliseconds() - lease.expires_at.ToMilliseconds()
    assert abs(drift) < 500, f"expiry moved by {drift} ms"
    assert not client.validate(resource, fencing_token=lease.fencing_token).valid
    assert client.validate(resource, fencing_token=moved.fencing_token).valid
    events = [e.event for e in client.history(resource).entries]
    assert events[0] == pb.EVENT_TYPE_TRANSFERRED


def test_an_ad_hoc_lease_is_not_transferable(client: Client, resource: str) -> None:
    lease = acquire(client, resource, "py-a")
    with pytest.raises(TenureError) as raised:
        client.transfer(lease, "py-b")
    assert raised.value.reason == "not_transferable"


def test_a_session_carries_many_leases_and_ends_them_together(client: Client, resource: str) -> None:
    session = client.create_session("py-shards", ttl_s=30)
    assert session.session_id.startswith("ses_")
    leases = []
    for k in range(3):
        answer = client.acquire(f"{resource}/{k}", "py-shards", session_id=session.session_id)
        assert answer.granted, answer
        assert answer.lease.session_id == session.session_id
        leases.append(answer.lease)
    # A lease on a session is renewed with its session, never alone.
    with pytest.raises(TenureError) as raised:
        client.renew(leases[0], ttl_s=30)
    assert raised.value.reason == "invalid_argument"
    renewed = client.renew_session(session.session_id)
    assert renewed.lease_count == 3
    listed = client.list_sessions(holder="py-shards")
    assert session.session_id in [s.session_id for s in listed.sessions]
    closed = client.close_session(session.session_id)
    assert closed.status == pb.SESSION_STATUS_CLOSED
    assert {lease.status for lease in closed.leases} == {pb.LEASE_STATUS_RELEASED}
    with pytest.raises(TenureError) as raised:
        client.get_session(session.session_id)
    assert raised.value.reason == "session_not_found"
    assert raised.value.code == grpc.StatusCode.NOT_FOUND


def test_acquire_many_is_all_or_nothing_and_waits_in_every_room(
    client: Client, resource: str
) -> None:
    x, y, z = (f"{resource}/{name}" for name in "xyz")
    both = client.acquire_many("py-a", [x, y], ttl_s=30)
    assert both.granted, both
    assert [lease.resource for lease in both.leases] == [x, y]
    assert len({lease.fencing_token for lease in both.leases}) == 1
    # y is held: nothing of z and y is granted, and each resource says why.
    refused = client.acquire_many("py-b", [z, y], ttl_s=30)
    assert not refused.granted
    assert refused.reason == "resource_unavailable"
    assert [(c.resource, c.reason) for c in refused.claims] == [
        (z, ""),
        (y, "resource_unavailable"),
    ]
    assert [h.holder for h in refused.claims[1].holders] == ["py-a"]
    assert not client.get_resource(z).leases
    # Waiting in both rooms: admitted at once when py-a lets go of y.
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(client.acquire_many, "py-b", [z, y], 30, None, "", 60)
        while client.get_resource(y).waiting == 0:
            time.sleep(0.01)
        for lease in both.leases:
            client.release(lease)
        admitted = waiting.result(timeout=60)
    assert admitted.granted, admitted
    assert [lease.holder for lease in admitted.leases] == ["py-b", "py-b"]
    assert len({lease.fencing_token for lease in admitted.leases}) == 1


def test_cancel_wait_ends_only_the_wait_it_names(client: Client, resource: str) -> None:
    acquire(client, resource, "py-a")
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(client.acquire_many, "py-w", [resource], 30, None, "", 60)
        while not client.get_resource(resource).waiters:
            time.sleep(0.01)
        queued = client.get_resource(resource).waiters[0].queued_revision
        # A revision that queued no wait of py-w's: nothing is cancelled.
        assert not client.cancel_wait(resource, "py-w", queued_revision=queued - 1)
        assert client.cancel_wait(resource, "py-w", queued_revision=queued)
        answer = waiting.result(timeout=60)
    assert not answer.granted
    assert answer.reason == "wait_cancelled"
    assert not client.cancel_wait(resource, "py-w"), "nothing left to cancel"


@pytest.mark.parametrize("holder", ["has space", "", "x" * 129, "bad\u00e9"])
def test_bad_input_is_invalid_argument(client: Client, resource: str, holder: str) -> None:
    with pytest.raises(TenureError) as raised:
        client.acquire(resource, holder, ttl_s=30)
    assert raised.value.reason == "invalid_argument"
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "holder" in raised.value.message


def test_a_stale_endpoint_list_still_reaches_the_cluster(resource: str) -> None:
    # An endpoint nobody listens on comes first: the call moves on to a live node.
    with Client(["127.0.0.1:1", *ENDPOINTS.split(",")], timeout=10.0) as c:
        assert acquire(c, resource, "py-a").fencing_token > 0


def test_an_endpoint_that_never_answers_leaves_time_for_another(resource: str) -> None:
    # A listener that takes connections and never answers, as a paused node does, comes
    # first: its attempt gets half the budget, and the next endpoint answers in the rest.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with Client([f"127.0.0.1:{port}", *ENDPOINTS.split(",")], timeout=4.0) as c:
            assert acquire(c, resource, "py-a").fencing_token > 0


def test_the_client_follows_the_leader_hint(resource: str) -> None:
    # The endpoints in reverse: the first one tried is likely a follower.
    with Client(ENDPOINTS.split(",")[::-1], timeout=10.0) as c:
        c.get_resource(resource)
        leader = c.cluster_status().leader_addr
        if leader not in c.endpoints:
            pytest.skip(f"the leader's address {leader} is not one of {c.endpoints}")
        assert c.endpoint == leader


def test_a_token_is_never_sent_in_clear_off_this_machine() -> None:
    with pytest.raises(ValueError, match="in clear"):
        Client(["10.0.0.1:7101"], token="t" * 32)
    with pytest.raises(ValueError, match="in clear"):
        Client(["127.0.0.1:7101", "tenure-2:7101"], token="t" * 32)
    # Loopback, an explicit opt-out, and no token at all are fine (no call is made).
    Client(["127.0.0.1:7101", "localhost:7102", "[::1]:7103"], token="t" * 32).close()
    Client(["10.0.0.1:7101"], token="t" * 32, insecure=True).close()
    Client(["10.0.0.1:7101"]).close()

