//! The directory guard from several processes at once: a writer waits for the resource's lock
//! while another holds it, and 24 `tenure-guard dir-write` commands (tokens 1 to 8, three of
//! each, in a scrambled order) racing to write one file of one resource leave it with a token-8
//! write, the fence at 8, and every refused writer fenced out by a higher token it names.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

/// `tenure-guard dir-write` of `token` into `dir/report.txt`, running, its contents sent.
fn writer(dir: &std::path::Path, token: u64) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure-guard"))
        .args(["dir-write", "--resource", "jobs/nightly", "--token"])
        .arg(token.to_string())
        .arg("--dir")
        .arg(dir)
        .arg("report.txt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns tenure-guard");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "written with {token}").expect("writes its contents");
    child
}

#[test]
fn a_writer_waits_for_the_resource_s_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let first = writer(dir.path(), 5).wait_with_output().expect("waits");
    assert!(first.status.success(), "{first:?}");
    let lock_path = dir.path().join(".tenure-fence/jobs%2Fnightly.lock");
    let lock = std::fs::File::open(&lock_path).expect("the resource's lock file");
    flock(&lock, FlockOperation::LockExclusive).expect("takes the lock");
    let mut child = writer(dir.path(), 9);
    // Blocked in flock (the kernel's wait for a file lock), not finished.
    let wchan = format!("/proc/{}/wchan", child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&wchan).unwrap_or_default() != "locks_lock_inode_wait" {
        assert!(
            child.try_wait().expect("polls").is_none(),
            "the writer did not wait for the lock"
        );
        assert!(Instant::now() < deadline, "the writer is not waiting");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(lock);
    let out = child.wait_with_output().expect("waits");
    assert!(out.status.success(), "{out:?}");
    let file = std::fs::read_to_string(dir.path().join("report.txt")).expect("the file");
    assert_eq!(file, "written with 9\n");
}

#[test]
fn concurrent_writers_in_several_processes_leave_the_highest_tenure_s_file() {
    let dir = tempfile::tempdir().expect("dir");
    let mut children = Vec::new();
    for round in 0..3u64 {
        for i in 0..8u64 {
            // A fixed scramble of 1..=8 per round.
            let token = (i * 5 + round * 3) % 8 + 1;
            let child = writer(dir.path(), token);
            children.push((token, child));
        }
    }
    let mut written = 0;
    for (token, child) in children {
        let out = child.wait_with_output().expect("waits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => written += 1,
            Some(3) => {
                let seen: u64 = stderr
                    .split("has seen ")
                    .nth(1)
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("names the token it saw: {stderr}"));
                assert!(seen > token, "{stderr}");
                assert!(stderr.contains(&format!("carries {token}")), "{stderr}");
            }
            other => panic!("token {token}: {other:?} {stderr}"),
        }
    }
    assert!(written >= 3, "the three writers of token 8 always pass");
    let file = std::fs::read_to_string(dir.path().join("report.txt")).expect("the file");
    assert_eq!(file, "written with 8\n");
    let highest = Command::new(env!("CARGO_BIN_EXE_tenure-guard"))
        .args(["dir-highest", "--resource", "jobs/nightly", "--dir"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(String::from_utf8_lossy(&highest.stdout).trim(), "8");
    // Nothing but the file and the fence: no temporary file of a refused writer is left.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".tenure-fence", "report.txt"]);
}
