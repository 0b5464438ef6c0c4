//! The `tenure` verbs of the waiting room, bookings, watch, elect and the handoff bench: the
//! real binary against live clusters (in-process, and real processes where a node is
//! killed), judged by exit codes and `--output json`. Blocking verbs run as children whose
//! output lines are awaited; nothing sleeps to synchronise. Needs `target/debug/tenure`
//! (`cargo build --bin tenure`, or `$TENURE_BIN`).

use std::collections::BTreeMap;

use serde_json::Value;
use tenure_tests::cli::{token_of, Cli};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::process::ProcessCluster;
use tenure_tests::{started, ELECTION};

/// A started three-node cluster and the CLI pointed at it.
async fn in_process() -> (InProcessCluster, Cli) {
    let (cluster, _) = started(3).await;
    let cli = Cli::of(cluster.addrs.values());
    (cluster, cli)
}

/// Resolves once `resource` has had `n` `queued` events: the waits are in the log.
async fn queued(cli: &Cli, resource: &str, n: usize) {
    cli.run(&format!("watch {resource} --events queued --count {n}"))
        .await
        .exits(0);
}

/// `leading N` → N.
fn leading_token(line: &str) -> u64 {
    line.strip_prefix("leading ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not `leading TOKEN`: {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_blocks_until_the_release_whose_entry_is_its_token() {
    let (cluster, cli) = in_process().await;
    let (code, a) = cli.json("acquire cli/wait --holder a --ttl 30s").await;
    assert_eq!(code, Some(0), "{a}");
    let waiter = cli.spawn("--output json acquire cli/wait --holder b --ttl 30s --wait 30s");
    queued(&cli, "cli/wait", 1).await;
    let (code, status) = cli.json("status cli/wait").await;
    assert_eq!(code, Some(0), "{status}");
    assert_eq!(status["waiting"], 1, "{status}");
    assert_eq!(status["waiters"][0]["holder"], "b", "{status}");
    assert_eq!(status["waiters"][0]["position"], 1, "{status}");

    let release = format!("release cli/wait --holder a --token {}", token_of(&a));
    let (code, released) = cli.json(&release).await;
    assert_eq!(code, Some(0), "{released}");
    let granted = waiter.finish().await.exits(0).json();
    assert_eq!(granted["granted"], true, "{granted}");
    assert_eq!(granted["lease"]["holder"], "b");
    let (_, history) = cli.json("history cli/wait --events released").await;
    assert_eq!(
        granted["lease"]["fencing_token"], history["entries"][0]["revision"],
        "the release entry admits b and is its token: {history}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_times_out_with_exit_1_and_its_queue_position() {
    let (cluster, cli) = in_process().await;
    cli.run("acquire cli/slow --holder a --ttl 30s")
        .await
        .exits(0);
    let refused = cli
        .run("acquire cli/slow --holder b --wait 1s")
        .await
        .exits(1);
    assert!(
        refused
            .stdout
            .starts_with("not granted: wait_timeout (queue position 1)\n"),
        "{}",
        refused.stdout
    );
    assert!(refused.stdout.contains("holder a"), "{}", refused.stdout);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_wait_ends_a_blocked_acquire_with_wait_cancelled() {
    let (cluster, cli) = in_process().await;
    cli.run("acquire cli/cancel --holder a --ttl 30s")
        .await
        .exits(0);
    let waiter = cli.spawn("--output json acquire cli/cancel --holder b --wait 60s");
    queued(&cli, "cli/cancel", 1).await;
    let (code, cancelled) = cli.json("cancel-wait cli/cancel --holder b").await;
    assert_eq!(
        (code, &cancelled["cancelled"]),
        (Some(0), &true.into()),
        "{cancelled}"
    );
    let ended = waiter.finish().await.exits(1).json();
    assert_eq!(ended["reason"], "wait_cancelled", "{ended}");
    assert_eq!(ended["queue_position"], 1, "{ended}");
    let (code, again) = cli.json("cancel-wait cli/cancel --holder b").await;
    assert_eq!(
        (code, &again["cancelled"]),
        (Some(1), &false.into()),
        "{again}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_refuses_leases_that_would_extend_into_it_until_cancelled() {
    let (cluster, cli) = in_process().await;
    let (code, created) = cli.json("resources create cli/room --bookable").await;
    assert_eq!(code, Some(0), "{created}");
    assert_eq!(created["resource"]["policy"]["bookable"], true, "{created}");
    let (code, booked) = cli
        .json("book cli/room --holder alice --start +1h --duration 30m")
        .await;
    assert_eq!(code, Some(0), "{booked}");
    assert_eq!(booked["booking"]["holder"], "alice");
    assert_eq!(booked["booking"]["duration_ms"], 1_800_000);
    let start = booked["booking"]["start"]
        .as_str()
        .expect("start")
        .to_string();

    let overlap = format!("book cli/room --holder carol --start {start} --duration 10m");
    let (code, refused) = cli.json(&overlap).await;
    assert_eq!(
        (code, &refused["reason"]),
        (Some(2), &"resource_booked".into()),
        "{refused}"
    );
    let long = "acquire cli/room --holder bob --ttl 2h";
    let (code, refused) = cli.json(long).await;
    assert_eq!(code, Some(1), "{refused}");
    assert_eq!(refused["reason"], "resource_booked");
    assert_eq!(refused["booked_from"], start.as_str(), "{refused}");

    let (code, short) = cli.json("acquire cli/room --holder bob --ttl 30s").await;
    assert_eq!(
        code,
        Some(0),
        "a lease that ends before the window: {short}"
    );
    let release = format!("release cli/room --holder bob --token {}", token_of(&short));
    cli.run(&release).await.exits(0);
    let (_, status) = cli.json("status cli/room").await;
    assert_eq!(status["bookings"][0]["holder"], "alice", "{status}");
    assert_eq!(status["bookings"][0]["start"], start.as_str());

    let cancel = format!("cancel-booking cli/room --holder alice --start {start}");
    cli.run(&cancel).await.exits(0);
    let (code, granted) = cli.json(long).await;
    assert_eq!(code, Some(0), "the window is gone: {granted}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_history_then_live_events_and_resumes_after_its_node_is_killed() {
    let mut cluster = ProcessCluster::start(3, BTreeMap::new()).expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("leader");
    // The watch opens on the first endpoint: the leader, which is then killed.
    let others = cluster.addrs.iter().filter(|(id, _)| **id != leader);
    let addrs = [cluster.addrs[&leader].clone()]
        .into_iter()
        .chain(others.map(|(_, addr)| addr.clone()));
    let cli = Cli::of(addrs);
    let (code, a) = cli.json("acquire cli/w/a --holder x --ttl 60s").await;
    assert_eq!(code, Some(0), "{a}");
    let mut watch = cli.spawn("--output json watch --prefix cli/w/");
    let event = |line: String| -> Value { serde_json::from_str(&line).expect("a JSON line") };
    let first = event(watch.line().await);
    assert_eq!(
        [&first["event"], &first["resource"]],
        ["EVENT_TYPE_ACQUIRED", "cli/w/a"],
        "{first}"
    );

    cluster.kill9(leader).expect("kill -9");
    cluster.leader(ELECTION).await.expect("a new leader");
    cli.run("acquire cli/w/b --holder y --ttl 60s")
        .await
        .exits(0);
    let release = format!("release cli/w/a --holder x --token {}", token_of(&a));
    cli.run(&release).await.exits(0);
    let second = event(watch.line().await);
    let third = event(watch.line().await);
    assert_eq!(
        [
            &second["event"],
            &second["resource"],
            &third["event"],
            &third["resource"]
        ],
        [
            "EVENT_TYPE_ACQUIRED",
            "cli/w/b",
            "EVENT_TYPE_RELEASED",
            "cli/w/a"
        ],
        "no gap, no duplicate across the kill: {second} {third}"
    );
    let revisions: Vec<u64> = [&first, &second, &third]
        .iter()
        .map(|e| e["revision"].as_u64().expect("revision"))
        .collect();
    assert!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");
    drop(watch);

    // From a revision on: only what came after it.
    let after_first = format!("watch cli/w/a --from-revision {} --count 1", revisions[0]);
    let ran = cli.run(&after_first).await.exits(0);
    assert!(ran.stdout.starts_with("cli/w/a"), "{}", ran.stdout);
    assert!(ran.stdout.contains("released"), "{}", ran.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_the_command_while_leading_and_the_next_candidate_after_it() {
    let (cluster, cli) = in_process().await;
    let leads = "echo leading $TENURE_FENCING_TOKEN; read done; exit 3";
    let mut first = cli.spawn_args(&[
        "elect", "cli/lead", "--holder", "e1", "--", "sh", "-c", leads,
    ]);
    let first_token = leading_token(&first.line().await);
    let then = "echo leading $TENURE_FENCING_TOKEN";
    let mut second = cli.spawn_args(&[
        "elect", "cli/lead", "--holder", "e2", "--", "sh", "-c", then,
    ]);
    queued(&cli, "cli/lead", 1).await;
    let (_, status) = cli.json("status cli/lead").await;
    assert_eq!(status["leases"][0]["holder"], "e1", "{status}");
    assert_eq!(status["leases"][0]["fencing_token"], first_token);
    assert_eq!(status["waiters"][0]["holder"], "e2", "{status}");

    // The first command ends (its stdin closes): tenure resigns and exits with its code.
    first.close_stdin();
    let ended = first.finish().await.exits(3);
    assert!(ended.stderr.contains("e1 resigned"), "{}", ended.stderr);
    let second_token = leading_token(&second.line().await);
    assert!(
        second_token > first_token,
        "{second_token} after {first_token}"
    );
    second.finish().await.exits(0);
    let (_, status) = cli.json("status cli/lead").await;
    assert_eq!(status["leases"], serde_json::json!([]), "{status}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_kills_the_command_when_leadership_is_lost() {
    let (cluster, cli) = in_process().await;
    let script = "echo $$ $TENURE_FENCING_TOKEN; exec sleep 600";
    let mut elect = cli.spawn_args(&[
        "elect", "cli/lost", "--holder", "e3", "--ttl", "3s", "--", "sh", "-c", script,
    ]);
    let line = elect.line().await;
    let (pid, token) = line.split_once(' ').unwrap_or_else(|| panic!("{line}"));
    // Released behind the leader's back: its next renewal is refused.
    cli.run(&format!("release cli/lost --holder e3 --token {token}"))
        .await
        .exits(0);
    let ended = elect.finish().await.exits(2);
    assert!(
        ended.stderr.contains("lost leadership of cli/lost"),
        "{}",
        ended.stderr
    );
    let pid = nix::unistd::Pid::from_raw(pid.parse().expect("pid"));
    assert_eq!(
        nix::sys::signal::kill(pid, None),
        Err(nix::errno::Errno::ESRCH),
        "the command still runs"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_handoff_prints_percentiles_and_leaves_no_lease_or_waiter() {
    let (cluster, cli) = in_process().await;
    let (code, report) = cli
        .json("bench --handoff --waiters 3 --count 20 --prefix t66")
        .await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!([&report["count"], &report["waiters"]], [20, 3], "{report}");
    let ms = |q: &str| {
        report["handoff_ms"][q]
            .as_f64()
            .unwrap_or_else(|| panic!("{q} in {report}"))
    };
    assert!(ms("p50") > 0.0, "{report}");
    assert!(
        ms("p50") <= ms("p90") && ms("p90") <= ms("p99") && ms("p99") <= ms("max"),
        "{report}"
    );
    let (_, listed) = cli.json("resources list --prefix t66/").await;
    let name = listed["resources"][0]["name"]
        .as_str()
        .expect("the bench resource");
    let (_, status) = cli.json(&format!("status {name}")).await;
    assert_eq!(status["leases"], serde_json::json!([]), "{status}");
    // The clients still queued at the end were taken out of the waiting room.
    cli.run(&format!("watch {name} --events wait_cancelled --count 3"))
        .await
        .exits(0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn help_lists_the_waiting_room_watch_booking_and_election_verbs() {
    let cli = Cli::offline();
    let help = cli.run("--help").await.exits(0);
    for verb in [
        "cancel-wait",
        "watch",
        "book",
        "cancel-booking",
        "elect",
        "bench",
    ] {
        assert!(help.stdout.contains(verb), "no {verb} in:\n{}", help.stdout);
    }
    let bench = cli.run("bench --help").await.exits(0);
    assert!(bench.stdout.contains("--handoff") && bench.stdout.contains("--waiters"));
}
