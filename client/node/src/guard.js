// Fencing where the data lives: a guarded write into PostgreSQL with `pg` (node-postgres).
//
// The same rule and SQL as the Rust crate `tenure-guard` (docs/fencing.md): the table
// `tenure_fence` keeps, per resource, the highest token an exclusive writer and the highest a
// shared writer has written with; a check made inside the caller's transaction, before its
// own statements, refuses a stale token and holds the row's lock until the transaction ends,
// so the check and the write are one step.
//
//   import pg from "pg";
//   import { createTable, guard, StaleFencingToken } from "tenure-client/guard";
//
//   const db = new pg.Client(connectionString);   // one connection: a transaction lives on it
//   await db.connect();
//   await createTable(db);
//   await db.query("BEGIN");
//   try {
//     await guard(db, "billing/ledger", lease.fencingToken);
//     await db.query("UPDATE ledger SET total = total + 10 WHERE id = 1");
//     await db.query("COMMIT");
//   } catch (error) {
//     await db.query("ROLLBACK");   // nothing of it applied
//     if (!(error instanceof StaleFencingToken)) throw error;
//   }
//
// With a pg.Pool, check a client out (`await pool.connect()`) for the whole transaction.

export const TABLE = `CREATE TABLE IF NOT EXISTS tenure_fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL CHECK (token >= 0),
    shared bigint NOT NULL DEFAULT 0 CHECK (shared >= 0)
)`;

// An exclusive writer's check: advance `token` unless a higher token has written; the row is
// locked either way, and a row comes back only if the token passed.
const EXCLUSIVE = `INSERT INTO tenure_fence AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token AND f.shared <= EXCLUDED.token
RETURNING token`;
// A shared writer's tries, in turn: a new row with its token as `shared`; raising `shared` to
// its token; locking the row FOR SHARE (its token already recorded) and checking `token`.
const SHARED_NEW = `INSERT INTO tenure_fence (resource, token, shared) VALUES ($1, 0, $2)
ON CONFLICT (resource) DO NOTHING RETURNING token`;
const SHARED_RAISE = `UPDATE tenure_fence SET shared = $2
WHERE resource = $1 AND shared < $2 AND token <= $2 RETURNING token`;
const SHARED_LOCK = "SELECT token FROM tenure_fence WHERE resource = $1 FOR SHARE";
const HIGHEST = "SELECT GREATEST(token, shared) AS token FROM tenure_fence WHERE resource = $1";
const MAX_TOKEN = (1n << 63n) - 1n;

/** The modes a writer holds its lease in. */
export const Mode = Object.freeze({ EXCLUSIVE: "exclusive", SHARED: "shared" });

/**
 * A later tenure has already written: the caller's lease is gone, whatever it believes. Thrown
 * inside the caller's transaction, which must be rolled back. `highest` and `got` are BigInts.
 */
export class StaleFencingToken extends Error {
  constructor(resource, highest, got) {
    super(`stale fencing token for ${JSON.stringify(resource)}: the store has seen ${highest}, this write carries ${got}`);
    this.name = "StaleFencingToken";
    this.resource = resource;
    this.highest = highest;
    this.got = got;
  }
}

/** Creates `tenure_fence` if it is missing. */
export async function createTable(db) {
  await db.query(TABLE);
}

// A token as the client gives it (a decimal string), a BigInt, or a safe integer Number.
function tokenOf(token) {
  let value = -1n;
  if (typeof token === "bigint") value = token;
  else if (typeof token === "string" && /^[1-9][0-9]*$/.test(token)) value = BigInt(token);
  else if (typeof token === "number" && Number.isSafeInteger(token)) value = BigInt(token);
  if (value < 1n || value > MAX_TOKEN) {
    throw new RangeError(`fencing token ${String(token)} is out of range (1 to ${MAX_TOKEN})`);
  }
  return value;
}

/**
 * Checks `token` for `resource` in the transaction `db` is in, before the caller's statements
 * (docs/fencing.md): an exclusive writer's token must be at least every token written so far
 * and becomes the fence; a shared writer's must be at least the exclusive fence (co-holders'
 * tokens are not ordered against each other). Throws StaleFencingToken (refused) or
 * RangeError (not a token Tenure grants).
 */
export async function guard(db, resource, token, mode = Mode.EXCLUSIVE) {
  const got = tokenOf(token);
  const args = [resource, got.toString()];
  let fence;
  if (mode === Mode.EXCLUSIVE) {
    if ((await db.query(EXCLUSIVE, args)).rows.length > 0) return;
    fence = BigInt((await db.query(HIGHEST, [resource])).rows[0].token);
  } else if (mode === Mode.SHARED) {
    if ((await db.query(SHARED_NEW, args)).rows.length > 0) return;
    if ((await db.query(SHARED_RAISE, args)).rows.length > 0) return;
    fence = BigInt((await db.query(SHARED_LOCK, [resource])).rows[0].token);
    if (fence <= got) return;
  } else {
    throw new RangeError(`mode ${mode} is neither "${Mode.EXCLUSIVE}" nor "${Mode.SHARED}"`);
  }
  throw new StaleFencingToken(resource, fence, got);
}

/**
 * The highest token any writer has written `resource` with (0n if none has): the lowest an
 * exclusive writer still passes with.
 */
export async function highest(db, resource) {
  const { rows } = await db.query(HIGHEST, [resource]);
  return rows.length === 0 ? 0n : BigInt(rows[0].token);
}

// ---------------------------------------------------------------------------------------
// HTTP: a service that takes writes over HTTP fences them by the lease its caller names.

/** The headers a writer names its lease in (lower case, as Node.js gives them). */
export const Headers = Object.freeze({
  RESOURCE: "tenure-resource",
  TOKEN: "tenure-fencing-token",
  MODE: "tenure-lease-mode",
  HIGHEST: "tenure-fencing-token-highest",
});

const READS = new Set(["GET", "HEAD", "OPTIONS", "TRACE"]);

function answer(res, status, body, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

// The request's lease, null if it names none; throws RangeError for a malformed one: a header
// given twice, a resource without a token or the other way round, a token Tenure never grants
// (decimal digits, no sign, no leading zero), a mode other than exclusive or shared.
function leaseOf(req) {
  const one = (name) => {
    let times = 0;
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (req.rawHeaders[i].toLowerCase() === name) times += 1;
    }
    if (times > 1) throw new RangeError(`${name} is given ${times} times`);
    return req.headers[name];
  };
  const resource = one(Headers.RESOURCE);
  const token = one(Headers.TOKEN);
  if (resource === undefined && token === undefined) return null;
  if (!resource || token === undefined) {
    throw new RangeError(`${Headers.RESOURCE} and ${Headers.TOKEN} go together`);
  }
  const mode = one(Headers.MODE) ?? Mode.EXCLUSIVE;
  if (mode !== Mode.EXCLUSIVE && mode !== Mode.SHARED) {
    throw new RangeError(`${Headers.MODE} is exclusive or shared: ${JSON.stringify(mode)}`);
  }
  return { resource, token: tokenOf(token.trim()), mode };
}

// One waiter per resource per process reaches the database: the others queue here, holding no
// connection (a pool full of writers blocked on one lock would starve the holder's handler).
const queues = new Map();

// Waits for this process's turn at `resource`; resolves to the function that ends the turn.
function turn(resource) {
  const before = queues.get(resource) ?? Promise.resolve();
  let end;
  const mine = new Promise((resolve) => {
    end = resolve;
  });
  const tail = before.then(() => mine);
  queues.set(resource, tail);
  return before.then(() => () => {
    end();
    if (queues.get(resource) === tail) queues.delete(resource);
  });
}

/**
 * Connect-style middleware (Express, or `(req, res, next)` in a plain `node:http` server)
 * that fences writes by the lease they name (docs/fencing.md, "HTTP"): `Tenure-Resource`,
 * `Tenure-Fencing-Token`, and `Tenure-Lease-Mode: shared` for a co-holder. The fence is the
 * PostgreSQL table `tenure_fence` (`createTable` first), reached through `pool` (a pg.Pool).
 *
 * A request that names a lease waits for its turn at the resource (in this process, then a
 * PostgreSQL advisory lock on a pooled connection, for every process using the database),
 * checks and advances the fence in a transaction of its own (committed: durable before the
 * handler runs), and keeps the lock until its response has been sent or its client has gone,
 * so the check and whatever the handler writes are one step for every writer of the resource
 * that goes through this middleware (all of them must: a writer calling `guard` on its own
 * takes no such lock). The handler finds the admitted lease in `req.tenure` (`resource`,
 * `token` as a BigInt, `mode`, and `db`, the locked connection, which it may use for its own
 * statements; a client that leaves before the response is sent ends the lock by destroying
 * that connection, so what the handler writes through it then fails instead of landing
 * unfenced: write what must be fenced through it, or before answering). A stale token is
 * answered 409 without calling the handler,
 * `{"error":"stale_fencing_token","resource":…,"highest":…,"got":…}` (tokens as strings) and
 * `Tenure-Fencing-Token-Highest`; malformed headers 400; a write (any method but GET, HEAD,
 * OPTIONS, TRACE) naming no lease 428, unless `required: false`. The lock has no time limit
 * of its own: bound your handlers' time.
 */
export function fenceMiddleware({ pool, required = true }) {
  return async function tenureFence(req, res, next) {
    let lease;
    try {
      lease = leaseOf(req);
    } catch (error) {
      return answer(res, 400, { error: "invalid_fencing_headers", message: error.message });
    }
    if (lease === null) {
      if (required && !READS.has(req.method)) {
        const message = `a write names its lease: ${Headers.RESOURCE}, ${Headers.TOKEN}`;
        return answer(res, 428, { error: "fencing_token_required", message });
      }
      return next();
    }
    // Setting up (the turn, a connection, the lock, the check), then the handler's, then done.
    let phase = "setup";
    let finished = false; // the response was sent, or its client went away
    let broken = false; // the connection failed: the lock went with its session
    let turnEnd = null;
    let db = null;
    let locked = false;
    // Ends the lock (and destroys a connection that failed, or whose state is unknown: its
    // session's lock goes with it), then this process's turn. Once.
    const cleanup = (failure) => {
      if (phase === "done") return;
      phase = "done";
      const endTurn = () => turnEnd?.();
      const conn = db;
      db = null;
      if (conn === null) return endTurn();
      // `lost` stays on until the connection goes back: an error meanwhile must be heard.
      const release = (error) => {
        conn.removeListener("error", lost);
        conn.release(error);
      };
      if (broken || failure) {
        release(failure ?? new Error("the connection failed"));
        return endTurn();
      }
      if (!locked) {
        release();
        return endTurn();
      }
      // A transaction the handler left open ends here (a warning only if there is none),
      // then the lock; the connection goes back clean.
      conn
        .query("ROLLBACK")
        .then(() => conn.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [lease.resource]))
        .then(() => release(), (error) => release(error))
        .finally(endTurn);
    };
    const lost = (error) => {
      broken = true;
      if (phase === "handler") cleanup(error);
    };
    // During setup each step looks for itself. In the handler's phase a sent response ends
    // the lock; a client that left first ends it by destroying the connection, so that what
    // the handler still writes through `req.tenure.db` fails instead of landing unfenced.
    const finish = () => {
      finished = true;
      if (phase !== "handler") return;
      if (res.writableFinished) cleanup();
      else cleanup(new Error("the client left before the response was sent"));
    };
    res.once("finish", finish);
    res.once("close", finish);
    try {
      turnEnd = await turn(lease.resource);
      if (finished) return cleanup();
      db = await pool.connect();
      db.on("error", lost);
      if (finished) return cleanup();
      await db.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [lease.resource]);
      locked = true;
      if (finished) return cleanup();
      await db.query("BEGIN");
      try {
        await guard(db, lease.resource, lease.token, lease.mode);
        await db.query("COMMIT");
      } catch (error) {
        await db.query("ROLLBACK");
        throw error;
      }
    } catch (error) {
      const stale = error instanceof StaleFencingToken;
      cleanup(stale ? undefined : error);
      if (finished) return;
      if (stale) {
        const body = {
          error: "stale_fencing_token",
          resource: error.resource,
          highest: String(error.highest),
          got: String(error.got),
        };
        return answer(res, 409, body, { [Headers.HIGHEST]: String(error.highest) });
      }
      return answer(res, 500, { error: "fence_unavailable", message: error.message });
    }
    if (finished) return cleanup();
    phase = "handler";
    req.tenure = { resource: lease.resource, token: lease.token, mode: lease.mode, db };
    next();
  };
}
