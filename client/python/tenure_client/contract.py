"""What the wire says besides the messages: the reasons of SPEC §3.2 and the headers of SPEC §3.3.

The same names as the Rust `tenure_proto::contract`; a test of the Rust client holds the two
alike, so a reason added on one side only fails the build.
"""

from __future__ import annotations

from enum import Enum

REASON_HEADER = "tenure-reason"
"""The trailer that carries an error's reason."""

LEADER_HEADER = "tenure-leader"
"""The reply header naming the leader as `ID=HOST:PORT`."""


class Reason(str, Enum):
    """A machine-readable reason: of an error (`TenureError.reason`), or of an acquire that was
    answered but not granted (`AcquireResponse.reason`, SPEC §3.4).

    A member equals its wire name (`Reason.LEASE_EXPIRED == "lease_expired"`). `TenureError.reason`
    stays a plain string, so that a reason of a newer server, which this list lacks, still
    arrives: compare it with the members, and treat one you do not know as a refusal.
    """

    INVALID_ARGUMENT = "invalid_argument"
    """A malformed or out-of-bounds field; the message names the field and the bound."""

    INVALID_MODE = "invalid_mode"
    """A mode the resource's policy does not allow."""

    TTL_OUT_OF_RANGE = "ttl_out_of_range"
    """A ttl outside the policy's range."""

    LIFETIME_EXCEEDED = "lifetime_exceeded"
    """A renew past the lease's `max_lifetime`."""

    UNAUTHENTICATED = "unauthenticated"
    """No known token."""

    INSUFFICIENT_PERMISSIONS = "insufficient_permissions"
    """A known caller that may not do this."""

    RESOURCE_NOT_FOUND = "resource_not_found"
    """An unregistered resource where registration is required."""

    LEASE_NOT_FOUND = "lease_not_found"
    """No live lease matches."""

    BOOKING_NOT_FOUND = "booking_not_found"
    """No booking matches."""

    SESSION_NOT_FOUND = "session_not_found"
    """No live session matches (it was closed, it expired, or it never existed)."""

    ALREADY_EXISTS = "already_exists"
    """Registered already, or a member with that id or address exists."""

    STALE_FENCING_TOKEN = "stale_fencing_token"
    """The token is not the lease's current one."""

    LEASE_EXPIRED = "lease_expired"
    """The lease was reclaimed: its holder has lost it."""

    NOT_TRANSFERABLE = "not_transferable"
    """The policy does not allow transfers."""

    NOT_BOOKABLE = "not_bookable"
    """The resource takes no bookings."""

    ALREADY_HELD = "already_held"
    """The holder holds the resource in another mode or with other units."""

    RESOURCE_BOOKED = "resource_booked"
    """Another holder's booking is in the way."""

    RESOURCE_UNAVAILABLE = "resource_unavailable"
    """Held in a way the request cannot share (an acquire's answer; an error for a booking)."""

    WAITING_ROOM_FULL = "waiting_room_full"
    """The waiting room is full."""

    RESOURCE_EXHAUSTED = "resource_exhausted"
    """A quota, the exactly-once table or a resource's bookings are full."""

    TOO_MANY_REQUESTS = "too_many_requests"
    """Too many requests in flight on the node or of the principal."""

    TOO_MANY_STREAMS = "too_many_streams"
    """Too many long-lived calls open on the node."""

    SLOW_WATCHER = "slow_watcher"
    """A watcher that took no message in time was cut off."""

    COMPACTED = "compacted"
    """The events asked for are no longer retained."""

    NO_OWNER = "no_owner"
    """`Forward`: nobody owns the resource."""

    OWNER_UNAVAILABLE = "owner_unavailable"
    """`Forward`: no inbox took the request; nothing was processed."""

    OWNER_TIMEOUT = "owner_timeout"
    """`Forward`: the owner did not answer in time; the outcome is unknown."""

    REPLY_TOO_LARGE = "reply_too_large"
    """`Forward`: the owner's reply is too large."""

    CONFIG_MISMATCH = "config_mismatch"
    """A peer whose configuration differs."""

    RULES_NOT_REACHED = "rules_not_reached"
    """The request needs a rules version the cluster has not reached (not every member supports it yet)."""

    UNAVAILABLE = "unavailable"
    """No leader or quorum in time, or a full queue: retry with the same `request_id`."""

    INTERNAL = "internal"
    """A bug; never bad input."""

    INSUFFICIENT_UNITS = "insufficient_units"
    """Not granted: the unit pool cannot cover the request now."""

    LOCK_DELAY = "lock_delay"
    """Not granted: a reclaim closed the resource for its lock delay."""

    WAIT_TIMEOUT = "wait_timeout"
    """Not granted: a waiting acquire timed out."""

    WAIT_CANCELLED = "wait_cancelled"
    """Not granted: a waiting acquire was cancelled."""
