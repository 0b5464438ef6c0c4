//! The report's tests: a small hand-built run with a stale read, and a long busy one.

use super::chart::ANOMALY_RED;
use super::scatter::MAX_POINTS;
use super::*;
use crate::checker::{Anomaly, QuotaStats, WaitStats, WatchStats};
use crate::history::{NemesisEvent, Op, Outcome, QuotaSettings, Value};

mod shared;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000_000_000_000;

struct Builder {
    ops: Vec<Op>,
}

impl Builder {
    fn op(&mut self, process: u64, call: Call, at_ms: u64, took_ms: u64, outcome: Outcome) -> u64 {
        let id = self.ops.len() as u64;
        self.ops.push(Op {
            id,
            process,
            call,
            invoke_ns: T0 + at_ms * MS,
            complete_ns: T0 + (at_ms + took_ms) * MS,
            outcome,
        });
        id
    }
}

fn ok(value: Value) -> Outcome {
    Outcome::Ok { value }
}

fn acquire(r: &str, h: &str) -> Call {
    Call::Acquire {
        resource: r.into(),
        holder: h.into(),
        ttl_ms: 3000,
        mode: crate::history::Mode::Exclusive,
        units: 0,
        wait_ms: 0,
        many: 0,
        session_id: String::new(),
        session_alive_ns: 0,
    }
}

fn renew(r: &str, h: &str, token: u64) -> Call {
    Call::Renew {
        resource: r.into(),
        holder: h.into(),
        lease_id: format!("lse_{token}"),
        token,
        ttl_ms: 3000,
        sets_metadata: false,
    }
}

fn release(r: &str, h: &str, token: u64) -> Call {
    Call::Release {
        resource: r.into(),
        holder: h.into(),
        lease_id: format!("lse_{token}"),
        token,
    }
}

fn write(r: &str, h: &str, token: u64) -> Call {
    Call::Write {
        resource: r.into(),
        holder: h.into(),
        token,
        shared: false,
        register: false,
    }
}

fn granted(token: u64) -> Outcome {
    ok(Value::Granted {
        token,
        lease_id: format!("lse_{token}"),
    })
}

/// Two resources, three holders, a partition and a kill, a stale read on `beta`.
fn sample() -> (History, CheckReport, u64) {
    let mut b = Builder { ops: Vec::new() };
    // alpha: p1 holds token 1 and releases it; p2 then holds token 2 until the end.
    b.op(1, acquire("alpha", "h1"), 100, 5, granted(1));
    b.op(
        2,
        acquire("alpha", "h2"),
        150,
        4,
        ok(Value::Refused {
            reason: "held".into(),
            holder: Some("h1".into()),
            token: Some(1),
            holders: vec![],
        }),
    );
    b.op(1, write("alpha", "h1", 1), 500, 0, ok(Value::StoreAccepted));
    b.op(
        1,
        renew("alpha", "h1", 1),
        1000,
        6,
        ok(Value::Renewed { token: 1 }),
    );
    b.op(
        1,
        release("alpha", "h1", 1),
        2000,
        5,
        ok(Value::Released { token: 1 }),
    );
    b.op(2, acquire("alpha", "h2"), 2100, 10, granted(2));
    b.op(2, acquire("alpha", "h2"), 2200, 3, granted(2)); // idempotent repeat: not a new grant
    b.op(
        2,
        write("alpha", "h2", 2),
        2300,
        0,
        ok(Value::StoreAccepted),
    );
    b.op(
        1,
        write("alpha", "h1", 1),
        2400,
        0,
        ok(Value::StoreRejected { highest: 2 }),
    );
    b.op(
        2,
        Call::Validate {
            resource: "alpha".into(),
            token: 1,
        },
        2500,
        2,
        ok(Value::Validated {
            valid: false,
            reason: "superseded".into(),
        }),
    );
    b.op(
        2,
        renew("alpha", "h2", 2),
        3000,
        7,
        ok(Value::Renewed { token: 2 }),
    );
    // beta: p3 holds token 1, loses it to expiry during the partition, p1 gets token 2.
    b.op(3, acquire("beta", "h3"), 200, 8, granted(1));
    b.op(
        3,
        renew("beta", "h3", 1),
        1200,
        1500,
        Outcome::Unknown {
            error: "deadline exceeded".into(),
        },
    );
    b.op(3, write("beta", "h3", 1), 1250, 0, ok(Value::StoreAccepted));
    b.op(1, acquire("beta", "h1"), 3300, 12, granted(2));
    b.op(1, write("beta", "h1", 2), 3400, 0, ok(Value::StoreAccepted));
    let stale = b.op(
        2,
        Call::Read {
            resource: "beta".into(),
            node: 2,
        },
        4400,
        9,
        ok(Value::Read {
            holder: Some("h3".into()),
            token: Some(1),
            leases: vec![],
            revision: 0,
        }),
    );
    b.op(
        3,
        release("beta", "h3", 1),
        4500,
        3,
        Outcome::Fail {
            reason: "not held".into(),
        },
    );
    b.op(
        3,
        acquire("beta", "h3"),
        4600,
        2000,
        Outcome::Unknown {
            error: "unavailable".into(),
        },
    );
    b.op(
        1,
        Call::Read {
            resource: "alpha".into(),
            node: 1,
        },
        4700,
        2,
        ok(Value::Read {
            holder: Some("h2".into()),
            token: Some(2),
            leases: vec![],
            revision: 0,
        }),
    );
    let history = History {
        seed: 42,
        nodes: 3,
        nemeses: vec!["partition".into(), "kill".into(), "clock".into()],
        clock_epsilon: 0.01,
        started_ns: T0,
        ops: b.ops,
        nemesis: vec![
            NemesisEvent {
                kind: "partition".into(),
                detail: "n1 | n2 n3".into(),
                start_ns: T0 + 1100 * MS,
                end_ns: Some(T0 + 1900 * MS),
                power: None,
            },
            NemesisEvent {
                kind: "kill".into(),
                detail: "n2".into(),
                start_ns: T0 + 3500 * MS,
                end_ns: Some(T0 + 3900 * MS),
                power: None,
            },
            NemesisEvent {
                kind: "clock".into(),
                detail: "n3 +200ms".into(),
                start_ns: T0 + 4100 * MS,
                end_ns: None,
                power: None,
            },
        ],
        leaders: vec![
            (T0 + 50 * MS, 1, 1),
            (T0 + 1300 * MS, 2, 2),
            (T0 + 1350 * MS, 2, 2),
            (T0 + 3700 * MS, 3, 3),
        ],
        resources: Default::default(),
        ..History::default()
    };
    let check = CheckReport {
        anomalies: vec![Anomaly {
            kind: "nonlinearizable".into(),
            resource: "beta".into(),
            message: "read saw h3 token 1 after token 2 was granted".into(),
            ops: vec![stale],
        }],
        resources_checked: 2,
        ops_checked: history.ops.len(),
        grants: 4,
        linearizable: false,
        search_exhausted: Vec::new(),
        waits: Default::default(),
        many: Default::default(),
        sessions: Default::default(),
        watch: Default::default(),
        quota: Default::default(),
        register: Default::default(),
    };
    (history, check, stale)
}

#[test]
fn the_summary_counts_what_happened() {
    let (history, check, _) = sample();
    let s = summarize(&history, &check);
    assert_eq!(s.ops, 20);
    assert_eq!((s.ok, s.fail, s.unknown), (17, 1, 2));
    assert_eq!(
        (
            s.calls.acquire.ok,
            s.calls.acquire.fail,
            s.calls.acquire.unknown
        ),
        (6, 0, 1)
    );
    assert_eq!((s.calls.renew.ok, s.calls.renew.unknown), (2, 1));
    assert_eq!((s.calls.release.ok, s.calls.release.fail), (1, 1));
    assert_eq!(
        (s.calls.validate.ok, s.calls.read.ok, s.calls.write.ok),
        (1, 2, 5)
    );
    // alpha#1, alpha#2 (the repeat is not new), beta#1, beta#2.
    assert_eq!(s.grants, 4);
    // Only alpha#1 was released.
    assert_eq!(s.tenures_ended_by_expiry, 3);
    // (1,1), (2,2), (3,3): two changes.
    assert_eq!(s.leader_changes, 2);
    assert_eq!(s.nemesis_events.get("partition"), Some(&1));
    assert_eq!(s.nemesis_events.get("clock"), Some(&1));
    assert_eq!(s.anomalies.get("nonlinearizable"), Some(&1));
    assert!((s.duration_s - 6.6).abs() < 1e-9, "{}", s.duration_s);
    assert!((s.throughput_ops_per_s - 20.0 / 6.6).abs() < 1e-9);
    let acquire = s.calls.acquire.latency.as_ref().expect("acquire latency");
    assert_eq!(acquire.count, 6);
    assert!((acquire.max_ms - 12.0).abs() < 0.05, "{acquire:?}");
    assert!(s.calls.write.latency.is_some());
    assert!(!s.pass);
    assert!(
        s.verdict.starts_with("FAIL: 1 anomaly (nonlinearizable)"),
        "{}",
        s.verdict
    );
}

#[test]
fn waits_and_watches_are_summarized_when_the_run_had_them() {
    let (history, check, _) = sample();
    let quiet = text(&summarize(&history, &check), &check);
    assert!(!quiet.contains("waits"), "{quiet}");
    let check = CheckReport {
        waits: WaitStats {
            waits: 7,
            granted_at_once: 1,
            admitted: 3,
            timed_out: 2,
            cancelled: 1,
            ..Default::default()
        },
        watch: WatchStats {
            watchers: 3,
            sessions: 9,
            events_delivered: 120,
            events_checked: 110,
            ..Default::default()
        },
        ..check
    };
    let s = summarize(&history, &check);
    assert_eq!((s.waits.admitted, s.watch.events_checked), (3, 110));
    let t = text(&s, &check);
    assert!(
        t.contains("waits 7: granted at once 1, admitted 3, timed out 2, cancelled 1, unknown 0"),
        "{t}"
    );
    assert!(
        t.contains("3 watchers, 9 sessions (0 compacted), 120 events sent, 110 checked"),
        "{t}"
    );
    assert!(html(&history, &check, &s).contains("Waits and watches"));
}

#[test]
fn the_quotas_and_the_refusals_for_them_are_summarized_when_the_run_had_them() {
    let (mut history, check, _) = sample();
    let quiet = text(&summarize(&history, &check), &check);
    assert!(!quiet.contains("quota"), "{quiet}");
    history.quotas = Some(QuotaSettings {
        principal: "jepsen-client".into(),
        limits: [("leases".to_string(), 12), ("waiters".to_string(), 3)]
            .into_iter()
            .collect(),
    });
    let refused = history
        .ops
        .iter_mut()
        .find(|op| matches!(op.call, Call::Acquire { .. }))
        .expect("an acquire");
    refused.outcome = Outcome::QuotaExceeded {
        quota: "leases".into(),
        limit: 12,
    };
    let check = CheckReport {
        quota: QuotaStats {
            refusals: [("leases".to_string(), 1)].into_iter().collect(),
            checked: 1,
        },
        ..check
    };
    let s = summarize(&history, &check);
    assert_eq!((s.quota_exceeded, s.calls.acquire.quota_exceeded), (1, 1));
    let t = text(&s, &check);
    assert!(
        t.contains("quotas of jepsen-client: leases 12, waiters 3 | refused for a quota: leases x1 (1 checked"),
        "{t}"
    );
    assert!(t.contains(", quota 1, unknown"), "{t}");
    assert!(html(&history, &check, &s).contains("jepsen-client: leases 12, waiters 3"));
}

#[test]
fn the_text_ends_with_the_verdict_and_lists_anomalies() {
    let (history, check, stale) = sample();
    let s = summarize(&history, &check);
    let t = text(&s, &check);
    assert!(t.contains("grants 4"), "{t}");
    assert!(t.contains(&format!("ANOMALY nonlinearizable [beta]: read saw h3 token 1 after token 2 was granted (ops {stale})")), "{t}");
    assert!(
        t.trim_end().ends_with("FAIL: 1 anomaly (nonlinearizable)"),
        "{t}"
    );

    let passing = CheckReport {
        anomalies: Vec::new(),
        linearizable: true,
        ..check
    };
    let s = summarize(&history, &passing);
    assert!(passing.ok());
    assert!(text(&s, &passing).trim_end().ends_with("PASS"));

    let (_, check, _) = sample();
    let undecided = CheckReport {
        anomalies: Vec::new(),
        linearizable: false,
        search_exhausted: vec!["beta".into()],
        ..check
    };
    let s = summarize(&history, &undecided);
    let t = text(&s, &undecided);
    assert!(t.contains("linearizable: undecided"), "{t}");
    assert!(
        t.trim_end()
            .ends_with("FAIL: undecided, search exhausted on beta"),
        "{t}"
    );
}

#[test]
fn the_page_draws_every_resource_the_faults_and_the_anomaly() {
    let (history, check, stale) = sample();
    let s = summarize(&history, &check);
    let page = html(&history, &check, &s);
    assert!(!page.contains("<script"), "no scripts");
    assert!(!page.contains("src="), "no external resources");
    // One timeline per resource, the one with the anomaly first.
    assert_eq!(page.matches("<svg class=\"timeline\"").count(), 2);
    let beta = page.find("data-resource=\"beta\"").expect("beta timeline");
    let alpha = page
        .find("data-resource=\"alpha\"")
        .expect("alpha timeline");
    assert!(beta < alpha, "resources with anomalies come first");
    // The latency scatter.
    assert_eq!(page.matches("<svg class=\"latency\"").count(), 1);
    // Tenure bars: alpha#1, alpha#2, beta#1, beta#2, labelled by token.
    assert_eq!(page.matches("<rect class=\"tenure\"").count(), 4);
    assert!(page.contains(">#2</text>"));
    // Writes: one rejected (orange) tick.
    assert_eq!(page.matches("<line class=\"write\"").count(), 5);
    assert_eq!(
        page.matches("stroke=\"#fd7e14\" stroke-width=\"2.5\"><title>")
            .count(),
        1
    );
    // The anomaly: a red marker whose tooltip names the op, on the timeline and the scatter.
    let marker = format!(
        "<g class=\"anomaly\" data-op=\"{stale}\"><title>op {stale} (p2): read(node 2) on beta"
    );
    assert_eq!(
        page.matches(&marker).count(),
        2,
        "timeline + scatter markers"
    );
    assert!(page.contains(&format!("fill=\"{ANOMALY_RED}\" fill-opacity=\"0.35\"")));
    // Nemesis bands, labelled, in the 2 timelines and the scatter.
    assert_eq!(page.matches("<rect class=\"band\"").count(), 2 * 3);
    assert_eq!(page.matches("<line class=\"band\"").count(), 3);
    assert_eq!(page.matches(">partition<title>").count(), 3);
    assert_eq!(page.matches(">kill<title>").count(), 3);
    // Leader elections: 3 distinct per chart.
    assert_eq!(page.matches("<line class=\"leader\"").count(), 3 * 3);
    // Verdict in red, the summary table.
    assert!(page.contains("<div class=\"verdict fail\">FAIL: 1 anomaly (nonlinearizable)</div>"));
    assert!(page.contains("<tr><th>seed</th><td>42</td></tr>"));
    assert!(page.contains("<tr><th>grants</th><td class=n>4</td></tr>"));
}

#[test]
fn write_all_writes_the_summary_and_the_page() {
    let (history, check, _) = sample();
    let dir = tempfile::tempdir().expect("dir");
    let s = write_all(dir.path(), &history, &check).expect("write");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("summary.json")).expect("json"),
    )
    .expect("parse");
    assert_eq!(json["grants"], 4);
    assert_eq!(json["calls"]["acquire"]["ok"], 6);
    assert_eq!(json["pass"], false);
    assert_eq!(s.grants, 4);
    let page = std::fs::read_to_string(dir.path().join("report.html")).expect("html");
    assert!(page.starts_with("<!DOCTYPE html>"));
    if std::env::var("JEPSEN_SAMPLE_REPORT").as_deref() == Ok("1") {
        let out = Path::new("/tmp/jepsen-sample");
        write_all(out, &history, &check).expect("sample");
    }
}

/// A long, busy run: thousands of tenures and more ops than the scatter draws.
#[test]
fn a_long_run_stays_a_sane_size() {
    let mut b = Builder { ops: Vec::new() };
    let mut token = [0u64; 3];
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..12_000u64 {
        let r = (i % 3) as usize;
        let resource = ["a", "b", "c"][r];
        let p = 1 + next() % 5;
        let h = format!("h{p}");
        let at = i * 10;
        token[r] += 1;
        b.op(
            p,
            acquire(resource, &h),
            at,
            1 + next() % 20,
            granted(token[r]),
        );
        b.op(
            p,
            write(resource, &h, token[r]),
            at + 2,
            0,
            ok(Value::StoreAccepted),
        );
        b.op(
            p,
            release(resource, &h, token[r]),
            at + 5,
            1 + next() % 5,
            ok(Value::Released { token: token[r] }),
        );
    }
    let history = History {
        seed: 1,
        nodes: 5,
        started_ns: T0,
        ops: b.ops,
        ..History::default()
    };
    let check = CheckReport {
        anomalies: Vec::new(),
        resources_checked: 3,
        ops_checked: history.ops.len(),
        grants: 12_000,
        linearizable: true,
        search_exhausted: Vec::new(),
        waits: Default::default(),
        many: Default::default(),
        sessions: Default::default(),
        watch: Default::default(),
        quota: Default::default(),
        register: Default::default(),
    };
    let s = summarize(&history, &check);
    assert_eq!(s.grants, 12_000);
    assert_eq!(s.tenures_ended_by_expiry, 0);
    let page = html(&history, &check, &s);
    assert_eq!(page.matches("<rect class=\"tenure\"").count(), 12_000);
    let points = page.matches("<circle class=\"k-").count();
    assert!((MAX_POINTS / 2..=MAX_POINTS).contains(&points), "{points}");
    assert!(page.len() < 12 * 1024 * 1024, "{}", page.len());
    if std::env::var("JEPSEN_SAMPLE_REPORT").as_deref() == Ok("1") {
        write_all(Path::new("/tmp/jepsen-sample/long"), &history, &check).expect("sample");
    }
}
