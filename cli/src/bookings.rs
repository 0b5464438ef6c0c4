//! `tenure book` and `tenure cancel-booking`: reserved windows `[start, start + duration)`
//! of a resource (SPEC §4.8), in wall-clock time as the leader's clock judges it.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::json;
use tenure_client::{pb, prost_duration, Client, Error};

use crate::output::{self, Output};

#[derive(Args)]
pub struct BookArgs {
    resource: String,
    #[arg(long)]
    holder: String,
    /// RFC 3339 (`2026-12-01T09:00:00Z`, `2026-12-01T10:00:00+01:00`) or from now (`+30m`).
    #[arg(long, value_parser = parse_start)]
    start: SystemTime,
    /// Length of the window, e.g. 1h.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration)]
    duration: Duration,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
}

#[derive(Args)]
pub struct CancelBookingArgs {
    resource: String,
    #[arg(long)]
    holder: String,
    /// The booking's start, as `book` printed it (RFC 3339).
    #[arg(long, value_parser = parse_start)]
    start: SystemTime,
    /// Reuse to retry a call exactly once (default: a fresh one).
    #[arg(long, default_value = "")]
    request_id: String,
}

/// `+30m` (from now), or RFC 3339 with `Z`, no zone (UTC) or a `±HH:MM` offset.
fn parse_start(text: &str) -> Result<SystemTime, String> {
    if let Some(from_now) = text.strip_prefix('+') {
        let offset = humantime::parse_duration(from_now).map_err(|e| e.to_string())?;
        return Ok(SystemTime::now() + offset);
    }
    let bad = |e: humantime::TimestampError| format!("{text:?} is not RFC 3339 or +DURATION: {e}");
    let split = text
        .len()
        .checked_sub(6)
        .filter(|at| text.is_char_boundary(*at));
    let zone = split.map(|at| text.split_at(at)).filter(|(_, zone)| {
        let b = zone.as_bytes();
        (b[0] == b'+' || b[0] == b'-')
            && b[3] == b':'
            && [1, 2, 4, 5].iter().all(|i| b[*i].is_ascii_digit())
    });
    let Some((local, zone)) = zone else {
        return humantime::parse_rfc3339_weak(text).map_err(bad);
    };
    let at = humantime::parse_rfc3339_weak(local).map_err(bad)?;
    let minutes: u64 =
        zone[1..3].parse::<u64>().unwrap_or(0) * 60 + zone[4..].parse::<u64>().unwrap_or(0);
    let offset = Duration::from_secs(minutes * 60);
    // Local time = UTC + offset, so UTC = local − offset.
    Ok(if zone.starts_with('+') {
        at - offset
    } else {
        at + offset
    })
}

/// `at` as a protobuf `Timestamp` (prost-types' conversion); a time before 1970 is 1970.
fn timestamp(at: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(at.max(UNIX_EPOCH))
}

pub async fn book(out: Output, client: &Client, args: &BookArgs) -> Result<ExitCode, Error> {
    let response = client
        .book(pb::BookRequest {
            resource: args.resource.clone(),
            holder: args.holder.clone(),
            start: Some(timestamp(args.start)),
            duration: Some(prost_duration(args.duration)),
            request_id: args.request_id.clone(),
        })
        .await?;
    print_booking(out, "booked", response.booking.as_ref());
    Ok(ExitCode::SUCCESS)
}

pub async fn cancel_booking(
    out: Output,
    client: &Client,
    args: &CancelBookingArgs,
) -> Result<ExitCode, Error> {
    let response = client
        .cancel_booking(pb::CancelBookingRequest {
            resource: args.resource.clone(),
            holder: args.holder.clone(),
            start: Some(timestamp(args.start)),
            request_id: args.request_id.clone(),
        })
        .await?;
    print_booking(out, "cancelled", response.booking.as_ref());
    Ok(ExitCode::SUCCESS)
}

/// `{"ok": true, "booking": …}` or `VERB` and the booking.
fn print_booking(out: Output, verb: &str, booking: Option<&pb::Booking>) {
    let value = json!({"ok": true, "booking": booking.map(output::booking_json)});
    output::print(out, &value, || {
        format!(
            "{verb}\n{}",
            booking.map(output::booking_text).unwrap_or_default()
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> SystemTime {
        humantime::parse_rfc3339(text).expect("utc")
    }

    #[test]
    fn a_start_is_rfc3339_with_or_without_an_offset_or_a_duration_from_now() {
        let nine_utc = utc("2026-12-01T09:00:00Z");
        assert_eq!(parse_start("2026-12-01T09:00:00Z"), Ok(nine_utc));
        assert_eq!(parse_start("2026-12-01T09:00:00"), Ok(nine_utc));
        assert_eq!(parse_start("2026-12-01T10:30:00+01:30"), Ok(nine_utc));
        assert_eq!(parse_start("2026-12-01T04:00:00-05:00"), Ok(nine_utc));
        let before = SystemTime::now();
        let soon = parse_start("+30m").expect("from now");
        assert!(soon >= before + Duration::from_secs(1800), "{soon:?}");
        assert!(parse_start("tomorrow").is_err());
        assert!(parse_start("+soon").is_err());
    }
}
