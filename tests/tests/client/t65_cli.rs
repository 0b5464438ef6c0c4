//! The `tenure` CLI against a live in-process cluster: the real binary, run as a script
//! would run it, judged by its exit code and its `--output json` (and, where people read
//! it, its text). Needs `target/debug/tenure`: `cargo test --workspace` builds it, or
//! `cargo build --bin tenure` (or point `$TENURE_BIN` at one).

use serde_json::Value;
use tenure_tests::cli::{token_of, Cli};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::started;

/// A started three-node cluster and the CLI pointed at it.
async fn start() -> (InProcessCluster, Cli) {
    let (cluster, _) = started(3).await;
    let cli = Cli::of(cluster.addrs.values());
    (cluster, cli)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_create_registers_a_policy_that_get_and_list_show() {
    let (cluster, tenure) = start().await;
    let (code, created) = tenure
        .json_args(&[
            "resources",
            "create",
            "cli/pool",
            "--kind",
            "gpu",
            "--display-name",
            "GPU pool",
            "--default-ttl",
            "1m",
            "--max-ttl",
            "1h",
            "--renewal-grace",
            "5s",
            "--transferable",
            "--shared-modes",
            "read",
            "--total-units",
            "4",
            "--fsm",
            "deploy:promote",
        ])
        .await;
    assert_eq!(code, Some(0), "{created}");
    assert_eq!(created["ok"], true);
    assert_eq!(created["resource"]["name"], "cli/pool");

    let (code, got) = tenure.json_args(&["resources", "get", "cli/pool"]).await;
    assert_eq!(code, Some(0), "{got}");
    let policy = &got["policy"];
    assert_eq!(got["ad_hoc"], false, "{got}");
    assert_eq!(got["kind"], "gpu");
    assert_eq!(policy["transferable"], true, "{got}");
    assert_eq!(
        policy["shared_modes"],
        serde_json::json!(["LEASE_MODE_READ"])
    );
    assert_eq!(policy["total_units"], 4);
    assert_eq!(policy["default_ttl_ms"], 60_000);
    assert_eq!(policy["max_ttl_ms"], 3_600_000);
    assert_eq!(policy["renewal_grace_ms"], 5_000);
    assert_eq!(policy["fsm_requirements"][0]["machine"], "deploy");
    assert_eq!(policy["fsm_requirements"][0]["transition"], "promote");

    let text = tenure.run_args(&["resources", "get", "cli/pool"]).await;
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    for part in [
        "default ttl 1m",
        "max ttl 1h",
        "transferable yes",
        "shared modes READ",
        "total units 4",
        "fsm deploy:promote",
    ] {
        assert!(
            text.stdout.contains(part),
            "no {part:?} in:\n{}",
            text.stdout
        );
    }

    let again = tenure.run_args(&["resources", "create", "cli/pool"]).await;
    assert_eq!(again.code, Some(2));
    assert!(again.stderr.contains("already_exists"), "{}", again.stderr);

    let (code, _) = tenure
        .json_args(&["resources", "create", "cli/plain"])
        .await;
    assert_eq!(code, Some(0));
    let (code, generated) = tenure.json_args(&["resources", "create"]).await;
    assert_eq!(code, Some(0), "{generated}");
    assert!(
        generated["resource"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("res_")),
        "{generated}"
    );

    let names = |page: &Value| -> Vec<String> {
        page["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("no resources in {page}"))
            .iter()
            .map(|r| r["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (code, first) = tenure
        .json_args(&["resources", "list", "--prefix", "cli/", "--page-size", "1"])
        .await;
    assert_eq!(code, Some(0), "{first}");
    assert_eq!(names(&first), ["cli/plain"]);
    assert_ne!(first["next_page_token"], "", "{first}");
    let (code, all) = tenure
        .json_args(&[
            "resources",
            "list",
            "--prefix",
            "cli/",
            "--page-size",
            "1",
            "--all",
        ])
        .await;
    assert_eq!(code, Some(0), "{all}");
    assert_eq!(names(&all), ["cli/plain", "cli/pool"]);
    assert_eq!(all["next_page_token"], "");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_units_a_transfer_and_the_history_through_the_cli() {
    let (cluster, tenure) = start().await;
    let create = [
        "resources",
        "create",
        "cli/seats",
        "--transferable",
        "--shared-modes",
        "read",
        "--total-units",
        "4",
    ];
    assert_eq!(tenure.json_args(&create).await.0, Some(0));
    let acquire = |holder: &'static str, units: &'static str| {
        [
            "acquire",
            "cli/seats",
            "--holder",
            holder,
            "--ttl",
            "30s",
            "--mode",
            "read",
            "--units",
            units,
            "--metadata",
            "zone=eu",
        ]
    };

    let (code, a) = tenure.json_args(&acquire("a", "3")).await;
    assert_eq!(code, Some(0), "{a}");
    assert_eq!(a["granted"], true);
    assert_eq!(a["lease"]["mode"], "LEASE_MODE_READ");
    assert_eq!(a["lease"]["units"], 3);
    assert_eq!(a["lease"]["ttl_ms"], 30_000);
    assert_eq!(a["lease"]["metadata"]["zone"], "eu");
    let a_token = token_of(&a);

    let (code, b) = tenure.json_args(&acquire("b", "2")).await;
    assert_eq!(code, Some(1), "{b}");
    assert_eq!(b["granted"], false);
    assert_eq!(b["reason"], "insufficient_units");
    assert_eq!(b["holders"][0]["holder"], "a", "{b}");

    let c = tenure.run_args(&acquire("c", "1")).await;
    assert_eq!(c.code, Some(0), "{}{}", c.stdout, c.stderr);
    assert!(c.stdout.starts_with("granted"), "{}", c.stdout);
    assert!(c.stdout.contains("mode READ (1 unit)"), "{}", c.stdout);
    assert!(c.stdout.contains("ttl 30s"), "{}", c.stdout);

    let a_token_arg = a_token.to_string();
    let (code, moved) = tenure
        .json_args(&[
            "transfer",
            "cli/seats",
            "--holder",
            "a",
            "--token",
            &a_token_arg,
            "--to-holder",
            "d",
        ])
        .await;
    assert_eq!(code, Some(0), "{moved}");
    assert_eq!(moved["lease"]["holder"], "d");
    assert_eq!(moved["lease"]["units"], 3);
    let d_token = token_of(&moved);
    assert!(
        d_token > a_token,
        "transfer token {d_token} not above {a_token}"
    );

    let old = tenure
        .run_args(&["validate", "cli/seats", "--token", &a_token_arg])
        .await;
    assert_eq!(old.code, Some(1), "{}{}", old.stdout, old.stderr);
    assert!(old.stdout.starts_with("not valid"), "{}", old.stdout);
    let (code, new) = tenure
        .json_args(&["validate", "cli/seats", "--token", &d_token.to_string()])
        .await;
    assert_eq!(code, Some(0), "{new}");
    assert_eq!(new["valid"], true);

    let (code, history) = tenure
        .json_args(&["history", "cli/seats", "--order", "asc"])
        .await;
    assert_eq!(code, Some(0), "{history}");
    let entries = history["entries"].as_array().expect("entries");
    let events: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("?"),
                e["holder"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("EVENT_TYPE_REGISTERED", ""),
            ("EVENT_TYPE_ACQUIRED", "a"),
            ("EVENT_TYPE_ACQUIRED", "c"),
            ("EVENT_TYPE_TRANSFERRED", "a"),
        ],
        "{history}"
    );
    let revisions: Vec<u64> = entries
        .iter()
        .filter_map(|e| e["revision"].as_u64())
        .collect();
    assert!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");
    assert_eq!(entries[3]["to_holder"], "d");
    assert_eq!(entries[3]["to_fencing_token"], d_token);

    // Paged one event at a time, newest first, all pages: the same events reversed.
    let (code, paged) = tenure
        .json_args(&["history", "cli/seats", "--page-size", "1", "--all"])
        .await;
    assert_eq!(code, Some(0), "{paged}");
    let newest_first: Vec<&Value> = paged["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .collect();
    assert_eq!(newest_first.len(), 4, "{paged}");
    assert_eq!(newest_first[0]["event"], "EVENT_TYPE_TRANSFERRED");

    let text = tenure
        .run_args(&["history", "cli/seats", "--events", "transferred"])
        .await;
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", text.stdout);
    for part in [
        "transferred".to_string(),
        format!("holder a  token {a_token}  ACTIVE→TRANSFERRED"),
        "by anonymous".to_string(),
        format!("→ d (token {d_token})"),
    ] {
        assert!(lines[0].contains(&part), "no {part:?} in {}", lines[0]);
    }

    let (code, held) = tenure.json_args(&["leases", "--holder", "d"]).await;
    assert_eq!(code, Some(0), "{held}");
    let leases = held["leases"].as_array().expect("leases");
    assert_eq!(leases.len(), 1, "{held}");
    assert_eq!(leases[0]["resource"], "cli/seats");
    assert_eq!(leases[0]["fencing_token"], d_token);
    let (code, none) = tenure.json_args(&["leases", "--holder", "a"]).await;
    assert_eq!(code, Some(0), "{none}");
    assert_eq!(none["leases"], serde_json::json!([]));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_exits_2_with_its_reason() {
    let (cluster, tenure) = start().await;
    let bad_name = tenure
        .run_args(&["acquire", "no spaces!", "--holder", "h"])
        .await;
    assert_eq!(bad_name.code, Some(2));
    assert!(
        bad_name.stderr.starts_with("error: invalid_argument"),
        "{}",
        bad_name.stderr
    );
    let (code, bad_page) = tenure
        .json_args(&["history", "cli/x", "--page-size", "5000"])
        .await;
    assert_eq!(code, Some(2));
    assert_eq!(bad_page["ok"], false);
    assert_eq!(bad_page["reason"], "invalid_argument", "{bad_page}");

    // An ad-hoc resource is not transferable, and a renew needs the current token.
    let (code, granted) = tenure
        .json_args(&["acquire", "cli/adhoc", "--holder", "h", "--ttl", "30s"])
        .await;
    assert_eq!(code, Some(0), "{granted}");
    let token = token_of(&granted).to_string();
    let (code, refused) = tenure
        .json_args(&[
            "transfer",
            "cli/adhoc",
            "--holder",
            "h",
            "--token",
            &token,
            "--to-holder",
            "k",
        ])
        .await;
    assert_eq!(
        (code, &refused["reason"]),
        (Some(2), &"not_transferable".into()),
        "{refused}"
    );
    let stale = tenure
        .run_args(&["renew", "cli/adhoc", "--holder", "h", "--token", "1"])
        .await;
    assert_eq!(stale.code, Some(2));
    assert!(
        stale.stderr.contains("stale_fencing_token"),
        "{}",
        stale.stderr
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_lists_the_members_and_names_an_endpoint_that_does_not_answer() {
    let (cluster, leader) = started(3).await;
    let tenure = Cli::of(cluster.addrs.values());
    let (code, rows) = tenure.json_args(&["cluster", "status"]).await;
    assert_eq!(code, Some(0), "{rows}");
    let rows = rows.as_array().expect("one row per endpoint");
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in rows {
        let members = row["members"].as_array().expect("members");
        assert_eq!(members.len(), 3, "{row}");
        let from_leader = row["id"] == leader;
        for member in members {
            // Only the leader tracks replication: a follower shows no zeros that look like
            // a fault.
            assert_eq!(member.get("matched_index").is_some(), from_leader, "{row}");
            assert_eq!(member["healthy"].is_boolean(), from_leader, "{row}");
        }
    }
    let text = tenure.run_args(&["cluster", "status"]).await;
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert_eq!(
        text.stdout.matches("\n    member ").count(),
        9,
        "{}",
        text.stdout
    );

    // An endpoint where nothing listens is named as unreachable, the others still answer.
    let with_a_dead_one = Cli::of(
        cluster
            .addrs
            .values()
            .map(String::as_str)
            .chain(["127.0.0.1:1"]),
    );
    let (code, rows) = with_a_dead_one
        .json_args(&["--timeout", "2s", "cluster", "status"])
        .await;
    assert_eq!(code, Some(0), "{rows}");
    let dead = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["endpoint"] == "127.0.0.1:1"))
        .unwrap_or_else(|| panic!("a row for the dead endpoint: {rows}"));
    assert_eq!(dead["reachable"], false, "{dead}");
    let text = with_a_dead_one
        .run_args(&["--timeout", "2s", "cluster", "status"])
        .await;
    assert!(
        text.stdout.contains("127.0.0.1:1  unreachable"),
        "{}",
        text.stdout
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_create_acquire_keepalive_get_list_and_close() {
    let (cluster, tenure) = start().await;
    let (code, created) = tenure
        .json_args(&[
            "session",
            "create",
            "--holder",
            "cli-w",
            "--ttl",
            "30s",
            "--metadata",
            "pod=p-1",
        ])
        .await;
    assert_eq!(code, Some(0), "{created}");
    let id = created["session"]["session_id"]
        .as_str()
        .expect("an id")
        .to_string();
    assert!(id.starts_with("ses_"), "{created}");
    assert_eq!(created["session"]["status"], "SESSION_STATUS_ACTIVE");
    assert_eq!(created["session"]["metadata"]["pod"], "p-1");
    for resource in ["cli/shard/1", "cli/shard/2"] {
        let (code, acquired) = tenure
            .json_args(&["acquire", resource, "--holder", "cli-w", "--session", &id])
            .await;
        assert_eq!(code, Some(0), "{acquired}");
        assert_eq!(acquired["lease"]["session_id"], id.as_str());
    }
    // A lease on a session takes no ttl of its own.
    let refused = tenure
        .run_args(&[
            "acquire",
            "cli/shard/3",
            "--holder",
            "cli-w",
            "--session",
            &id,
            "--ttl",
            "5s",
        ])
        .await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    let (code, renewed) = tenure
        .json_args(&["session", "keepalive", &id, "--once"])
        .await;
    assert_eq!(code, Some(0), "{renewed}");
    assert_eq!(renewed["session"]["lease_count"], 2);
    let (code, got) = tenure.json_args(&["session", "get", &id]).await;
    assert_eq!(code, Some(0), "{got}");
    assert_eq!(got["session"]["leases"].as_array().map(Vec::len), Some(2));
    let text = tenure.run_args(&["session", "get", &id]).await;
    assert!(
        text.stdout.contains(&format!("session {id}")),
        "{}",
        text.stdout
    );
    let (code, listed) = tenure
        .json_args(&["session", "list", "--holder", "cli-w"])
        .await;
    assert_eq!(code, Some(0), "{listed}");
    assert_eq!(listed["sessions"][0]["session_id"], id.as_str());
    let (code, closed) = tenure.json_args(&["session", "close", &id]).await;
    assert_eq!(code, Some(0), "{closed}");
    assert_eq!(closed["session"]["status"], "SESSION_STATUS_CLOSED");
    let (code, gone) = tenure.json_args(&["session", "get", &id]).await;
    assert_eq!(code, Some(2), "{gone}");
    assert_eq!(gone["reason"], "session_not_found");
    // A keepalive of a session that is gone says so and exits 1.
    let lost = tenure.run_args(&["session", "keepalive", &id]).await;
    assert_eq!(lost.code, Some(1), "{}", lost.stderr);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_grants_all_with_one_token_or_explains_each_refusal() {
    let (cluster, tenure) = start().await;
    let (code, both) = tenure
        .json_args(&[
            "acquire-many",
            "cli/acct/a",
            "cli/acct/b",
            "--holder",
            "mover",
            "--ttl",
            "30s",
        ])
        .await;
    assert_eq!(code, Some(0), "{both}");
    let leases = both["leases"].as_array().expect("leases");
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[0]["resource"], "cli/acct/a");
    assert_eq!(leases[0]["fencing_token"], leases[1]["fencing_token"]);
    // b is held: nothing of c and b is granted, and the answer says why, resource by resource.
    let refused = tenure
        .run_args(&[
            "acquire-many",
            "cli/acct/c",
            "cli/acct/b",
            "--holder",
            "other",
        ])
        .await;
    assert_eq!(refused.code, Some(1));
    assert!(
        refused
            .stdout
            .starts_with("not granted: resource_unavailable"),
        "{}",
        refused.stdout
    );
    assert!(
        refused.stdout.contains("cli/acct/c: would fit"),
        "{}",
        refused.stdout
    );
    assert!(
        refused.stdout.contains("cli/acct/b: resource_unavailable"),
        "{}",
        refused.stdout
    );
    let (code, c) = tenure.json_args(&["status", "cli/acct/c"]).await;
    assert_eq!(code, Some(0), "{c}");
    assert_eq!(c["leases"], serde_json::json!([]), "{c}");
    assert_eq!(c["revision"], 0, "nothing ever happened to c: {c}");
    cluster.shutdown().await;
}
