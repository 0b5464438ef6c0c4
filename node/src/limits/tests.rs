use super::*;

/// A principal that read its second's worth waits for the next; another does not.
#[test]
fn a_principal_past_its_read_rate_waits_and_others_do_not() {
    let pacer = ReadPacer::new(1000);
    assert_eq!(pacer.wait("lister", 1000), None);
    let wait = pacer.wait("lister", 1000).expect("paced");
    assert!(wait > Duration::from_millis(500), "{wait:?}");
    assert_eq!(pacer.wait("other", 1000), None);
    // A page larger than the burst is charged as the largest page, never refused.
    assert_eq!(pacer.wait("big", u32::MAX), None);
}

#[test]
fn a_gauge_refuses_past_its_limit_and_frees_a_place_when_a_permit_drops() {
    let gauge = Gauge::new(Cap::Streams, 2);
    let first = gauge.enter().expect("first");
    let _second = gauge.enter().expect("second");
    let refused = gauge.enter().expect_err("third");
    assert_eq!(refused.reason_and_code().0, "too_many_streams");
    assert_eq!(refused.reason_and_code().1, tonic::Code::ResourceExhausted);
    assert_eq!(gauge.open(), 2);
    drop(first);
    gauge.enter().expect("a place again");
}

#[test]
fn one_principal_cannot_take_more_than_its_share_of_the_places_in_flight() {
    let per_principal = PerPrincipal::new(Cap::PrincipalInFlight, 2);
    let first = per_principal.enter("mallory").expect("first");
    let _second = per_principal.enter("mallory").expect("second");
    let refused = per_principal.enter("mallory").expect_err("third");
    assert_eq!(refused.reason_and_code().0, "too_many_requests");
    assert!(refused.to_string().contains("mallory"), "{refused}");
    per_principal.enter("alice").expect("another principal");
    drop(first);
    per_principal.enter("mallory").expect("a place again");
    // Entries go when their principal has nothing in flight.
    drop(_second);
    assert!(per_principal
        .open
        .lock()
        .expect("lock")
        .get("alice")
        .is_none());
}

#[test]
fn one_principal_past_its_share_of_streams_is_refused_naming_the_flag() {
    let per_principal = PerPrincipal::new(Cap::PrincipalStreams, 1);
    let _open = per_principal.enter("mallory").expect("first");
    let refused = per_principal.enter("mallory").expect_err("second");
    assert_eq!(refused.reason_and_code().0, "too_many_streams");
    assert!(
        refused
            .to_string()
            .contains("--max-open-streams-per-principal"),
        "{refused}"
    );
}
