// The PostgreSQL guard (src/guard.js) against a live server, with tokens from the live cluster
// (run-live-test.sh starts both): TENURE_TEST_PG, TENURE_ENDPOINTS, LIVE_CLIENT_TOKEN.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import pg from "pg";

import { Client } from "../src/index.js";
import { Mode, StaleFencingToken, createTable, guard, highest } from "../src/guard.js";

const connectionString = process.env.TENURE_TEST_PG;
assert.ok(connectionString, "TENURE_TEST_PG names the PostgreSQL server (run-live-test.sh sets it)");
const alice = new Client(process.env.TENURE_ENDPOINTS, { token: process.env.LIVE_CLIENT_TOKEN });
const connections = [];

// TENURE_TEST_PG is libpq's keyword form (`host=/tmp/… user=tenure dbname=postgres`), which
// node-postgres does not parse.
const settings = Object.fromEntries(connectionString.trim().split(/\s+/).map((kv) => kv.split("=")));
const config = { host: settings.host, user: settings.user, database: settings.dbname };

async function connect() {
  const db = new pg.Client(config);
  await db.connect();
  connections.push(db);
  return db;
}

let db;
before(async () => {
  db = await connect();
  await createTable(db);
  await db.query("CREATE TABLE IF NOT EXISTS register (id bigserial PRIMARY KEY, resource text, token bigint)");
});
after(async () => {
  alice.close();
  await Promise.all(connections.map((c) => c.end()));
});

let names = 0;
const fresh = (what) => `node-guard/${what}-${process.pid}-${++names}`;

// One guarded write into `register`, on its own connection's transaction.
async function write(conn, resource, token, mode = Mode.EXCLUSIVE) {
  await conn.query("BEGIN");
  try {
    await guard(conn, resource, token, mode);
    await conn.query("INSERT INTO register (resource, token) VALUES ($1, $2)", [resource, String(token)]);
    await conn.query("COMMIT");
  } catch (error) {
    await conn.query("ROLLBACK");
    throw error;
  }
}

async function register(resource) {
  const { rows } = await db.query("SELECT token FROM register WHERE resource = $1 ORDER BY id", [resource]);
  return rows.map((r) => BigInt(r.token));
}

async function stale(promise) {
  const error = await promise.then(() => assert.fail("the write was not refused"), (e) => e);
  assert.ok(error instanceof StaleFencingToken, `${error}`);
  return error;
}

test("a holder after a release fences out the one before, whose write is rolled back", async () => {
  const resource = fresh("handover");
  const first = await alice.acquire(resource, "w1", { ttlMs: 30000 });
  assert.equal(first.granted, true);
  await write(db, resource, first.lease.fencingToken);
  await alice.release(first.lease);
  const second = await alice.acquire(resource, "w2", { ttlMs: 30000 });
  assert.equal(second.granted, true);
  const [a, b] = [BigInt(first.lease.fencingToken), BigInt(second.lease.fencingToken)];
  assert.ok(b > a);
  await write(db, resource, second.lease.fencingToken);
  const refused = await stale(write(db, resource, first.lease.fencingToken));
  assert.deepEqual([refused.highest, refused.got], [b, a]);
  assert.match(refused.message, new RegExp(`seen ${b}, this write carries ${a}`));
  assert.deepEqual(await register(resource), [a, b]);
  assert.equal(await highest(db, resource), b);
});

test("shared writers are checked against the exclusive fence and fence out older ones", async () => {
  const resource = fresh("shared");
  await write(db, resource, 10n);
  await stale(write(db, resource, 8n, Mode.SHARED));
  await write(db, resource, 12n, Mode.SHARED);
  await write(db, resource, 11n, Mode.SHARED);
  // The exclusive holder of 10, back after its tenure ended and the co-holders': refused.
  const refused = await stale(write(db, resource, 10n));
  assert.deepEqual([refused.highest, refused.got], [12n, 10n]);
  assert.equal(await highest(db, resource), 12n);
  await write(db, resource, 13n);
  await stale(write(db, resource, 12n, Mode.SHARED));
  assert.deepEqual(await register(resource), [10n, 12n, 11n, 13n]);
});

test("tokens Tenure never grants are refused before the database sees them", async () => {
  const resource = fresh("range");
  for (const token of ["0", "-3", "nine", "0x10", " 5", true, 2 ** 60, 5.5, (1n << 63n).toString()]) {
    await assert.rejects(write(db, resource, token), RangeError, `token ${String(token)}`);
  }
  await assert.rejects(write(db, resource, 5n, "sideways"), RangeError);
  assert.deepEqual(await register(resource), []);
});

const pid = async (conn) => (await conn.query("SELECT pg_backend_pid() AS pid")).rows[0].pid;

// Until PostgreSQL reports session `waiter` blocked by session `holder` (10 s at most), failing
// if the waiter's write settles first.
async function blocked(waiter, holder, pending) {
  let settled = false;
  pending.then(
    () => (settled = true),
    () => (settled = true),
  );
  const deadline = Date.now() + 10000;
  const query = "SELECT $2::int = ANY(pg_blocking_pids($1::int)) AS blocked";
  while (!(await db.query(query, [waiter, holder])).rows[0].blocked) {
    assert.ok(!settled, "the writer did not wait for the row");
    assert.ok(Date.now() < deadline, "the writer is not waiting");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a stale writer waits while a newer one holds the row, then is refused", async () => {
  const resource = fresh("wait");
  const [newer, older] = [await connect(), await connect()];
  const [newerPid, olderPid] = [await pid(newer), await pid(older)];
  await write(older, resource, 3n);
  await newer.query("BEGIN");
  await guard(newer, resource, 7n);
  const late = stale(write(older, resource, 5n));
  await blocked(olderPid, newerPid, late);
  await newer.query("INSERT INTO register (resource, token) VALUES ($1, 7)", [resource]);
  await newer.query("COMMIT");
  const refused = await late;
  assert.deepEqual([refused.highest, refused.got], [7n, 5n]);
  assert.deepEqual(await register(resource), [3n, 7n]);
});
