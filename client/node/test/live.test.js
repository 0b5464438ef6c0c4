// The Node.js client against a live three-node cluster with auth on (run-live-test.sh starts
// it): TENURE_ENDPOINTS, LIVE_ADMIN_TOKEN and LIVE_CLIENT_TOKEN (principal `alice`).
import assert from "node:assert/strict";
import { once } from "node:events";
import { after, test } from "node:test";

import { Client, HeldLease, Reason, TenureError, durationMs } from "../src/index.js";

const endpoints = process.env.TENURE_ENDPOINTS;
assert.ok(endpoints, "TENURE_ENDPOINTS names the cluster (run-live-test.sh sets it)");
const admin = new Client(endpoints, { token: process.env.LIVE_ADMIN_TOKEN });
const alice = new Client(endpoints, { token: process.env.LIVE_CLIENT_TOKEN });
after(() => {
  admin.close();
  alice.close();
});

// A resource name of this run's own.
let names = 0;
const fresh = (what) => `node-test/${what}-${process.pid}-${++names}`;

async function refusal(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof TenureError, `a TenureError, not ${error}`);
    return error;
  }
  assert.fail("the call was not refused");
}

test("an acquire grants a lease fenced by its entry's index; a second holder is refused", async () => {
  const resource = fresh("exclusive");
  const first = await alice.acquire(resource, "w1", { ttlMs: 30000 });
  assert.equal(first.granted, true);
  const token = BigInt(first.lease.fencingToken);
  assert.ok(token > 0n);
  const status = await admin.clusterStatus();
  assert.ok(token <= BigInt(status.commitIndex), "the token is a committed log index");

  const second = await alice.acquire(resource, "w2", { ttlMs: 30000 });
  assert.equal(second.granted, false);
  assert.equal(second.reason, Reason.RESOURCE_UNAVAILABLE);
  assert.deepEqual(second.holders.map((l) => l.holder), ["w1"]);

  await alice.release(first.lease);
  const third = await alice.acquire(resource, "w2", { ttlMs: 30000 });
  assert.equal(third.granted, true);
  assert.ok(BigInt(third.lease.fencingToken) > token, "a later tenure has a larger token");
  await alice.release(third.lease);
});

test("renew extends the lease; release ends it; validate tells the live token from a stale one", async () => {
  const resource = fresh("cycle");
  const { lease } = await alice.acquire(resource, "w1", { ttlMs: 5000 });
  const renewed = await alice.renew(lease, { ttlMs: 60000 });
  assert.equal(renewed.fencingToken, lease.fencingToken);
  assert.equal(durationMs(renewed.ttl), 60000);
  assert.ok(durationMs(renewed.remaining) > 5000);

  const live = await alice.validate(resource, { fencingToken: lease.fencingToken });
  assert.equal(live.valid, true);
  const released = await alice.release(lease);
  assert.equal(released.status, "LEASE_STATUS_RELEASED");
  const stale = await alice.validate(resource, { fencingToken: lease.fencingToken });
  assert.equal(stale.valid, false);
  assert.match(stale.reason, /released/);
});

test("errors carry the contract's reason", async () => {
  const bad = await refusal(alice.acquire("no spaces allowed", "w1", { ttlMs: 5000 }));
  assert.equal(bad.reason, Reason.INVALID_ARGUMENT);
  assert.equal(bad.retryable, false);

  const stranger = new Client(endpoints, { token: "x".repeat(40) });
  try {
    const unknown = await refusal(stranger.getResource("anything"));
    assert.equal(unknown.reason, Reason.UNAUTHENTICATED);
  } finally {
    stranger.close();
  }

  const register = await refusal(alice.createResource(fresh("registered")));
  assert.equal(register.reason, Reason.INSUFFICIENT_PERMISSIONS);

  const resource = fresh("stale");
  const { lease } = await alice.acquire(resource, "w1", { ttlMs: 30000 });
  const wrong = await refusal(alice.renew({ ...lease, fencingToken: String(BigInt(lease.fencingToken) + 1000n) }));
  assert.equal(wrong.reason, Reason.STALE_FENCING_TOKEN);
  await alice.release(lease);
});

test("the client goes to the leader the replies name", async () => {
  const status = await admin.clusterStatus();
  await admin.getResource(fresh("any"));
  assert.equal(admin.endpoint, status.leaderAddr);
});

test("the lease helper renews the lease, and reports its loss when an admin releases it", async () => {
  const resource = fresh("held");
  const held = await alice.hold(resource, "keeper", { ttlMs: 1500 });
  const token = held.fencingToken;
  // Three renewals: the lease outlives its ttl twice over.
  for (let i = 0; i < 3; i++) {
    const [lease] = await once(held, "renewed");
    assert.equal(lease.fencingToken, token);
  }
  assert.equal((await alice.validate(resource, { fencingToken: token })).valid, true);
  assert.ok(held.remainingMs > 0);

  await admin.release(held.lease);
  const lost = await held.lost;
  assert.equal(lost.reason, Reason.LEASE_NOT_FOUND);
  assert.equal(held.remainingMs, 0);
  assert.equal(held.ended, true);
});

test("the lease helper reports the loss once the ttl passes with no renewal answered", async () => {
  const resource = fresh("cut-off");
  const ttlMs = 1200;
  const started = performance.now();
  const { lease } = await alice.acquire(resource, "w1", { ttlMs });
  // Renewals that cannot reach any node.
  const cutOff = new Client(["127.0.0.1:1"], { token: process.env.LIVE_CLIENT_TOKEN, timeoutMs: 200 });
  try {
    const held = new HeldLease(cutOff, lease, ttlMs, started);
    const lost = await held.lost;
    assert.equal(lost.reason, Reason.LEASE_EXPIRED);
    // Never reported before the ttl could have run out.
    assert.ok(performance.now() - started >= ttlMs);
  } finally {
    cutOff.close();
  }
});

test("a session's leases end together when it closes", async () => {
  const session = await alice.createSession("svc-1", { ttlMs: 10000 });
  const resources = [fresh("shard"), fresh("shard")];
  for (const resource of resources) {
    const reply = await alice.acquire(resource, "svc-1", { sessionId: session.sessionId });
    assert.equal(reply.granted, true);
    assert.equal(reply.lease.sessionId, session.sessionId);
  }
  const renewed = await alice.renewSession(session.sessionId);
  assert.equal(renewed.leaseCount, 2);
  const closed = await alice.closeSession(session.sessionId);
  assert.equal(closed.status, "SESSION_STATUS_CLOSED");
  for (const resource of resources) assert.equal((await alice.getResource(resource)).leases.length, 0);
  const gone = await refusal(alice.getSession(session.sessionId));
  assert.equal(gone.reason, Reason.SESSION_NOT_FOUND);
});

test("acquireMany grants all or none", async () => {
  const [a, b] = [fresh("account"), fresh("account")];
  const blocker = await alice.acquire(b, "other", { ttlMs: 30000 });
  const refused = await alice.acquireMany("mover", [{ resource: a }, { resource: b }], { ttlMs: 30000 });
  assert.equal(refused.granted, false);
  assert.equal((await alice.getResource(a)).leases.length, 0, "no partial grant");
  await alice.release(blocker.lease);
  const granted = await alice.acquireMany("mover", [{ resource: a }, { resource: b }], { ttlMs: 30000 });
  assert.equal(granted.granted, true);
  assert.equal(granted.leases.length, 2);
  assert.equal(granted.leases[0].fencingToken, granted.leases[1].fencingToken);
});

test("watch streams a resource's events as they happen", async () => {
  const resource = fresh("watched");
  const stop = new AbortController();
  const events = alice.watch({ resource, startRevision: "0", signal: stop.signal });
  const next = events.next();
  const { lease } = await alice.acquire(resource, "w1", { ttlMs: 30000 });
  let seen = [];
  for (let message = await next; !message.done; message = await events.next()) {
    seen = seen.concat(message.value.events);
    if (seen.length) break;
  }
  assert.equal(seen[0].event, "EVENT_TYPE_ACQUIRED");
  assert.equal(seen[0].fencingToken, lease.fencingToken);
  stop.abort();
  await events.return();
  await alice.release(lease);
});
