//! `tenured`'s command line refuses a bad configuration with a clear message.
//! (Also makes `cargo test --workspace` build the binary the process-level tests run.)

use std::process::Command;

fn tenured(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenured"))
        .args(args)
        .output()
        .expect("run tenured")
}

#[test]
fn help_lists_every_flag() {
    let out = tenured(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--id",
        "--listen",
        "--data-dir",
        "--peers",
        "--tick-interval",
        "--election-min",
    ] {
        assert!(help.contains(flag), "missing {flag} in:\n{help}");
    }
}

#[test]
fn a_peer_list_without_this_node_is_refused() {
    let dir = std::env::temp_dir().join(format!("tenured-cli-{}", std::process::id()));
    let out = tenured(&[
        "--id",
        "4",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &dir.display().to_string(),
        "--peers",
        "1=127.0.0.1:1,2=127.0.0.1:2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must include this node's id 4"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_malformed_peer_is_refused() {
    let out = tenured(&[
        "--id",
        "1",
        "--listen",
        "x",
        "--data-dir",
        "/nonexistent",
        "--peers",
        "1-127.0.0.1:7101",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not ID=HOST:PORT"));
}

#[test]
fn no_worker_threads_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tenured(&[
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &dir.path().display().to_string(),
        "--peers",
        "1=127.0.0.1:1",
        "--worker-threads",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--worker-threads must be at least 1"));
}
