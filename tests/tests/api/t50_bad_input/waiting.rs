//! The waiting room, bookings and watch (SPEC §4.7, §4.8, §4.12): wait timeouts, booking
//! windows, cancellations, watch scopes.

use tenure_client::pb;
use tonic::Code;

use super::row::{acquire, bad_names, ttl, Row, BAD, DAY_SECONDS, HOLDER};

/// A booking's start, `seconds` and `nanos` after 1970.
fn start(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds, nanos })
}

/// A right booking of [`BAD`] for a minute.
fn book() -> pb::BookRequest {
    pb::BookRequest {
        resource: BAD.into(),
        holder: HOLDER.into(),
        start: start(4_000_000_000, 0),
        duration: ttl(60, 0),
        request_id: String::new(),
    }
}

/// An acquire of [`BAD`] that waits up to `wait_timeout`.
fn wait(wait_timeout: Option<prost_types::Duration>) -> pb::AcquireRequest {
    pb::AcquireRequest {
        on_conflict: pb::OnConflict::Wait as i32,
        wait_timeout,
        ..acquire(BAD, HOLDER)
    }
}

pub fn rows() -> Vec<Row> {
    let mut rows = vec![
        Row::invalid("acquire: negative wait_timeout", wait(ttl(-1, 0))),
        Row::invalid(
            "acquire: wait_timeout over 90 days",
            wait(ttl(91 * DAY_SECONDS, 0)),
        ),
        Row::invalid(
            "book: no start",
            pb::BookRequest {
                start: None,
                ..book()
            },
        ),
        Row::invalid(
            "book: start before 1970",
            pb::BookRequest {
                start: start(-5, 0),
                ..book()
            },
        ),
        Row::invalid(
            "book: nanos out of range",
            pb::BookRequest {
                start: start(4_000_000_000, 1_000_000_000),
                ..book()
            },
        ),
        Row::invalid(
            "book: no duration",
            pb::BookRequest {
                duration: None,
                ..book()
            },
        ),
        Row::invalid(
            "book: duration under 1 s",
            pb::BookRequest {
                duration: ttl(0, 999_000_000),
                ..book()
            },
        ),
        Row::invalid(
            "book: duration over 90 days",
            pb::BookRequest {
                duration: ttl(91 * DAY_SECONDS, 0),
                ..book()
            },
        ),
        Row::invalid(
            "book: start more than 366 days ahead",
            pb::BookRequest {
                start: start(40_000_000_000, 0),
                ..book()
            },
        ),
        Row::invalid(
            "cancel_booking: no such booking",
            pb::CancelBookingRequest {
                resource: BAD.into(),
                holder: HOLDER.into(),
                start: start(4_000_000_000, 0),
                request_id: String::new(),
            },
        )
        .gets(Code::NotFound, "booking_not_found"),
        Row::invalid(
            "watch: both resource and prefix",
            pb::WatchRequest {
                resource: BAD.into(),
                prefix: "t50/".into(),
                ..Default::default()
            },
        ),
        Row::invalid(
            "watch: live_only with a start_revision",
            pb::WatchRequest {
                resource: BAD.into(),
                start_revision: 5,
                live_only: true,
                ..Default::default()
            },
        ),
        Row::invalid(
            "watch: unknown event type",
            pb::WatchRequest {
                resource: BAD.into(),
                events: vec![99],
                ..Default::default()
            },
        ),
    ];
    for (what, name) in bad_names() {
        rows.push(Row::invalid(
            format!("cancel_wait: resource {what}"),
            pb::CancelWaitRequest {
                resource: name.clone(),
                holder: HOLDER.into(),
                request_id: String::new(),
                queued_revision: 0,
            },
        ));
        rows.push(Row::invalid(
            format!("cancel_wait: holder {what}"),
            pb::CancelWaitRequest {
                resource: BAD.into(),
                holder: name.clone(),
                request_id: String::new(),
                queued_revision: 0,
            },
        ));
        rows.push(Row::invalid(
            format!("book: resource {what}"),
            pb::BookRequest {
                resource: name.clone(),
                ..book()
            },
        ));
        // An empty resource and prefix is a watch of everything.
        if !name.is_empty() {
            rows.push(Row::invalid(
                format!("watch: resource {what}"),
                pb::WatchRequest {
                    resource: name.clone(),
                    ..Default::default()
                },
            ));
            rows.push(Row::invalid(
                format!("watch: prefix {what}"),
                pb::WatchRequest {
                    prefix: name,
                    ..Default::default()
                },
            ));
        }
    }
    rows
}
