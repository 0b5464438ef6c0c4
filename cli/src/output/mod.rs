//! How `tenure` prints: one JSON shape per protobuf message (`--output json`, field names
//! as in the proto, enums by their proto names, durations as `_ms` integers, instants as
//! RFC 3339) and one human line or block per message. Every verb prints through `print`.

use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use serde_json::{json, Value};
use tenure_client::{from_prost_duration, pb, Error};

mod resource;

pub use resource::{booking_json, booking_text, resource_json, resource_line, resource_text};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Prints `value` as one JSON line, or the human text.
pub fn print(output: Output, value: &Value, text: impl FnOnce() -> String) {
    match output {
        Output::Json => println!("{value}"),
        Output::Text => println!("{}", text()),
    }
}

/// Prints a failed call's reason and message; exit code 2.
pub fn fail(output: Output, error: &Error) -> ExitCode {
    match output {
        Output::Json => println!(
            "{}",
            json!({"ok": false, "reason": error.reason_str(), "error": error.to_string()})
        ),
        Output::Text => eprintln!("error: {error}"),
    }
    ExitCode::from(2)
}

/// 0 when the call answered yes (granted, valid), 1 when it answered no.
pub fn answered(yes: bool) -> ExitCode {
    if yes {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `{"ok": true, "lease": …}` or `VERB` and the lease.
pub fn print_lease(out: Output, verb: &str, lease: Option<&pb::Lease>) {
    let value = json!({"ok": true, "lease": lease.map(lease_json)});
    print(out, &value, || {
        format!("{verb}\n{}", lease.map(lease_text).unwrap_or_default())
    });
}

/// A list page: `{"<items>": [...], "next_page_token", "read_revision"}`, or one line per
/// item and, when there is more, the flag that fetches it.
pub fn print_page<T>(
    out: Output,
    items_field: &str,
    page: &crate::listing::Page<T>,
    to_json: impl Fn(&T) -> Value,
    to_text: impl Fn(&T) -> String,
) {
    let value = json!({
        items_field: page.items.iter().map(to_json).collect::<Vec<_>>(),
        "next_page_token": page.next_page_token,
        "read_revision": page.read_revision,
    });
    print(out, &value, || {
        let mut lines: Vec<String> = page.items.iter().map(to_text).collect();
        if lines.is_empty() {
            lines.push(format!("no {items_field}"));
        }
        if !page.next_page_token.is_empty() {
            lines.push(format!("more: --page-token {}", page.next_page_token));
        }
        lines.join("\n")
    });
}

/// `LEASE_STATUS_ACTIVE`, `LEASE_MODE_READ`, `EVENT_TYPE_ACQUIRED` (`UNKNOWN` for a value
/// this build does not know).
fn status_name(status: i32) -> &'static str {
    pb::LeaseStatus::try_from(status).map_or("UNKNOWN", |s| s.as_str_name())
}

pub(super) fn mode_name(mode: i32) -> &'static str {
    pb::LeaseMode::try_from(mode).map_or("UNKNOWN", |m| m.as_str_name())
}

fn event_name(event: i32) -> &'static str {
    pb::EventType::try_from(event).map_or("UNKNOWN", |e| e.as_str_name())
}

/// The name without its enum prefix: `ACTIVE`, `READ`; unspecified as `-`.
pub(super) fn short(name: &'static str, prefix: &str) -> &'static str {
    match name.strip_prefix(prefix) {
        Some("UNSPECIFIED") => "-",
        Some(short) => short,
        None => name,
    }
}

/// A history event as SPEC §4.11 names it: `acquired`, `wait_timed_out`.
pub fn event_text(event: i32) -> String {
    short(event_name(event), "EVENT_TYPE_").to_lowercase()
}

pub(super) fn millis(d: &Option<prost_types::Duration>) -> Option<u64> {
    d.as_ref()
        .map(|d| from_prost_duration(d).as_millis() as u64)
}

/// `30s`, `1h 30m`, `1s 500ms` (to the millisecond); `-` when absent.
pub fn human(d: &Option<prost_types::Duration>) -> String {
    millis(d).map_or_else(
        || "-".into(),
        |ms| humantime::format_duration(Duration::from_millis(ms)).to_string(),
    )
}

pub fn instant(t: &Option<prost_types::Timestamp>) -> Option<String> {
    t.as_ref().map(|t| t.to_string())
}

fn metadata_text(metadata: &std::collections::HashMap<String, String>) -> String {
    let mut pairs: Vec<String> = metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

pub fn lease_json(lease: &pb::Lease) -> Value {
    json!({
        "lease_id": lease.lease_id,
        "resource": lease.resource,
        "holder": lease.holder,
        "principal": lease.principal,
        "mode": mode_name(lease.mode),
        "units": lease.units,
        "fencing_token": lease.fencing_token,
        "status": status_name(lease.status),
        "acquired_at": instant(&lease.acquired_at),
        "expires_at": instant(&lease.expires_at),
        "ttl_ms": millis(&lease.ttl),
        "remaining_ms": millis(&lease.remaining),
        "metadata": lease.metadata,
        "session_id": lease.session_id,
    })
}

pub fn lease_text(lease: &pb::Lease) -> String {
    let mode = match pb::LeaseMode::try_from(lease.mode) {
        Ok(pb::LeaseMode::Read | pb::LeaseMode::Write) => {
            let plural = if lease.units == 1 { "" } else { "s" };
            format!(
                "  mode {} ({} unit{plural})",
                short(mode_name(lease.mode), "LEASE_MODE_"),
                lease.units
            )
        }
        _ => String::new(),
    };
    let mut metadata = if lease.metadata.is_empty() {
        String::new()
    } else {
        format!("  metadata {}", metadata_text(&lease.metadata))
    };
    if !lease.session_id.is_empty() {
        metadata.push_str(&format!("  session {}", lease.session_id));
    }
    format!(
        "  {}  holder {}  fencing_token {}  lease_id {}{mode}  status {}  ttl {}  expires in {}{metadata}",
        lease.resource,
        lease.holder,
        lease.fencing_token,
        lease.lease_id,
        short(status_name(lease.status), "LEASE_STATUS_"),
        human(&lease.ttl),
        human(&lease.remaining),
    )
}

pub fn history_entry_json(entry: &pb::HistoryEntry) -> Value {
    json!({
        "revision": entry.revision,
        "seq": entry.seq,
        "event": event_name(entry.event),
        "resource": entry.resource,
        "at": instant(&entry.at),
        "actor": entry.actor,
        "holder": entry.holder,
        "lease_id": entry.lease_id,
        "fencing_token": entry.fencing_token,
        "from": status_name(entry.from),
        "to": status_name(entry.to),
        "metadata": entry.metadata,
        "mode": mode_name(entry.mode),
        "units": entry.units,
        "to_holder": entry.to_holder,
        "to_lease_id": entry.to_lease_id,
        "to_fencing_token": entry.to_fencing_token,
        "session_id": entry.session_id,
    })
}

/// `revision  time  event  holder H  token N  FROM→TO  by ACTOR  [→ H2 (token M)]`.
pub fn history_entry_text(entry: &pb::HistoryEntry) -> String {
    let mut line = format!(
        "{:>6}  {}  {:<16}",
        entry.revision,
        instant(&entry.at).unwrap_or_else(|| "-".into()),
        event_text(entry.event),
    );
    if !entry.holder.is_empty() && entry.fencing_token == 0 {
        // A waiter or a booking: no lease, no token yet.
        line.push_str(&format!("  holder {}", entry.holder));
    } else if !entry.holder.is_empty() {
        line.push_str(&format!(
            "  holder {}  token {}  {}→{}",
            entry.holder,
            entry.fencing_token,
            short(status_name(entry.from), "LEASE_STATUS_"),
            short(status_name(entry.to), "LEASE_STATUS_"),
        ));
    }
    line.push_str(&format!("  by {}", entry.actor));
    if !entry.session_id.is_empty() {
        line.push_str(&format!("  session {}", entry.session_id));
    }
    if !entry.to_holder.is_empty() {
        line.push_str(&format!(
            "  → {} (token {})",
            entry.to_holder, entry.to_fencing_token
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(seconds: i64) -> Option<prost_types::Duration> {
        Some(prost_types::Duration { seconds, nanos: 0 })
    }

    #[test]
    fn durations_print_humanly_and_as_milliseconds() {
        assert_eq!(human(&seconds(30)), "30s");
        assert_eq!(human(&seconds(5400)), "1h 30m");
        assert_eq!(human(&None), "-");
        assert_eq!(millis(&seconds(30)), Some(30_000));
    }

    #[test]
    fn enums_print_by_proto_name_in_json_and_short_in_text() {
        let lease = pb::Lease {
            mode: pb::LeaseMode::Read as i32,
            units: 3,
            status: pb::LeaseStatus::Active as i32,
            ttl: seconds(30),
            ..Default::default()
        };
        let value = lease_json(&lease);
        assert_eq!(value["mode"], "LEASE_MODE_READ");
        assert_eq!(value["status"], "LEASE_STATUS_ACTIVE");
        assert_eq!(value["ttl_ms"], 30_000);
        let text = lease_text(&lease);
        assert!(text.contains("mode READ (3 units)"), "{text}");
        assert!(text.contains("status ACTIVE  ttl 30s"), "{text}");
        assert_eq!(
            event_text(pb::EventType::WaitTimedOut as i32),
            "wait_timed_out"
        );
    }

    #[test]
    fn a_waiter_event_has_a_holder_but_no_token_or_status() {
        let entry = pb::HistoryEntry {
            revision: 7,
            event: pb::EventType::Queued as i32,
            actor: "anonymous".into(),
            holder: "w2".into(),
            ..Default::default()
        };
        let line = history_entry_text(&entry);
        assert!(
            line.ends_with("queued            holder w2  by anonymous"),
            "{line}"
        );
    }

    #[test]
    fn a_transfer_event_names_the_new_holder_and_token() {
        let entry = pb::HistoryEntry {
            revision: 12,
            event: pb::EventType::Transferred as i32,
            at: Some(prost_types::Timestamp {
                seconds: 0,
                nanos: 0,
            }),
            actor: "anonymous".into(),
            holder: "a".into(),
            fencing_token: 9,
            from: pb::LeaseStatus::Active as i32,
            to: pb::LeaseStatus::Transferred as i32,
            to_holder: "b".into(),
            to_fencing_token: 12,
            ..Default::default()
        };
        let line = history_entry_text(&entry);
        assert!(line.contains("1970-01-01T00:00:00Z"), "{line}");
        assert!(
            line.contains("transferred       holder a  token 9  ACTIVE→TRANSFERRED  by anonymous  → b (token 12)"),
            "{line}"
        );
    }
}
