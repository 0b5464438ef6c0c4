// What the wire says besides the messages: the reasons of the contract's §3.2 and the
// headers of its §3.3, with the same names as the Rust `tenure_proto::contract` and the Python
// client's `contract.py`; a test of the Rust client holds them alike.

/** The trailer (gRPC) or header (HTTP) that carries an error's reason. */
export const REASON_HEADER = "tenure-reason";

/** The reply header naming the leader as `ID=HOST:PORT`. */
export const LEADER_HEADER = "tenure-leader";

/**
 * A machine-readable reason: of an error (`TenureError.reason`), or of an acquire answered but
 * not granted (`reply.reason`). `TenureError.reason` stays a plain string, so that a reason of
 * a newer server, which this list lacks, still arrives: treat one you do not know as a refusal.
 */
export const Reason = Object.freeze({
  /** A malformed or out-of-bounds field; the message names the field and the bound. */
  INVALID_ARGUMENT: "invalid_argument",
  /** A mode the resource's policy does not allow. */
  INVALID_MODE: "invalid_mode",
  /** A ttl outside the policy's range. */
  TTL_OUT_OF_RANGE: "ttl_out_of_range",
  /** A renew past the lease's `max_lifetime`. */
  LIFETIME_EXCEEDED: "lifetime_exceeded",
  /** No known token. */
  UNAUTHENTICATED: "unauthenticated",
  /** A known caller that may not do this. */
  INSUFFICIENT_PERMISSIONS: "insufficient_permissions",
  /** An unregistered resource where registration is required. */
  RESOURCE_NOT_FOUND: "resource_not_found",
  /** No live lease matches. */
  LEASE_NOT_FOUND: "lease_not_found",
  /** No booking matches. */
  BOOKING_NOT_FOUND: "booking_not_found",
  /** No live session matches (it was closed, it expired, or it never existed). */
  SESSION_NOT_FOUND: "session_not_found",
  /** Registered already, or a member with that id or address exists. */
  ALREADY_EXISTS: "already_exists",
  /** The token is not the lease's current one. */
  STALE_FENCING_TOKEN: "stale_fencing_token",
  /** The lease was reclaimed: its holder has lost it. */
  LEASE_EXPIRED: "lease_expired",
  /** The policy does not allow transfers. */
  NOT_TRANSFERABLE: "not_transferable",
  /** The resource takes no bookings. */
  NOT_BOOKABLE: "not_bookable",
  /** The holder holds the resource in another mode or with other units. */
  ALREADY_HELD: "already_held",
  /** Another holder's booking is in the way. */
  RESOURCE_BOOKED: "resource_booked",
  /** Held in a way the request cannot share (an acquire's answer; an error for a booking). */
  RESOURCE_UNAVAILABLE: "resource_unavailable",
  /** The waiting room is full. */
  WAITING_ROOM_FULL: "waiting_room_full",
  /** A quota, the exactly-once table or a resource's bookings are full. */
  RESOURCE_EXHAUSTED: "resource_exhausted",
  /** Too many requests in flight on the node or of the principal. */
  TOO_MANY_REQUESTS: "too_many_requests",
  /** Too many long-lived calls open on the node. */
  TOO_MANY_STREAMS: "too_many_streams",
  /** A watcher that took no message in time was cut off. */
  SLOW_WATCHER: "slow_watcher",
  /** The events asked for are no longer retained. */
  COMPACTED: "compacted",
  /** `Forward`: nobody owns the resource. */
  NO_OWNER: "no_owner",
  /** `Forward`: no inbox took the request; nothing was processed. */
  OWNER_UNAVAILABLE: "owner_unavailable",
  /** `Forward`: the owner did not answer in time; the outcome is unknown. */
  OWNER_TIMEOUT: "owner_timeout",
  /** `Forward`: the owner's reply is too large. */
  REPLY_TOO_LARGE: "reply_too_large",
  /** A peer whose configuration differs. */
  CONFIG_MISMATCH: "config_mismatch",
  /** The request needs a rules version the cluster has not reached (not every member supports it yet). */
  RULES_NOT_REACHED: "rules_not_reached",
  /** No leader or quorum in time, or a full queue: retry with the same `request_id`. */
  UNAVAILABLE: "unavailable",
  /** A bug; never bad input. */
  INTERNAL: "internal",
  /** Not granted: the unit pool cannot cover the request now. */
  INSUFFICIENT_UNITS: "insufficient_units",
  /** Not granted: a reclaim closed the resource for its lock delay. */
  LOCK_DELAY: "lock_delay",
  /** Not granted: a waiting acquire timed out. */
  WAIT_TIMEOUT: "wait_timeout",
  /** Not granted: a waiting acquire was cancelled. */
  WAIT_CANCELLED: "wait_cancelled",
});
