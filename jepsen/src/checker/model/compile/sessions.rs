//! What a session's renewal or close proves about its holder's lease on one resource.

use super::*;

/// A session's renewal or close, as far as it concerns its holder's lease on `resource`:
/// renewed, the lease (if any) has new bounds; closed, the lease the close answered it ended
/// here is released (and, if it named none here, the holder held nothing here); told
/// `session_not_found`, the session had ended and the holder holds nothing here.
pub(super) fn session_call(
    op: &Op,
    resource: &str,
    holder: HolderId,
    bounds: impl Fn(u64) -> (Nanos, Nanos),
    unexpected: impl Fn(&Value) -> Compiled,
) -> Compiled {
    let effect = match &op.call {
        Call::RenewSession { ttl_ms, .. } => {
            let (expiry, bound) = bounds(*ttl_ms);
            MOp::SessionRenewed {
                holder,
                expiry,
                bound,
            }
        }
        _ => MOp::SessionClosed { holder },
    };
    let required = |op| Compiled::Model { op, required: true };
    match (&op.outcome, &effect) {
        (
            Outcome::Ok {
                value: Value::SessionRenewed,
            },
            MOp::SessionRenewed { .. },
        ) => required(effect),
        (
            Outcome::Ok {
                value: Value::SessionClosed { leases },
            },
            MOp::SessionClosed { .. },
        ) => {
            match leases.iter().find(|l| l.resource == resource) {
                Some(ended) => required(MOp::Release {
                    holder,
                    token: ended.token,
                }),
                // The answer lists every lease the close ended, unless it was cut short.
                None if leases.len() < SESSION_LEASES_SHOWN => required(MOp::Holding {
                    holder,
                    lease: None,
                }),
                None => required(effect),
            }
        }
        (Outcome::Ok { value }, _) => unexpected(value),
        (Outcome::Fail { reason }, _) if reason == SESSION_NOT_FOUND => Compiled::Model {
            op: MOp::Holding {
                holder,
                lease: None,
            },
            required: true,
        },
        (Outcome::Fail { .. } | Outcome::QuotaExceeded { .. }, _) => Compiled::Ignored,
        (Outcome::Unknown { .. }, _) => Compiled::Model {
            op: effect,
            required: false,
        },
    }
}

/// A call naming a session that had ended (SPEC §4.24).
pub(super) const SESSION_NOT_FOUND: &str = Reason::SessionNotFound.as_str();

/// A session's answer lists at most this many of its leases.
const SESSION_LEASES_SHOWN: usize = 100;
