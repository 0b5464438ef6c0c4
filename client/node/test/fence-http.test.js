// The HTTP middleware (fenceMiddleware in src/guard.js) in a plain node:http server, its fence
// in the live PostgreSQL run-live-test.sh starts (TENURE_TEST_PG): a stale token answered 409
// with both tokens and the handler not called, the headers, and the resource's lock held from
// the check until the response is sent.
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

// What the handler was asked to write, by token; a token in `holding` waits for its release.
const written = [];
const holding = new Map();
const fence = fenceMiddleware({ pool });
const server = createServer((req, res) => {
  fence(req, res, async () => {
    const token = req.headers[Headers.TOKEN] ?? "-";
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

test("the lock is held from the check until the response is sent", async () => {
  const resource = fresh("lock");
  const lease = (token) => ({ [Headers.RESOURCE]: resource, [Headers.TOKEN]: token });
  let release;
  const entered = new Promise((resolve) => {
    holding.set("15", { entered: resolve, released: new Promise((r) => { release = r; }) });
  });
  const before = written.length;
  const first = send("POST", lease("15"));
  await entered;
  const second = send("POST", lease("19"));
  // The second request's connection waits for the advisory lock the first holds.
  const observer = await pool.connect();
  try {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const { rows } = await observer.query(
        "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
      );
      if (rows[0].n > 0) break;
      assert.deepEqual(written.slice(before), ["15"], "the second ran beside the first");
      assert.ok(Date.now() < deadline, "the second is not waiting for the lock");
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    observer.release();
  }
  assert.deepEqual(written.slice(before), ["15"]);
  release();
  assert.equal((await first).status, 200);
  assert.equal((await second).status, 200);
  assert.deepEqual(written.slice(before), ["15", "19"]);
  holding.delete("15");
});
