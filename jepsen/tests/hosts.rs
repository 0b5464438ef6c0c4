//! Network-namespace hosts and tenured processes on them. These need root and `ip netns`;
//! elsewhere they print a note and pass.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tenure_jepsen::hosts::{
    self, client_ip, node_ip, node_namespace, probe, Hosts, CLIENT_NAMESPACE,
};
use tenure_jepsen::procs::{tenured_bin, Procs};

mod common;
use common::{namespaces, QUICK, SERIAL};

/// The harness's veths (`tv-*` on the switch side, `eth0` in a host) found in the root
/// namespace. Other software's (a container engine's) are not the harness's business.
fn root_veths() -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show", "type", "veth"])
        .output();
    String::from_utf8_lossy(&out.expect("ip link").stdout)
        .lines()
        .filter(|line| {
            let name = line.split(": ").nth(1).unwrap_or("");
            name.starts_with("tv-") || name.starts_with("eth0@")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_clean() {
    assert_eq!(namespaces(), Vec::<String>::new(), "t-* namespaces left");
    assert_eq!(root_veths().trim(), "", "veths left in the root namespace");
}

#[test]
fn hosts_connect_partition_heal_and_clean_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    skip_unless_supported!("hosts_connect_partition_heal_and_clean_up");
    {
        let hosts = Hosts::setup(3).expect("setup");
        assert_eq!(
            root_veths().trim(),
            "",
            "setup put a veth in the root namespace"
        );
        for n in 1..=3 {
            probe(CLIENT_NAMESPACE, &node_namespace(n), &node_ip(n), QUICK).expect("client->node");
            for m in (1..=3).filter(|&m| m != n) {
                probe(&node_namespace(n), &node_namespace(m), &node_ip(m), QUICK)
                    .expect("node->node");
            }
        }
        // Nothing off-subnet is reachable from the client namespace.
        let route = Command::new("ip")
            .args(["-n", CLIENT_NAMESPACE, "route", "get", "8.8.8.8"])
            .output();
        assert!(
            !route.expect("ip route").status.success(),
            "off-subnet route in t-cl"
        );

        hosts.partition(&[vec![1], vec![2, 3]]).expect("partition");
        assert!(hosts.rules(2).expect("rules").contains(&node_ip(1)));
        let (n1, n2) = (node_namespace(1), node_namespace(2));
        assert!(
            probe(&n1, &n2, &node_ip(2), QUICK).is_err(),
            "1 -> 2 crossed the partition"
        );
        assert!(
            probe(&n2, &n1, &node_ip(1), QUICK).is_err(),
            "2 -> 1 crossed the partition"
        );
        probe(&node_namespace(3), &n2, &node_ip(2), QUICK).expect("3 -> 2 same side");
        probe(CLIENT_NAMESPACE, &n1, &node_ip(1), QUICK).expect("client -> 1 in a partition");
        probe(&n1, CLIENT_NAMESPACE, &client_ip(), QUICK).expect("1 -> client in a partition");

        hosts.heal().expect("heal");
        assert!(!hosts.rules(2).expect("rules").contains("drop"));
        probe(&n1, &n2, &node_ip(2), QUICK).expect("1 -> 2 after heal");

        hosts.one_way(1, 2).expect("one way");
        assert!(
            probe(&n1, &n2, &node_ip(2), QUICK).is_err(),
            "1 -> 2 despite one-way drop"
        );
        hosts.heal().expect("heal");
        hosts.loss(&[2], 100).expect("loss");
        assert!(
            probe(CLIENT_NAMESPACE, &n2, &node_ip(2), QUICK).is_err(),
            "100% loss"
        );
        hosts.heal().expect("heal");
        probe(CLIENT_NAMESPACE, &n2, &node_ip(2), QUICK).expect("client -> 2 after heal");
        assert!(
            hosts.partition(&[vec![1], vec![1, 2]]).is_err(),
            "node in two groups"
        );
        assert!(hosts.isolate(4).is_err(), "no node 4");
    }
    assert_clean();
}

#[test]
fn setup_refuses_leftovers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    skip_unless_supported!("setup_refuses_leftovers");
    struct Cleanup;
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = hosts::teardown_leftovers();
        }
    }
    let _cleanup = Cleanup;
    let added = Command::new("ip")
        .args(["netns", "add", "t-zz"])
        .status()
        .expect("ip");
    assert!(added.success());
    let err = Hosts::setup(3)
        .err()
        .expect("setup over leftovers must fail");
    let text = format!("{err:#}");
    assert!(
        text.contains("leftovers") && text.contains("t-zz"),
        "{text}"
    );
    assert!(text.contains("tenure-jepsen teardown"), "{text}");
    assert_eq!(
        namespaces(),
        vec!["t-zz".to_string()],
        "setup touched something"
    );
    hosts::teardown_leftovers().expect("teardown");
    assert_clean();
}

#[test]
fn teardown_kills_what_runs_in_the_namespaces() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    skip_unless_supported!("teardown_kills_what_runs_in_the_namespaces");
    let hosts = Hosts::setup(1).expect("setup");
    let mut children: Vec<_> = [node_namespace(1), CLIENT_NAMESPACE.to_string()]
        .iter()
        .map(|ns| {
            Command::new("ip")
                .args(["netns", "exec", ns, "sleep", "1000"])
                .spawn()
                .expect("spawn sleep")
        })
        .collect();
    // The sleeps are still running: dropping the guard must kill them before deleting.
    std::thread::sleep(Duration::from_millis(200));
    drop(hosts);
    for child in &mut children {
        let status = child.wait().expect("wait");
        assert!(!status.success(), "sleep ended by itself: {status}");
    }
    assert_clean();
}

/// Pids of live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .and_then(|s| s.chars().next())
        .unwrap_or('?')
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// From a thread inside t-cl: waits until some node reports a leader; returns its id.
fn await_leader(endpoints: Vec<String>, within: Duration) -> u64 {
    std::thread::spawn(move || {
        hosts::enter_client_namespace().expect("enter t-cl");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            let client = tenure_client::Client::new(&endpoints)
                .expect("client")
                .with_timeout(Duration::from_secs(1));
            let deadline = Instant::now() + within;
            loop {
                for i in 0..endpoints.len() {
                    if let Ok(status) = client.node_status(i).await {
                        if status.leader_id != 0 {
                            return status.leader_id;
                        }
                    }
                }
                assert!(Instant::now() < deadline, "no leader within {within:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    })
    .join()
    .expect("leader thread")
}

#[test]
fn procs_start_kill_pause_and_clean_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    skip_unless_supported!("procs_start_kill_pause_and_clean_up");
    let bin = match tenured_bin() {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("note: skipping: {e:#}");
            return;
        }
    };
    let data = tempfile::tempdir().expect("tempdir");
    let root = data.path().to_path_buf();
    {
        let hosts = Hosts::setup(3).expect("setup");
        let bad = Procs::start(
            &hosts,
            bin.clone(),
            1,
            root.join("bad"),
            vec!["--bogus".into()],
            false,
            None,
        );
        let text = format!("{:#}", bad.err().expect("start with a bad flag must fail"));
        assert!(
            text.contains("exited at start") && text.contains("--bogus"),
            "{text}"
        );
        let mut procs =
            Procs::start(&hosts, bin, 3, root.clone(), vec![], false, None).expect("start");
        assert_eq!(procs.endpoints()[0], "10.77.0.11:7100");
        for id in 1..=3 {
            let pid = procs.pid(id).expect("pid");
            assert_eq!(comm(pid), "tenured", "pid of node {id} is not tenured's");
            assert!(procs.is_running(id));
        }
        let leader = await_leader(procs.endpoints(), Duration::from_secs(20));
        assert!((1..=3).contains(&leader), "leader {leader}");

        let victim = if leader == 3 { 2 } else { 3 };
        let pid = procs.pid(victim).expect("pid");
        procs.kill9(victim).expect("kill9");
        assert!(!procs.is_running(victim));
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "killed node not reaped"
        );
        procs.restart(victim).expect("restart");
        assert!(procs.is_running(victim));
        assert!(procs.restart(victim).is_err(), "restart of a running node");

        let pid = procs.pid(leader).expect("pid");
        procs.pause(leader).expect("pause");
        assert_eq!(state(pid), 'T', "paused node state");
        procs.resume(leader).expect("resume");
        assert_ne!(state(pid), 'T', "resumed node state");
        await_leader(procs.endpoints(), Duration::from_secs(20));

        procs.pause(1).expect("pause before teardown");
        assert!(processes_mentioning(&root.to_string_lossy()).len() >= 3);
        let log = std::fs::read_to_string(procs.log_path(1)).expect("log");
        assert!(!log.is_empty(), "node 1 wrote no log");
        // Drop order: procs (SIGKILL + reap, a paused node too), then hosts.
    }
    let left = processes_mentioning(&root.to_string_lossy());
    assert!(left.is_empty(), "tenured processes left: {left:?}");
    assert_clean();
}
