// A Node.js client for a Tenure cluster over gRPC: @grpc/grpc-js with the messages loaded at
// run time from the repository's proto/ by @grpc/proto-loader (nothing generated, nothing
// hand-written about the wire).
//
// Messages are plain objects with lowerCamelCase fields; 64-bit integers (fencing tokens,
// revisions) are decimal strings, enums their names (`"LEASE_MODE_READ"`), durations
// `{seconds, nanos}` (use `ms()` and `durationMs()`), timestamps `{seconds, nanos}` (`toDate()`).

import { randomUUID } from "node:crypto";
import { EventEmitter, once } from "node:events";
import { existsSync } from "node:fs";
import { isIP } from "node:net";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { LEADER_HEADER, REASON_HEADER, Reason } from "./contract.js";

export { LEADER_HEADER, REASON_HEADER, Reason };

/** The proto files: packed into the package (`npm pack`), else the repository's proto/. */
function protoRoot() {
  const packed = fileURLToPath(new URL("../proto", import.meta.url));
  if (existsSync(`${packed}/tenure/v1/leases.proto`)) return packed;
  return fileURLToPath(new URL("../../../proto", import.meta.url));
}

const definition = protoLoader.loadSync(["tenure/v1/leases.proto", "tenure/v1/cluster.proto"], {
  includeDirs: [protoRoot()],
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const v1 = grpc.loadPackageDefinition(definition).tenure.v1;

/** A duration of `milliseconds`, as a message field wants it. */
export function ms(milliseconds) {
  const whole = Math.floor(milliseconds / 1000);
  return { seconds: String(whole), nanos: Math.round((milliseconds - whole * 1000) * 1e6) };
}

/** A duration message's length in milliseconds. */
export function durationMs(duration) {
  if (!duration) return 0;
  return Number(duration.seconds) * 1000 + (duration.nanos || 0) / 1e6;
}

/** A timestamp message as a Date. */
export function toDate(timestamp) {
  return new Date(durationMs(timestamp));
}

/** Whether `HOST:PORT` names this machine only (localhost, 127.0.0.0/8, ::1). */
export function isLoopback(endpoint) {
  let host = endpoint;
  if (host.startsWith("[")) host = host.slice(1).split("]")[0];
  else if (host.split(":").length === 2) host = host.split(":")[0];
  if (host.toLowerCase() === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  if (isIP(host) === 6) return host === "::1" || host === "0:0:0:0:0:0:0:1";
  return false;
}

/**
 * A call that failed: `reason` is the contract's reason (`stale_fencing_token`, …), as sent;
 * `code` the gRPC status code (a number of `grpc.status`).
 */
export class TenureError extends Error {
  constructor(reason, code, message) {
    super(`${reason}: ${message}`);
    this.name = "TenureError";
    this.reason = reason;
    this.code = code;
    this.details = message;
  }

  /** Whether the same request (same `requestId`) may be sent again, to another node. */
  get retryable() {
    return this.code === grpc.status.UNAVAILABLE || this.reason === Reason.UNAVAILABLE;
  }

  static fromGrpc(error) {
    const code = error.code ?? grpc.status.UNKNOWN;
    // The node always sends the reason as a trailer; without one, the transport failed (no
    // connection, deadline) and the code is all there is.
    const reason = header(error.metadata, REASON_HEADER) || (grpc.status[code] || "unknown").toLowerCase();
    return new TenureError(reason, code, error.details || error.message || "");
  }
}

function header(metadata, key) {
  const values = metadata?.get?.(key) || [];
  return values.length ? String(values[0]) : null;
}

const sleep = (millis) => new Promise((resolve) => setTimeout(resolve, millis));

/**
 * The name of `value` in the proto enum `type` (`"read"` or `"LEASE_MODE_READ"` →
 * `"LEASE_MODE_READ"`; absent → the `_UNSPECIFIED` default). A name the enum lacks throws: it
 * would otherwise travel as the default (an exclusive lease for a misspelt shared mode).
 */
function enumValue(type, prefix, value) {
  if (value === undefined || value === null) return `${prefix}_UNSPECIFIED`;
  const names = definition[`tenure.v1.${type}`].type.value.map((v) => v.name);
  const name = String(value).toUpperCase();
  const full = name.startsWith(`${prefix}_`) ? name : `${prefix}_${name}`;
  if (!names.includes(full)) throw new TypeError(`${value} is not a ${type} (${names.join(", ")})`);
  return full;
}

/** The margin a holder keeps below a lease's expiry (spec §5.3): max(100 ms, 1 % of the ttl). */
export function safetyMarginMs(ttlMs) {
  return Math.max(100, ttlMs / 100);
}

/** The server's default wait for an acquire that waits without a `waitTimeoutMs` (spec §2.3). */
const DEFAULT_WAIT_MS = 60000;

/** How long the call may wait in the room, beyond the client's own timeout. */
function waitAllowance(onConflict, waitTimeoutMs) {
  if (enumValue("OnConflict", "ON_CONFLICT", onConflict) !== "ON_CONFLICT_WAIT") return 0;
  return waitTimeoutMs || DEFAULT_WAIT_MS;
}

/** `setTimeout` for any delay: Node's own fires at once past 2^31 - 1 ms (24.8 days). */
function after(ms, fn) {
  const most = 2 ** 31 - 1;
  const due = performance.now() + ms;
  const timer = { id: null };
  const arm = () => {
    const left = due - performance.now();
    timer.id = setTimeout(left > most ? arm : fn, Math.max(0, Math.min(left, most)));
  };
  arm();
  return timer;
}

const cancel = (timer) => timer && clearTimeout(timer.id);

/**
 * A client of a Tenure cluster.
 *
 * Tries the endpoints in order, goes to the leader once a reply's `tenure-leader` header named
 * one of them, and retries `unavailable` answers and transport failures on the next endpoint
 * with the same `requestId` until `timeoutMs` (per call, retries included) has passed. Any
 * other failure rejects with a `TenureError` at once.
 */
export class Client {
  /**
   * @param {string | string[]} endpoints `HOST:PORT` list (or comma-separated string)
   * @param {object} [options]
   * @param {string} [options.token] bearer token (the node's `--token-file`)
   * @param {number} [options.timeoutMs] per call, retries included (5,000)
   * @param {Buffer} [options.caCert] the cluster CA (PEM): reach the nodes over TLS
   * @param {boolean} [options.insecure] allow a token in clear to a non-loopback endpoint
   */
  constructor(endpoints, { token, timeoutMs = 5000, caCert, insecure = false } = {}) {
    const list = (typeof endpoints === "string" ? endpoints.split(",") : endpoints)
      .map((e) => e.trim().replace(/^https?:\/\//, ""))
      .filter(Boolean);
    if (!list.length) throw new Error("no endpoints given");
    this.endpoints = list;
    this.timeoutMs = timeoutMs;
    this._credentials = caCert ? grpc.credentials.createSsl(caCert) : grpc.credentials.createInsecure();
    this._metadata = new grpc.Metadata();
    if (token) {
      const exposed = list.filter((e) => !isLoopback(e));
      if (exposed.length && !caCert && !insecure) {
        throw new Error(`refusing to send a bearer token in clear to ${exposed[0]}: give the cluster CA (caCert) to use TLS, or insecure: true`);
      }
      this._metadata.set("authorization", `Bearer ${token}`);
    }
    this._stubs = new Map();
    this._preferred = 0;
  }

  /** The endpoint tried first: the leader, once a reply's `tenure-leader` header named it. */
  get endpoint() {
    return this.endpoints[this._preferred];
  }

  /** Closes every connection. */
  close() {
    for (const stub of this._stubs.values()) stub.close();
    this._stubs.clear();
  }

  _stub(service, index) {
    const key = `${service}/${index}`;
    if (!this._stubs.has(key)) this._stubs.set(key, new v1[service](this.endpoints[index], this._credentials));
    return this._stubs.get(key);
  }

  _leaderIndex(...metadata) {
    for (const md of metadata) {
      const hint = header(md, LEADER_HEADER);
      if (hint && hint.includes("=")) {
        const index = this.endpoints.indexOf(hint.split("=")[1]);
        if (index >= 0) return index;
      }
    }
    return null;
  }

  _unary(service, index, method, request, deadline) {
    return new Promise((resolve, reject) => {
      let headers = null;
      const call = this._stub(service, index)[method](request, this._metadata, { deadline }, (error, response) => {
        if (error) {
          error.headers = headers;
          reject(error);
        } else resolve({ response, headers });
      });
      call.on("metadata", (md) => {
        headers = md;
      });
    });
  }

  /**
   * One logical call: the same request (the same `requestId`) to one endpoint after another
   * until it is answered or `timeoutMs` (+ `extraMs`, a wait's allowance) has passed. An
   * attempt that is not a wait gets at most half the budget (and at least 1 s), so a node
   * that never answers leaves time to ask another; running out of that share is retried.
   */
  async _call(service, method, request, extraMs = 0) {
    const now = () => performance.now();
    const deadline = now() + this.timeoutMs + extraMs;
    const share = extraMs > 0 ? Infinity : Math.max(1000, this.timeoutMs / 2);
    let index = this._preferred;
    let backoff = 10;
    for (;;) {
      const attemptEnds = Math.min(deadline, now() + share);
      try {
        const { response, headers } = await this._unary(service, index, method, request, new Date(Date.now() + (attemptEnds - now())));
        this._preferred = this._leaderIndex(headers) ?? index;
        return response;
      } catch (raw) {
        if (raw instanceof TenureError || raw.code === undefined) throw raw;
        const error = TenureError.fromGrpc(raw);
        const leader = this._leaderIndex(raw.headers, raw.metadata);
        if (leader !== null) this._preferred = leader;
        // Our own share of the budget ran out, not the call's: another node may answer.
        const shareSpent = raw.code === grpc.status.DEADLINE_EXCEEDED && !header(raw.metadata, REASON_HEADER) && attemptEnds < deadline;
        if (!(error.retryable || shareSpent) || now() + backoff >= deadline) throw error;
        // The named leader if it is another node, else the next endpoint.
        index = leader !== null && leader !== index ? leader : (index + 1) % this.endpoints.length;
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 200);
      }
    }
  }

  // --- tenure.v1.Leases ------------------------------------------------------------------

  /**
   * Contention is an answer, not an error: branch on `granted` (and `reason`).
   * With `sessionId` the lease lives on that session and has no ttl of its own.
   * With `onConflict: "wait"` the call waits up to `waitTimeoutMs` in the waiting room.
   */
  acquire(resource, holder, { ttlMs, mode, units = 0, metadata = {}, onConflict, waitTimeoutMs, idempotencyKey = "", sessionId = "", requestId = randomUUID() } = {}) {
    const request = {
      resource,
      holder,
      ttl: ttlMs === undefined ? null : ms(ttlMs),
      mode: enumValue("LeaseMode", "LEASE_MODE", mode),
      units: String(units),
      metadata,
      onConflict: enumValue("OnConflict", "ON_CONFLICT", onConflict),
      waitTimeout: waitTimeoutMs === undefined ? null : ms(waitTimeoutMs),
      idempotencyKey,
      requestId,
      sessionId,
    };
    return this._call("Leases", "Acquire", request, waitAllowance(onConflict, waitTimeoutMs));
  }

  /** All or none: `claims` is `[{resource, mode, units}]`; one fencing token for every lease. */
  acquireMany(holder, claims, { ttlMs, metadata = {}, onConflict, waitTimeoutMs, sessionId = "", requestId = randomUUID() } = {}) {
    const request = {
      holder,
      claims: claims.map((c) => ({ resource: c.resource, mode: enumValue("LeaseMode", "LEASE_MODE", c.mode), units: String(c.units || 0) })),
      ttl: ttlMs === undefined ? null : ms(ttlMs),
      metadata,
      onConflict: enumValue("OnConflict", "ON_CONFLICT", onConflict),
      waitTimeout: waitTimeoutMs === undefined ? null : ms(waitTimeoutMs),
      requestId,
      sessionId,
    };
    return this._call("Leases", "AcquireMany", request, waitAllowance(onConflict, waitTimeoutMs));
  }

  /** The lease with its new expiry (`ttlMs` absent: its last ttl). */
  async renew(lease, { ttlMs } = {}) {
    const request = {
      resource: lease.resource,
      leaseId: lease.leaseId,
      holder: lease.holder,
      fencingToken: lease.fencingToken,
      ttl: ttlMs === undefined ? null : ms(ttlMs),
      requestId: randomUUID(),
    };
    return (await this._call("Leases", "Renew", request)).lease;
  }

  /** Ends the lease at once; the released lease. */
  async release(lease, { requestId = randomUUID() } = {}) {
    const request = { resource: lease.resource, leaseId: lease.leaseId, holder: lease.holder, fencingToken: lease.fencingToken, requestId };
    return (await this._call("Leases", "Release", request)).lease;
  }

  /**
   * Takes `holder` out of `resource`'s waiting room (its blocked acquire answers
   * `wait_cancelled`); false when it was not waiting. With `queuedRevision` (a waiter's) only
   * the wait that entry queued, never a newer one of the same holder.
   */
  async cancelWait(resource, holder, { queuedRevision = 0, requestId = randomUUID() } = {}) {
    return (await this._call("Leases", "CancelWait", { resource, holder, queuedRevision, requestId })).cancelled;
  }

  /** The new holder's lease: a new fencing token, the old expiry. */
  async transfer(lease, toHolder, toPrincipal = "", { requestId = randomUUID() } = {}) {
    const request = {
      resource: lease.resource,
      leaseId: lease.leaseId,
      holder: lease.holder,
      fencingToken: lease.fencingToken,
      toHolder,
      toPrincipal,
      requestId,
    };
    return (await this._call("Leases", "Transfer", request)).lease;
  }

  /** Always answered: branch on `valid`; `reason` says why not. */
  validate(resource, { leaseId = "", fencingToken = "0", fsmMachine = "", fsmTransition = "" } = {}) {
    return this._call("Leases", "Validate", { resource, leaseId, fencingToken: String(fencingToken), fsmMachine, fsmTransition });
  }

  async getResource(name) {
    return (await this._call("Leases", "GetResource", { name })).resource;
  }

  /** Registers a resource (admin only); absent policy fields take the registered defaults. */
  async createResource(name, { policy = null, kind = "", displayName = "" } = {}) {
    return (await this._call("Leases", "CreateResource", { name, kind, displayName, policy, requestId: randomUUID() })).resource;
  }

  /** One page of a resource's events, newest first unless `order: "asc"`. */
  history(resource, { pageSize = 100, order = "desc", pageToken = "", events = [] } = {}) {
    return this._call("Leases", "History", {
      resource,
      pageSize,
      pageToken,
      order: enumValue("Order", "ORDER", order),
      events: events.map((e) => enumValue("EventType", "EVENT_TYPE", e)),
    });
  }

  /** One page of the live leases of a holder and/or a principal. */
  listLeases({ holder = "", principal = "", pageSize = 100, pageToken = "" } = {}) {
    return this._call("Leases", "ListLeases", { holder, principal, pageSize, pageToken });
  }

  /**
   * Events as they happen, from the resource (or every resource under `prefix`), after
   * `startRevision` ("0": from the oldest kept). An async iterator of `WatchResponse`s; it
   * throws a `TenureError` when the node ends the stream with an error, and ends when `signal`
   * (an AbortSignal) aborts or the loop that reads it stops.
   */
  async *watch({ resource = "", prefix = "", startRevision = "0", liveOnly = false, signal } = {}) {
    if (signal?.aborted) return;
    const call = this._stub("Leases", this._preferred).Watch({ resource, prefix, startRevision: String(startRevision), events: [], liveOnly }, this._metadata);
    const cancel = () => call.cancel();
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      for await (const message of call) yield message;
    } catch (error) {
      if (signal?.aborted && error.code === grpc.status.CANCELLED) return;
      throw error.code === undefined ? error : TenureError.fromGrpc(error);
    } finally {
      signal?.removeEventListener("abort", cancel);
      call.cancel();
    }
  }

  // --- sessions --------------------------------------------------------------------------

  /** A session: one heartbeat for every lease acquired with its `sessionId`. */
  async createSession(holder, { ttlMs, metadata = {} } = {}) {
    return (await this._call("Leases", "CreateSession", { holder, ttl: ttlMs === undefined ? null : ms(ttlMs), metadata, requestId: randomUUID() })).session;
  }

  async renewSession(sessionId) {
    return (await this._call("Leases", "RenewSession", { sessionId, requestId: randomUUID() })).session;
  }

  /** Ends the session: every lease on it released, every wait cancelled, at once. */
  async closeSession(sessionId) {
    return (await this._call("Leases", "CloseSession", { sessionId, requestId: randomUUID() })).session;
  }

  async getSession(sessionId) {
    return (await this._call("Leases", "GetSession", { sessionId })).session;
  }

  // --- tenure.v1.Cluster -----------------------------------------------------------------

  /** Members, leader, term and indexes, from whichever node answers (admin only). */
  clusterStatus() {
    return this._call("Cluster", "Status", {});
  }

  // --- the lease helper ------------------------------------------------------------------

  /**
   * Acquires `resource` for `holder` and keeps the lease: renews it every third of its ttl,
   * emits `renewed` (the lease) each time, and `lost` (a `TenureError`) once, when it can no
   * longer be sure it holds it. Resolves to the `HeldLease` once granted; rejects with a
   * `TenureError` whose reason is the refusal when it is not granted (`resource_unavailable`,
   * …). Pass `onConflict: "wait"` (and `waitTimeoutMs`, 60 s by default) to wait for it.
   */
  async hold(resource, holder, { ttlMs = 15000, ...options } = {}) {
    if (options.sessionId) {
      throw new TypeError("a lease on a session lives as long as its session: keep the session alive (renewSession) instead");
    }
    const sent = performance.now();
    const reply = await this.acquire(resource, holder, { ttlMs, ...options });
    if (!reply.granted) throw new TenureError(reply.reason, grpc.status.OK, `${resource} was not granted: ${reply.reason}`);
    // The lease lasts from the granting entry, which came after `sent`; a lease the holder
    // already had comes back as it was, with what is left of it.
    const left = Math.min(ttlMs, durationMs(reply.lease.remaining) || ttlMs);
    const held = new HeldLease(this, reply.lease, ttlMs, sent, left);
    // Granted after a long wait: renew now, so the deadline rests on a request sent after
    // the grant, before handing the lease over.
    if (performance.now() - sent > left / 3) {
      await Promise.race([once(held, "renewed"), held.lost]);
      if (held.ended) throw await held.lost;
    }
    return held;
  }
}

/** Renewal refusals that mean the lease is gone or cannot be kept; any other failure is retried. */
const FINAL = new Set([
  Reason.LEASE_NOT_FOUND,
  Reason.LEASE_EXPIRED,
  Reason.STALE_FENCING_TOKEN,
  Reason.LIFETIME_EXCEEDED,
  Reason.RESOURCE_BOOKED,
  Reason.INSUFFICIENT_PERMISSIONS,
  Reason.UNAUTHENTICATED,
  Reason.INVALID_ARGUMENT,
  Reason.TTL_OUT_OF_RANGE,
]);

/**
 * A lease kept alive by its client (from `Client.hold`). `lease` is the lease as last renewed
 * (its `fencingToken` never changes). `valid` says whether it is surely still held; check it
 * before each write. `lost` resolves, once, to the `TenureError` that ended it (it stays
 * pending after `release()`); events `renewed` (lease) and `lost` (error).
 *
 * Its deadline is the send time of the last renewal that succeeded (or of the acquire) plus
 * the ttl, less a safety margin of max(100 ms, 1 % of the ttl): the cluster's expiry is later.
 * The loss is reported when a renewal is refused for good (the lease expired, was released or
 * reclaimed, or its token is stale: that refusal's reason), or when the deadline passes with
 * no renewal answered (`lease_expired`): past it the cluster may have given the resource to
 * another holder, so stop using the token. Other failures are retried until the deadline.
 */
export class HeldLease extends EventEmitter {
  constructor(client, lease, ttlMs, sentAt, leftMs = ttlMs) {
    super();
    this.client = client;
    this.lease = lease;
    this.ttlMs = ttlMs;
    this.ended = false;
    this._deadline = sentAt + leftMs - safetyMarginMs(ttlMs);
    this.lost = new Promise((resolve) => {
      this._resolveLost = resolve;
    });
    this._renewal = null;
    this._schedule(Math.max(0, sentAt + leftMs / 3 - performance.now()));
  }

  /** The lease's fencing token: send it with every write to what the lease protects. */
  get fencingToken() {
    return this.lease.fencingToken;
  }

  /** Whether the lease is surely still held: not lost, not released, its deadline ahead. */
  get valid() {
    return !this.ended && performance.now() < this._deadline;
  }

  /** Milliseconds the lease is surely held for (0 once lost or released). */
  get remainingMs() {
    return this.ended ? 0 : Math.max(0, this._deadline - performance.now());
  }

  _schedule(nextRenewalMs) {
    if (this.ended) return;
    cancel(this._timer);
    this._timer = after(nextRenewalMs, () => this._renew());
    cancel(this._expiry);
    this._expiry = after(Math.max(0, this._deadline - performance.now()), () => {
      this._lose(new TenureError(Reason.LEASE_EXPIRED, grpc.status.DEADLINE_EXCEEDED, `no renewal of ${this.lease.resource} was answered before its deadline`));
    });
  }

  async _renew() {
    if (this.ended) return;
    const sent = performance.now();
    let renewed = null;
    let failure = null;
    try {
      this._renewal = this.client.renew(this.lease, { ttlMs: this.ttlMs });
      renewed = await this._renewal;
    } catch (error) {
      failure = error;
    }
    if (this.ended) return;
    if (renewed) {
      this.lease = renewed;
      this._deadline = sent + this.ttlMs - safetyMarginMs(this.ttlMs);
      this._schedule(this.ttlMs / 3);
      this.emit("renewed", renewed);
    } else if (failure instanceof TenureError && FINAL.has(failure.reason)) {
      this._lose(failure);
    } else {
      // Soon again; the expiry timer reports the loss if none gets through in time.
      cancel(this._timer);
      this._timer = after(Math.min(1000, this.ttlMs / 10), () => this._renew());
    }
  }

  _lose(error) {
    if (this.ended) return;
    this._stop();
    this._resolveLost(error);
    this.emit("lost", error);
  }

  _stop() {
    this.ended = true;
    cancel(this._timer);
    cancel(this._expiry);
  }

  /** Stops renewing and releases the lease; the released lease. */
  async release() {
    this._stop();
    await this._renewal?.catch(() => {});
    return this.client.release(this.lease);
  }
}
