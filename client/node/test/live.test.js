// The Node.js client against a live three-node cluster with auth on (run-live-test.sh starts
// it): TENURE_ENDPOINTS, LIVE_ADMIN_TOKEN and LIVE_CLIENT_TOKEN (principal `alice`).
import assert from "node:assert/strict";
import { once } from "node:events";
import { after, test } from "node:test";

import { Client, HeldLease, Reason, TenureError, durationMs, safetyMarginMs } from "../src/index.js";

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
  // The entry that granted it is in the log the lease's history names.
  const [acquired] = (await alice.history(resource, { order: "asc", pageSize: 1 })).entries;
  assert.equal(acquired.event, "EVENT_TYPE_ACQUIRED");
  assert.equal(BigInt(acquired.revision), token, "the token is the granting entry's index");

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
  let status = await admin.clusterStatus();
  while (status.leaderId === "0") status = await admin.clusterStatus();
  // The endpoints with a follower first: the first reply names the leader, and the client
  // goes there.
  const list = endpoints.split(",");
  const rotated = [...list.filter((e) => e !== status.leaderAddr), status.leaderAddr];
  const follower = new Client(rotated, { token: process.env.LIVE_ADMIN_TOKEN });
  try {
    assert.notEqual(follower.endpoint, status.leaderAddr);
    await follower.getResource(fresh("any"));
    assert.equal(follower.endpoint, status.leaderAddr);
  } finally {
    follower.close();
  }
});

test("a mode, order or conflict rule the proto does not have is refused before it is sent", () => {
  assert.throws(() => alice.acquire(fresh("typo"), "w1", { mode: "shared" }), TypeError);
  assert.throws(() => alice.history(fresh("typo"), { order: "ascending" }), TypeError);
  assert.throws(() => alice.acquire(fresh("typo"), "w1", { onConflict: "queue" }), TypeError);
});

// The next `renewed` event, or the loss that came first (a failure, not a hang).
async function nextRenewal(held) {
  const renewed = once(held, "renewed").then(([lease]) => lease);
  const lost = held.lost.then((error) => assert.fail(`lost before a renewal: ${error}`));
  return Promise.race([renewed, lost]);
}

test("the lease helper renews the lease, and reports its loss when an admin releases it", async (t) => {
  const resource = fresh("held");
  const held = await alice.hold(resource, "keeper", { ttlMs: 1500 });
  t.after(() => held.ended || held.release().catch(() => {}));
  const token = held.fencingToken;
  // Three renewals: the lease outlives its ttl twice over.
  for (let i = 0; i < 3; i++) {
    const lease = await nextRenewal(held);
    assert.equal(lease.fencingToken, token);
    assert.ok(held.valid);
  }
  assert.equal((await alice.validate(resource, { fencingToken: token })).valid, true);
  assert.ok(held.remainingMs > 0);

  await admin.release(held.lease);
  const lost = await held.lost;
  assert.equal(lost.reason, Reason.LEASE_NOT_FOUND);
  assert.equal(held.remainingMs, 0);
  assert.equal(held.valid, false);
});

test("the lease helper counts what is left of a lease the holder already had", async (t) => {
  const resource = fresh("again");
  await alice.acquire(resource, "keeper", { ttlMs: 4000 });
  // The same holder acquires again: the lease it had comes back unchanged, with less than
  // the ttl asked for; the helper's deadline is that, not 60 s.
  const held = await alice.hold(resource, "keeper", { ttlMs: 60000 });
  t.after(() => held.ended || held.release().catch(() => {}));
  assert.ok(held.remainingMs <= 4000, `${held.remainingMs} ms`);
  // So it renews within a third of what was left, not of the 60 s it asked for.
  const lease = await nextRenewal(held);
  assert.equal(durationMs(lease.ttl), 60000);
  assert.ok(held.remainingMs > 4000);
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
    // Reported by the deadline (the ttl less the safety margin), not before it.
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= ttlMs - safetyMarginMs(ttlMs) - 2, `${elapsed} ms`);
    assert.equal(held.valid, false);
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

test("cancelWait ends only the wait it names", async () => {
  const resource = fresh("room");
  const held = await alice.acquire(resource, "owner", { ttlMs: 30000 });
  const waiting = alice.acquire(resource, "w", { ttlMs: 30000, onConflict: "wait", waitTimeoutMs: 60000 });
  let waiters = [];
  while (!waiters.length) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    waiters = (await alice.getResource(resource)).waiters;
  }
  const queued = BigInt(waiters[0].queuedRevision);
  assert.equal(await alice.cancelWait(resource, "w", { queuedRevision: String(queued - 1n) }), false, "another entry's wait");
  assert.equal(await alice.cancelWait(resource, "w", { queuedRevision: String(queued) }), true);
  const answer = await waiting;
  assert.equal(answer.granted, false);
  assert.equal(answer.reason, Reason.WAIT_CANCELLED);
  await alice.release(held.lease);
});

test("watch streams a resource's events as they happen", async () => {
  const resource = fresh("watched");
  const stop = new AbortController();
  const events = alice.watch({ resource, startRevision: "0", signal: stop.signal });
  const next = events.next();
  const { lease } = await alice.acquire(resource, "w1", { ttlMs: 30000 });
  let seen = [];
  // Progress messages carry no events: read until one does (the test's timeout bounds it).
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
