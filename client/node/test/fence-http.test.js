// The HTTP middleware (fenceMiddleware in src/guard.js) in a plain node:http server, its fence
// in the live PostgreSQL run-live-test.sh starts (TENURE_TEST_PG): a stale token answered 409
// with both tokens and the handler not called, the headers, the resource's lock held by
// another process keeping the handler out, and in this process writers taking turns, a
// client that leaves while waiting leaking neither the turn, the lock nor a connection.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import pg from "pg";

import { Headers, createTable, fenceMiddleware, highest } from "../src/guard.js";

const connectionString = process.env.TENURE_TEST_PG;
assert.ok(connectionString, "TENURE_TEST_PG names the PostgreSQL server (run-live-test.sh sets it)");
// libpq's keyword form, which node-postgres does not parse.
const settings = Object.fromEntries(connectionString.trim().split(/\s+/).map((kv) => kv.split("=")));
const pool = new pg.Pool({ host: settings.host, user: settings.user, database: settings.dbname });

// The tokens of the requests that arrived, and of those the handler was asked to write; a
// token in `holding` waits for its release.
const arrived = [];
const closed = [];
const written = [];
const holding = new Map();
const fence = fenceMiddleware({ pool });
const server = createServer((req, res) => {
  arrived.push(req.headers[Headers.TOKEN] ?? "-");
  res.once("close", () => closed.push(req.headers[Headers.TOKEN] ?? "-"));
  fence(req, res, async () => {
    const token = req.headers[Headers.TOKEN] ?? "-";
    assert.equal(String(req.tenure?.token ?? "-"), token, "the handler sees the admitted lease");
    written.push(token);
    const held = holding.get(token);
    if (held) {
      held.entered();
      await held.released;
    }
    res.writeHead(200).end("done");
  });
});
let base;

before(async () => {
  await createTable(pool);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}/ledger`;
});
after(async () => {
  await new Promise((resolve) => server.close(resolve));
  await pool.end();
});

let names = 0;
const fresh = (what) => `node-http/${what}-${process.pid}-${++names}`;

function send(method, headers) {
  return fetch(base, { method, headers });
}

test("a stale token is answered 409 with both tokens and the handler not called", async () => {
  const resource = fresh("stale");
  const lease = (token) => ({ [Headers.RESOURCE]: resource, [Headers.TOKEN]: token });
  const before = written.length;
  for (const token of ["5", "5", "9"]) {
    assert.equal((await send("POST", lease(token))).status, 200, `token ${token}`);
  }
  const refused = await send("POST", lease("5"));
  assert.equal(refused.status, 409);
  assert.equal(refused.headers.get(Headers.HIGHEST), "9");
  assert.deepEqual(await refused.json(), { error: "stale_fencing_token", resource, highest: "9", got: "5" });
  assert.deepEqual(written.slice(before), ["5", "5", "9"]);
  assert.equal(await highest(pool, resource), 9n, "the fence is in the database");
});

test("a write names its lease in well-formed headers", async () => {
  const before = written.length;
  const missing = await send("POST", {});
  assert.equal(missing.status, 428);
  assert.equal((await missing.json()).error, "fencing_token_required");
  assert.equal((await send("GET", {})).status, 200, "a read passes");
  for (const headers of [
    { [Headers.RESOURCE]: "r", [Headers.TOKEN]: "abc" },
    { [Headers.RESOURCE]: "r", [Headers.TOKEN]: "0" },
    { [Headers.RESOURCE]: "r" },
    { [Headers.RESOURCE]: "r", [Headers.TOKEN]: "4", [Headers.MODE]: "sometimes" },
  ]) {
    const response = await send("POST", headers);
    assert.equal(response.status, 400, JSON.stringify(headers));
    assert.equal((await response.json()).error, "invalid_fencing_headers");
  }
  assert.deepEqual(written.slice(before), ["-"], "only the read reached the handler");
});

// Polls `done` every 10 ms (checking `meanwhile` each time) until it holds, or fails in 10 s.
async function until(done, meanwhile, what) {
  const deadline = Date.now() + 10_000;
  while (!(await done())) {
    meanwhile();
    assert.ok(Date.now() < deadline, what);
    await new Promise((r) => setTimeout(r, 10));
  }
}

// Connections waiting for the advisory lock of `resource`, and those holding it.
async function advisory(resource) {
  const { rows } = await pool.query(
    `SELECT count(*) FILTER (WHERE NOT granted)::int AS waiting, count(*) FILTER (WHERE granted)::int AS held
       FROM pg_locks WHERE locktype = 'advisory' AND objid::bigint = (hashtextextended($1, 0) & 4294967295)`,
    [resource],
  );
  return rows[0];
}

test("the resource's lock held by another process keeps the handler out", async () => {
  const resource = fresh("lock");
  const other = await pool.connect(); // another process's writer, as far as the lock goes
  try {
    await other.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [resource]);
    const before = written.length;
    const request = send("POST", { [Headers.RESOURCE]: resource, [Headers.TOKEN]: "15" });
    await until(
      async () => (await advisory(resource)).waiting > 0,
      () => assert.deepEqual(written.slice(before), [], "the handler ran beside the lock's holder"),
      "the request is not waiting for the lock",
    );
    await other.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [resource]);
    assert.equal((await request).status, 200);
    assert.deepEqual(written.slice(before), ["15"]);
  } finally {
    other.release();
  }
});

test("writers take turns; one that leaves while waiting leaks no turn, lock or connection", async () => {
  const resource = fresh("turns");
  const lease = (token) => ({ [Headers.RESOURCE]: resource, [Headers.TOKEN]: token });
  let release;
  const entered = new Promise((resolve) => {
    holding.set("25", { entered: resolve, released: new Promise((r) => { release = r; }) });
  });
  const before = written.length;
  const first = send("POST", lease("25"));
  await entered;
  const leaving = new AbortController();
  const second = fetch(base, { method: "POST", headers: lease("29"), signal: leaving.signal });
  await until(async () => arrived.includes("29"), () => {}, "the second request did not arrive");
  leaving.abort();
  await assert.rejects(second);
  await until(async () => closed.includes("29"), () => {}, "the server did not see the client leave");
  release();
  assert.equal((await first).status, 200);
  assert.equal((await send("POST", lease("31"))).status, 200, "the next writer gets its turn");
  assert.deepEqual(written.slice(before), ["25", "31"]);
  holding.delete("25");
  await until(
    async () => {
      const { waiting, held } = await advisory(resource);
      return waiting + held === 0 && pool.totalCount === pool.idleCount;
    },
    () => {},
    "a lock or a connection was left behind",
  );
});
