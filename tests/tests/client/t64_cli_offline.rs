//! `tenure`'s command line without a cluster: every verb is there, and a call that cannot
//! be made exits 2 with its reason.

use tenure_tests::cli::Cli;

#[tokio::test]
async fn help_lists_every_verb() {
    let out = Cli::offline().run("--help").await;
    assert_eq!(out.code, Some(0));
    let help = out.stdout;
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

#[tokio::test]
async fn a_malformed_flag_exits_2_before_any_call() {
    for args in [
        &["acquire", "r", "--holder", "h", "--metadata", "no-equals"][..],
        &["acquire", "r", "--holder", "h", "--mode", "shared"],
        &["resources", "create", "r", "--fsm", "no-colon"],
        &["resources", "create", "r", "--default-ttl", "soon"],
        &["history", "r", "--events", "acquired,exploded"],
        &["leases"],
    ] {
        let out = Cli::offline().run_args(args).await;
        assert_eq!(out.code, Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} printed no error");
    }
}

#[tokio::test]
async fn an_unreachable_cluster_exits_2_with_the_reason_unavailable() {
    let out = Cli::offline()
        .run("--endpoints 127.0.0.1:1 --timeout 500ms --output json status world/eu-1")
        .await;
    assert_eq!(out.code, Some(2));
    let answer = out.json();
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["reason"], "unavailable", "{answer}");
    // The endpoint that did not answer is named, with what it did.
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains("(127.0.0.1:1: "), "{answer}");
}

#[tokio::test]
async fn a_negative_duration_is_explained_not_taken_for_a_flag() {
    for flag in ["--ttl", "--wait"] {
        let out = Cli::offline()
            .run_args(&["acquire", "r", "--holder", "h", flag, "-5s"])
            .await;
        assert_eq!(out.code, Some(2), "{flag}");
        assert!(
            out.stderr.contains("cannot be negative: write it as 5s"),
            "{flag}: {}",
            out.stderr
        );
    }
}
