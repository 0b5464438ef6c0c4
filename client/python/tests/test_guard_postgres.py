"""The PostgreSQL guard (tenure_client.guard) against a live server, with tokens from a live
cluster: TENURE_TEST_PG=<libpq connection string> and TENURE_ENDPOINTS=HOST:PORT,…

run-live-test.sh starts both (the server with guard/pg-server.sh). Every test guards its own
resource names (a uuid per run), so reruns against the same server never collide.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Iterator

import pytest

from tenure_client import Client
from tenure_client.guard import EXCLUSIVE, SHARED, Stale, create_table, guard, highest

PG = os.environ.get("TENURE_TEST_PG", "")
ENDPOINTS = os.environ.get("TENURE_ENDPOINTS", "")
RUN = uuid.uuid4().hex[:12]

pytestmark = pytest.mark.skipif(not (PG and ENDPOINTS), reason="TENURE_TEST_PG or TENURE_ENDPOINTS is not set")

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def resource(request: pytest.FixtureRequest) -> str:
    return f"py-guard/{RUN}/{request.node.originalname}"


@pytest.fixture
def conn(resource: str) -> Iterator["psycopg.Connection"]:
    with psycopg.connect(PG, autocommit=True) as c:
        create_table(c)
        with c.transaction():
            c.execute("CREATE TABLE IF NOT EXISTS register (id bigserial PRIMARY KEY, resource text, token bigint)")
        yield c


def write(conn: "psycopg.Connection", resource: str, token: int, mode: str = EXCLUSIVE) -> None:
    with conn.transaction():
        guard(conn, resource, token, mode)
        conn.execute("INSERT INTO register (resource, token) VALUES (%s, %s)", (resource, token))


def register(conn: "psycopg.Connection", resource: str) -> list[int]:
    rows = conn.execute("SELECT token FROM register WHERE resource = %s ORDER BY id", (resource,))
    return [r[0] for r in rows.fetchall()]


def test_a_holder_after_a_release_fences_out_the_one_before(conn: "psycopg.Connection", resource: str) -> None:
    with Client(ENDPOINTS, timeout=10.0) as client:
        first = client.acquire(resource, "py-a", ttl_s=30)
        assert first.granted, first
        write(conn, resource, first.lease.fencing_token)
        client.release(first.lease)
        second = client.acquire(resource, "py-b", ttl_s=30)
        assert second.granted, second
        assert second.lease.fencing_token > first.lease.fencing_token
        write(conn, resource, second.lease.fencing_token)
        # The first holder, still believing it holds the lease, writes again: refused, and its
        # insert rolled back with the transaction.
        with pytest.raises(Stale) as refused:
            write(conn, resource, first.lease.fencing_token)
        assert (refused.value.highest, refused.value.got) == (second.lease.fencing_token, first.lease.fencing_token)
        assert str(second.lease.fencing_token) in str(refused.value)
        assert str(first.lease.fencing_token) in str(refused.value)
        assert register(conn, resource) == [first.lease.fencing_token, second.lease.fencing_token]
        assert highest(conn, resource) == second.lease.fencing_token


def test_shared_writers_are_checked_against_the_fence_and_fence_out_older_ones(
    conn: "psycopg.Connection", resource: str
) -> None:
    write(conn, resource, 10)
    with pytest.raises(Stale):
        write(conn, resource, 8, SHARED)
    write(conn, resource, 12, SHARED)
    write(conn, resource, 11, SHARED)
    # The exclusive holder of 10, back after its tenure ended and the co-holders': refused.
    with pytest.raises(Stale) as refused:
        write(conn, resource, 10)
    assert (refused.value.highest, refused.value.got) == (12, 10)
    assert highest(conn, resource) == 12
    write(conn, resource, 13)
    with pytest.raises(Stale):
        write(conn, resource, 12, SHARED)
    assert register(conn, resource) == [10, 12, 11, 13]


def test_tokens_tenure_never_grants_are_refused(conn: "psycopg.Connection", resource: str) -> None:
    for token in (0, -1, 2**63, True, "5", 5.0):
        with pytest.raises(ValueError):
            write(conn, resource, token)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        write(conn, resource, 5, "sideways")
    assert register(conn, resource) == []


def pid(c: "psycopg.Connection") -> int:
    return int(c.execute("SELECT pg_backend_pid()").fetchone()[0])


def wait_blocked(observer: "psycopg.Connection", waiter: int, holder: int, task: threading.Thread) -> None:
    """Until PostgreSQL reports session `waiter` blocked by session `holder` (10 s at most)."""
    deadline = time.monotonic() + 10
    while not observer.execute("SELECT %s = ANY(pg_blocking_pids(%s))", (holder, waiter)).fetchone()[0]:
        assert task.is_alive(), "the writer did not wait for the row"
        assert time.monotonic() < deadline, "the writer is not waiting"
        time.sleep(0.01)


def test_a_stale_writer_waits_for_the_newer_one_then_is_refused(conn: "psycopg.Connection", resource: str) -> None:
    write(conn, resource, 3)
    refused: list[Stale] = []

    with psycopg.connect(PG, autocommit=True) as older, psycopg.connect(PG, autocommit=True) as newer:

        def late() -> None:
            try:
                write(older, resource, 5)
            except Stale as stale:
                refused.append(stale)

        older_pid, newer_pid = pid(older), pid(newer)
        with newer.transaction():
            guard(newer, resource, 7)
            task = threading.Thread(target=late)
            task.start()
            wait_blocked(conn, older_pid, newer_pid, task)
            newer.execute("INSERT INTO register (resource, token) VALUES (%s, 7)", (resource,))
        task.join()
    assert [(s.highest, s.got) for s in refused] == [(7, 5)]
    assert register(conn, resource) == [3, 7]
