"""Fencing where the data lives: a guarded write into PostgreSQL with psycopg 3.

The same rule and SQL as the Rust crate `tenure-guard` (docs/fencing.md): the table
`tenure_fence` keeps, per resource, the highest token an exclusive writer and the highest a
shared writer has written with; a check made inside the caller's transaction, before its own
statements, refuses a stale token and holds the row's lock until the transaction ends, so the
check and the write are one step.

    import psycopg
    from tenure_client.guard import create_table, guard, Stale

    with psycopg.connect(dsn, autocommit=True) as conn:
        create_table(conn)
        try:
            with conn.transaction():
                guard(conn, "billing/ledger", lease.fencing_token)
                conn.execute("UPDATE ledger SET total = total + 10 WHERE id = 1")
        except Stale as stale:  # the transaction was rolled back: nothing of it applied
            print("fenced out:", stale.highest, ">", stale.got)

Needs `psycopg` (`pip install 'tenure_client[postgres]'`).
"""

from __future__ import annotations

from typing import Any

TABLE = """CREATE TABLE IF NOT EXISTS tenure_fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL CHECK (token >= 0),
    shared bigint NOT NULL DEFAULT 0 CHECK (shared >= 0)
)"""

# An exclusive writer's check: advance `token` unless a higher token has written; the row is
# locked either way, and a row comes back only if the token passed.
_EXCLUSIVE = """INSERT INTO tenure_fence AS f (resource, token) VALUES (%s, %s)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token AND f.shared <= EXCLUDED.token
RETURNING token"""
# A shared writer's tries, in turn: a new row with its token as `shared`; raising `shared` to
# its token; locking the row FOR SHARE (its token already recorded) and checking `token`.
_SHARED_NEW = """INSERT INTO tenure_fence (resource, token, shared) VALUES (%(r)s, 0, %(t)s)
ON CONFLICT (resource) DO NOTHING RETURNING token"""
_SHARED_RAISE = """UPDATE tenure_fence SET shared = %(t)s
WHERE resource = %(r)s AND shared < %(t)s AND token <= %(t)s RETURNING token"""
_SHARED_LOCK = "SELECT token FROM tenure_fence WHERE resource = %s FOR SHARE"
_HIGHEST = "SELECT GREATEST(token, shared) FROM tenure_fence WHERE resource = %s"

EXCLUSIVE = "exclusive"
SHARED = "shared"
_MAX_TOKEN = 2**63 - 1


class Stale(Exception):
    """A later tenure has already written: the caller's lease is gone, whatever it believes.

    Raised inside the caller's transaction, which must not commit (leaving a
    `conn.transaction()` block by this exception rolls it back).
    """

    def __init__(self, resource: str, highest: int, got: int) -> None:
        super().__init__(
            f"stale fencing token for {resource!r}: the store has seen {highest}, this write carries {got}"
        )
        self.resource = resource
        self.highest = highest
        self.got = got


def create_table(conn: Any) -> None:
    """Creates `tenure_fence` if it is missing (committed at once on an autocommit connection,
    else with the transaction the connection is in)."""
    with conn.transaction():
        conn.execute(TABLE)


def guard(conn: Any, resource: str, token: int, mode: str = EXCLUSIVE) -> None:
    """Checks `token` for `resource` in the transaction `conn` is in, before the caller's
    statements (docs/fencing.md): an exclusive writer's token must be at least every token
    written so far and becomes the fence; a shared writer's must be at least the exclusive
    fence (co-holders' tokens are not ordered against each other). Raises `Stale` (refused)
    or `ValueError` (not a token Tenure grants: they run from 1 to 2**63 - 1)."""
    if type(token) is not int or not 0 < token <= _MAX_TOKEN:
        raise ValueError(f"fencing token {token!r} is out of range (1 to {_MAX_TOKEN})")
    if mode == EXCLUSIVE:
        if conn.execute(_EXCLUSIVE, (resource, token)).fetchone() is not None:
            return
        fence = conn.execute(_HIGHEST, (resource,)).fetchone()[0]
    elif mode == SHARED:
        args = {"r": resource, "t": token}
        if conn.execute(_SHARED_NEW, args).fetchone() is not None:
            return
        if conn.execute(_SHARED_RAISE, args).fetchone() is not None:
            return
        fence = conn.execute(_SHARED_LOCK, (resource,)).fetchone()[0]
        if fence <= token:
            return
    else:
        raise ValueError(f"mode {mode!r} is neither {EXCLUSIVE!r} nor {SHARED!r}")
    raise Stale(resource, int(fence), token)


def highest(conn: Any, resource: str) -> int:
    """The highest token any writer has written `resource` with (0 if none has): the lowest
    an exclusive writer still passes with."""
    row = conn.execute(_HIGHEST, (resource,)).fetchone()
    return 0 if row is None else int(row[0])
