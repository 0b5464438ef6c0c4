use super::*;

fn with_header(value: &str) -> http::HeaderMap {
    let mut m = http::HeaderMap::new();
    m.insert("authorization", value.parse().expect("ascii"));
    m
}

#[test]
fn tokens_map_to_principals_and_roles() {
    let auth =
        Auth::parse("# comment\n\ns3cret-a alice admin\ns3cret-b bob client\np33r-1 nodes peer\n")
            .expect("parses");
    let alice = auth.caller(&with_header("Bearer s3cret-a")).expect("alice");
    assert_eq!((alice.principal.as_str(), alice.admin), ("alice", true));
    let bob = auth.caller(&with_header("Bearer s3cret-b")).expect("bob");
    assert_eq!((bob.principal.as_str(), bob.admin), ("bob", false));
}

#[test]
fn missing_malformed_and_unknown_tokens_are_unauthenticated() {
    let auth = Auth::parse("t1 alice admin\np1 nodes peer").expect("parses");
    for metadata in [
        http::HeaderMap::new(),
        with_header("t1"),
        with_header("Basic t1"),
        with_header("Bearer nope"),
    ] {
        let err = auth.caller(&metadata).expect_err("refused");
        assert_eq!(err.reason_and_code().0, "unauthenticated");
    }
}

#[test]
fn only_peer_tokens_reach_the_internal_service_and_never_the_client_api() {
    let auth = Auth::parse("t1 alice admin\np2 nodes peer\np1 nodes peer").expect("parses");
    assert_eq!(auth.peer_token(), Some("p1"), "every node picks the same");
    assert!(auth.check_peer(&with_header("Bearer p1")).is_ok());
    assert!(auth.check_peer(&with_header("Bearer p2")).is_ok());
    let err = auth
        .check_peer(&http::HeaderMap::new())
        .expect_err("no token");
    assert_eq!(err.reason_and_code().0, "unauthenticated");
    let err = auth
        .check_peer(&with_header("Bearer t1"))
        .expect_err("a client token");
    assert_eq!(err.reason_and_code().0, "insufficient_permissions");
    let err = auth
        .caller(&with_header("Bearer p1"))
        .expect_err("peer as client");
    assert_eq!(err.reason_and_code().0, "unauthenticated");
    assert!(Auth::off().check_peer(&http::HeaderMap::new()).is_ok());
}

#[test]
fn auth_off_makes_everyone_an_anonymous_admin() {
    let caller = Auth::off().caller(&http::HeaderMap::new()).expect("anyone");
    assert_eq!(caller.principal, ANONYMOUS);
    assert!(caller.admin);
}

#[test]
fn bad_token_files_are_refused_with_the_line() {
    for text in [
        "t1 alice",
        "t1 alice root",
        "t1 al!ce admin",
        "t a admin\nt b client",
        "",
    ] {
        assert!(Auth::parse(text).is_err(), "{text:?}");
    }
}

#[test]
fn short_tokens_and_a_file_others_may_read_are_refused_unless_insecure() {
    use std::os::unix::fs::PermissionsExt;
    let long = "x".repeat(MIN_TOKEN_BYTES);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tokens");
    let write = |text: &str, mode: u32| {
        std::fs::write(&path, text).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    write(&format!("{long}a alice admin\n{long}p nodes peer\n"), 0o600);
    assert!(Auth::load(&path, false).is_ok());

    write(&format!("{long}a alice admin\n{long}p nodes peer\n"), 0o604);
    let error = Auth::load(&path, false).expect_err("others may read it");
    assert!(format!("{error:#}").contains("chmod 600"), "{error:#}");
    assert!(Auth::load(&path, true).is_ok(), "--insecure");
    // The group may read it when it is this process's own group (a Kubernetes Secret
    // under fsGroup), not another.
    write(&format!("{long}a alice admin\n{long}p nodes peer\n"), 0o640);
    assert!(Auth::load(&path, false).is_ok(), "this process's own group");
    let other_group = rustix::process::getegid().as_raw() + 1;
    // Only root may give a file to a group it is not in; elsewhere this part is moot.
    if std::os::unix::fs::chown(&path, None, Some(other_group)).is_ok() {
        let error = Auth::load(&path, false).expect_err("another group may read it");
        assert!(format!("{error:#}").contains("chmod 600"), "{error:#}");
    }

    write(&format!("short alice admin\n{long}p nodes peer\n"), 0o600);
    let error = Auth::load(&path, false).expect_err("a short token");
    assert!(format!("{error:#}").contains("at least 32"), "{error:#}");
    assert!(Auth::load(&path, true).is_ok(), "--insecure");
}

#[test]
fn a_reload_revokes_a_token_removed_or_moved_to_another_principal_or_role() {
    let before = Auth::parse("ta alice client\ntb bob admin\np1 nodes peer").expect("parses");
    let credential = |token: &str| {
        before
            .client(&with_header(&format!("Bearer {token}")))
            .expect("known")
            .1
            .expect("auth is on")
    };
    let (alice, bob) = (credential("ta"), credential("tb"));
    assert!(before.admits(&alice) && before.admits(&bob));
    let after = Auth::parse("ta mallory client\ntb bob client\np1 nodes peer").expect("parses");
    assert!(!after.admits(&alice), "another principal");
    assert!(!after.admits(&bob), "another role");
    let gone = Auth::parse("tc carol client\np1 nodes peer").expect("parses");
    assert!(!gone.admits(&alice), "removed");
    assert!(Auth::off().admits(&alice));
}
