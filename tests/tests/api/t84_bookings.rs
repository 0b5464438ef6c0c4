//! Bookings (SPEC §4.8) through the API: listed by GetResource, refusing leases of other
//! holders that would reach into the window with `resource_booked` and its start; only of
//! bookable resources.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure_client::{pb, prost_duration};
use tenure_tests::{started, started_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_is_listed_and_keeps_other_holders_out_of_its_window() {
    // Ad-hoc resources are bookable on a cluster started so.
    let flags = tenure_tests::same_flags(3, &["--ad-hoc-bookable"]);
    let (cluster, _) = started_with(3, flags).await;
    let client = cluster.client();
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let start = prost_types::Timestamp {
        seconds: now_s + 3_600,
        nanos: 0,
    };
    let booking = client
        .book(pb::BookRequest {
            resource: "room/1".into(),
            holder: "team-a".into(),
            start: Some(start),
            duration: Some(prost_duration(Duration::from_secs(1_800))),
            ..Default::default()
        })
        .await
        .expect("book")
        .booking
        .expect("booking");
    assert_eq!(booking.start, Some(start));

    let overlapping = client
        .book(pb::BookRequest {
            resource: "room/1".into(),
            holder: "team-b".into(),
            start: Some(prost_types::Timestamp {
                seconds: now_s + 3_600 + 60,
                nanos: 0,
            }),
            duration: Some(prost_duration(Duration::from_secs(60))),
            ..Default::default()
        })
        .await
        .expect_err("overlaps");
    assert_eq!(
        overlapping.reason(),
        Some(tenure_client::Reason::ResourceBooked)
    );

    let view = client
        .get_resource(pb::GetResourceRequest {
            name: "room/1".into(),
            ..Default::default()
        })
        .await
        .expect("get")
        .resource
        .expect("resource");
    assert_eq!(view.bookings, vec![booking.clone()]);

    // Two hours would reach into the window; the refusal names its start.
    let refused = client
        .acquire(pb::AcquireRequest {
            resource: "room/1".into(),
            holder: "team-b".into(),
            ttl: Some(prost_duration(Duration::from_secs(7_200))),
            ..Default::default()
        })
        .await
        .expect("answered");
    assert!(!refused.granted);
    assert_eq!(refused.reason, "resource_booked");
    assert_eq!(refused.booked_from, Some(start));
    // Ten minutes end well before it.
    let short = client
        .acquire(pb::AcquireRequest {
            resource: "room/1".into(),
            holder: "team-b".into(),
            ttl: Some(prost_duration(Duration::from_secs(600))),
            ..Default::default()
        })
        .await
        .expect("answered");
    assert!(short.granted, "{short:?}");

    let cancelled = client
        .cancel_booking(pb::CancelBookingRequest {
            resource: "room/1".into(),
            holder: "team-a".into(),
            start: Some(start),
            ..Default::default()
        })
        .await
        .expect("cancel");
    assert_eq!(cancelled.booking, Some(booking));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_bookable_resources_may_be_booked() {
    let (cluster, _) = started(1).await;
    let client = cluster.client();
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let book = |resource: &str| pb::BookRequest {
        resource: resource.into(),
        holder: "team-a".into(),
        start: Some(prost_types::Timestamp {
            seconds: now_s + 3_600,
            nanos: 0,
        }),
        duration: Some(prost_duration(Duration::from_secs(600))),
        ..Default::default()
    };
    let refused = client.book(book("adhoc/1")).await.expect_err("ad hoc");
    assert_eq!(refused.reason(), Some(tenure_client::Reason::NotBookable));
    for (name, bookable) in [("plain/1", false), ("room/2", true)] {
        client
            .create_resource(pb::CreateResourceRequest {
                name: name.into(),
                policy: Some(pb::Policy {
                    bookable,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("create");
    }
    let refused = client
        .book(book("plain/1"))
        .await
        .expect_err("not bookable");
    assert_eq!(refused.reason(), Some(tenure_client::Reason::NotBookable));
    client.book(book("room/2")).await.expect("bookable");
    cluster.shutdown().await;
}
