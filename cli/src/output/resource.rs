//! The shapes of a resource: its policy, its waiting room and its bookings.

use serde_json::{json, Value};
use tenure_client::pb;

use super::{human, instant, lease_json, lease_text, millis, mode_name, short};

pub fn policy_json(policy: &pb::Policy) -> Value {
    json!({
        "default_ttl_ms": millis(&policy.default_ttl),
        "max_ttl_ms": millis(&policy.max_ttl),
        "max_lifetime_ms": millis(&policy.max_lifetime),
        "renewal_grace_ms": millis(&policy.renewal_grace),
        "transferable": policy.transferable,
        "shared_modes": policy.shared_modes.iter().map(|m| mode_name(*m)).collect::<Vec<_>>(),
        "total_units": policy.total_units,
        "lock_delay_ms": millis(&policy.lock_delay),
        "max_waiters": policy.max_waiters,
        "max_metadata_bytes": policy.max_metadata_bytes,
        "bookable": policy.bookable,
        "max_holders": policy.max_holders,
        "kind": policy.kind,
        "display_name": policy.display_name,
        "fsm_requirements": policy.fsm_requirements.iter()
            .map(|r| json!({"machine": r.machine, "transition": r.transition}))
            .collect::<Vec<_>>(),
    })
}

pub fn policy_text(policy: &pb::Policy) -> String {
    let lifetime = match millis(&policy.max_lifetime) {
        None | Some(0) => "none".to_string(),
        Some(_) => human(&policy.max_lifetime),
    };
    let shared = if policy.shared_modes.is_empty() {
        "none (exclusive only)".to_string()
    } else {
        let modes: Vec<&str> = policy
            .shared_modes
            .iter()
            .map(|m| short(mode_name(*m), "LEASE_MODE_"))
            .collect();
        modes.join(",")
    };
    let mut text = format!(
        "  policy: default ttl {}  max ttl {}  max lifetime {lifetime}  renewal grace {}  lock delay {}\n          transferable {}  shared modes {shared}  total units {}  max waiters {}  max metadata {} bytes",
        human(&policy.default_ttl),
        human(&policy.max_ttl),
        human(&policy.renewal_grace),
        human(&policy.lock_delay),
        if policy.transferable { "yes" } else { "no" },
        policy.total_units,
        policy.max_waiters,
        policy.max_metadata_bytes,
    );
    text.push_str(&format!(
        "\n          bookable {}  max holders {}",
        if policy.bookable { "yes" } else { "no" },
        match policy.max_holders {
            0 => "no cap".to_string(),
            n => n.to_string(),
        }
    ));
    if !policy.fsm_requirements.is_empty() {
        let pairs: Vec<String> = policy
            .fsm_requirements
            .iter()
            .map(|r| format!("{}:{}", r.machine, r.transition))
            .collect();
        text.push_str(&format!("\n          fsm {}", pairs.join(", ")));
    }
    text
}

pub fn resource_json(resource: &pb::Resource) -> Value {
    json!({
        "name": resource.name,
        "kind": resource.kind,
        "display_name": resource.display_name,
        "revision": resource.revision,
        "ad_hoc": resource.ad_hoc,
        "waiting": resource.waiting,
        "lease_count": resource.lease_count,
        "units_in_use": resource.units_in_use,
        "policy": resource.policy.as_ref().map(policy_json),
        "leases": resource.leases.iter().map(lease_json).collect::<Vec<_>>(),
        "waiters": resource.waiters.iter().map(waiter_json).collect::<Vec<_>>(),
        "bookings": resource.bookings.iter().map(booking_json).collect::<Vec<_>>(),
    })
}

pub fn waiter_json(waiter: &pb::Waiter) -> Value {
    json!({
        "holder": waiter.holder,
        "principal": waiter.principal,
        "mode": mode_name(waiter.mode),
        "units": waiter.units,
        "position": waiter.position,
        "queued_revision": waiter.queued_revision,
        "wait_deadline": instant(&waiter.wait_deadline),
    })
}

/// `  waiting #1  holder H  since revision N  until T`.
pub fn waiter_text(waiter: &pb::Waiter) -> String {
    format!(
        "  waiting #{}  holder {}  since revision {}  until {}",
        waiter.position,
        waiter.holder,
        waiter.queued_revision,
        instant(&waiter.wait_deadline).unwrap_or_else(|| "-".into()),
    )
}

pub fn booking_json(booking: &pb::Booking) -> Value {
    json!({
        "resource": booking.resource,
        "holder": booking.holder,
        "principal": booking.principal,
        "start": instant(&booking.start),
        "duration_ms": millis(&booking.duration),
        "revision": booking.revision,
    })
}

/// `  RESOURCE  holder H  booked from T for 1h  revision N`.
pub fn booking_text(booking: &pb::Booking) -> String {
    format!(
        "  {}  holder {}  booked from {} for {}  revision {}",
        booking.resource,
        booking.holder,
        instant(&booking.start).unwrap_or_else(|| "-".into()),
        human(&booking.duration),
        booking.revision,
    )
}

/// One line: name, kind, what holds it.
pub fn resource_line(resource: &pb::Resource) -> String {
    let mut line = resource.name.clone();
    if resource.ad_hoc {
        line.push_str("  (ad hoc)");
    }
    if !resource.kind.is_empty() {
        line.push_str(&format!("  kind {}", resource.kind));
    }
    if !resource.display_name.is_empty() {
        line.push_str(&format!("  \"{}\"", resource.display_name));
    }
    // The count, not the list: with very many shared holders the list is cut short.
    let held = match resource.lease_count.max(resource.leases.len() as u64) {
        0 => "free".to_string(),
        1 => "1 lease".to_string(),
        n => format!("{n} leases"),
    };
    line.push_str(&format!("  {held}"));
    let pool = resource.policy.as_ref().map_or(0, |p| p.total_units);
    if pool > 0 {
        line.push_str(&format!(
            "  {} of {pool} units in use",
            resource.units_in_use
        ));
    }
    if resource.waiting > 0 {
        line.push_str(&format!("  {} waiting", resource.waiting));
    }
    line.push_str(&format!("  revision {}", resource.revision));
    line
}

/// The line, the policy, then one line per active lease, waiter and booking.
pub fn resource_text(resource: &pb::Resource) -> String {
    let mut text = resource_line(resource);
    if let Some(policy) = &resource.policy {
        text.push('\n');
        text.push_str(&policy_text(policy));
    }
    let lines = (resource.leases.iter().map(lease_text))
        .chain(resource.waiters.iter().map(waiter_text))
        .chain(resource.bookings.iter().map(booking_text));
    for line in lines {
        text.push('\n');
        text.push_str(&line);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_shows_its_waiting_room_and_bookings() {
        let resource = pb::Resource {
            name: "room/4a".into(),
            waiting: 1,
            waiters: vec![pb::Waiter {
                holder: "w2".into(),
                position: 1,
                queued_revision: 12,
                ..Default::default()
            }],
            bookings: vec![pb::Booking {
                resource: "room/4a".into(),
                holder: "alice".into(),
                start: Some(prost_types::Timestamp {
                    seconds: 3600,
                    nanos: 0,
                }),
                duration: Some(prost_types::Duration {
                    seconds: 1800,
                    nanos: 0,
                }),
                revision: 9,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = resource_text(&resource);
        assert!(text.starts_with("room/4a  free  1 waiting"), "{text}");
        assert!(
            text.contains("\n  waiting #1  holder w2  since revision 12  until -"),
            "{text}"
        );
        assert!(
            text.contains(
                "\n  room/4a  holder alice  booked from 1970-01-01T01:00:00Z for 30m  revision 9"
            ),
            "{text}"
        );
        let value = resource_json(&resource);
        assert_eq!(value["waiters"][0]["holder"], "w2");
        assert_eq!(value["bookings"][0]["duration_ms"], 1_800_000);
    }
}
