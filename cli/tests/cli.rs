//! `tenure`'s command line without a cluster: every verb is there, and a call that cannot
//! be made exits 2 with its reason. (Also makes `cargo test --workspace` build the binary
//! that `tests/tests/t65_cli.rs` drives against a live cluster.)

use std::process::Command;

fn tenure(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .env_remove("TENURE_ENDPOINTS")
        .env_remove("TENURE_TOKEN")
        .output()
        .expect("run tenure")
}

#[test]
fn help_lists_every_verb() {
    let out = tenure(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for verb in [
        "acquire",
        "renew",
        "release",
        "transfer",
        "validate",
        "status",
        "resources",
        "leases",
        "history",
        "cluster",
        "bench",
        "--auth-token",
    ] {
        assert!(help.contains(verb), "missing {verb} in:\n{help}");
    }
}

#[test]
fn a_malformed_flag_exits_2_before_any_call() {
    for args in [
        &["acquire", "r", "--holder", "h", "--metadata", "no-equals"][..],
        &["acquire", "r", "--holder", "h", "--mode", "shared"],
        &["resources", "create", "r", "--fsm", "no-colon"],
        &["resources", "create", "r", "--default-ttl", "soon"],
        &["history", "r", "--events", "acquired,exploded"],
        &["leases"],
    ] {
        let out = tenure(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} printed no error");
    }
}

#[test]
fn an_unreachable_cluster_exits_2_with_the_reason_unavailable() {
    let out = tenure(&[
        "--endpoints",
        "127.0.0.1:1",
        "--timeout",
        "500ms",
        "--output",
        "json",
        "status",
        "world/eu-1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["reason"], "unavailable", "{answer}");
    // The endpoint that did not answer is named, with what it did.
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains("(127.0.0.1:1: "), "{answer}");
}

#[test]
fn a_negative_duration_is_explained_not_taken_for_a_flag() {
    for flag in ["--ttl", "--wait"] {
        let out = tenure(&["acquire", "r", "--holder", "h", flag, "-5s"]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot be negative: write it as 5s"),
            "{flag}: {stderr}"
        );
    }
}
