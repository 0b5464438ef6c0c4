//! The history's own tests: a round trip through JSON lines, and the values' helpers.

use super::*;

#[test]
fn a_history_round_trips_through_json_lines() {
    let event = Event {
        revision: 5,
        seq: 1,
        resource: "r".into(),
        kind: EventKind::Admitted,
        holder: "h".into(),
        token: 5,
        to_holder: String::new(),
        to_token: 0,
        session: String::new(),
    };
    let history = History {
        seed: 7,
        nodes: 3,
        nemeses: vec!["partition".into()],
        clock_epsilon: 0.01,
        started_ns: 1,
        ops: vec![Op {
            id: 0,
            process: 1,
            call: Call::Acquire {
                resource: "r".into(),
                holder: "h".into(),
                ttl_ms: 3000,
                mode: Mode::Read,
                units: 2,
                wait_ms: 2500,
                many: 0,
                session_id: String::new(),
                session_alive_ns: 0,
            },
            invoke_ns: 10,
            complete_ns: 20,
            outcome: Outcome::Ok {
                value: Value::Granted {
                    token: 5,
                    lease_id: "lse_5_0".into(),
                },
            },
        }]
        .into_iter()
        .chain([
            Op {
                id: 1,
                process: 2,
                call: Call::Acquire {
                    resource: "r".into(),
                    holder: "g".into(),
                    ttl_ms: 3000,
                    mode: Mode::Exclusive,
                    units: 0,
                    wait_ms: 0,
                    many: 0,
                    session_id: String::new(),
                    session_alive_ns: 0,
                },
                invoke_ns: 11,
                complete_ns: 21,
                outcome: Outcome::QuotaExceeded {
                    quota: "leases".into(),
                    limit: 6,
                },
            },
            Op {
                id: 2,
                process: 2,
                call: Call::Read {
                    resource: "r".into(),
                    node: 1,
                },
                invoke_ns: 22,
                complete_ns: 23,
                outcome: Outcome::Ok {
                    value: Value::read_at(vec![], 9),
                },
            },
        ])
        .collect(),
        nemesis: vec![NemesisEvent {
            kind: "kill".into(),
            detail: "n1".into(),
            start_ns: 15,
            end_ns: Some(30),
            power: None,
        }],
        leaders: vec![(12, 1, 2)],
        resources: [(
            "r".to_string(),
            ResourcePolicy {
                shared_modes: vec![Mode::Read, Mode::Write],
                total_units: 4,
                renewal_grace_ms: 500,
                ..ResourcePolicy::default()
            },
        )]
        .into_iter()
        .collect(),
        quotas: Some(QuotaSettings {
            principal: "jepsen-client".into(),
            limits: [("leases".to_string(), 6), ("waiters".to_string(), 2)]
                .into_iter()
                .collect(),
        }),
        events: [("r".to_string(), vec![event.clone()])]
            .into_iter()
            .collect(),
        unread: [("q".to_string(), "deadline exceeded".to_string())]
            .into_iter()
            .collect(),
        watches: vec![WatchSession {
            watcher: 1,
            scope: WatchScope::Prefix(String::new()),
            node: 2,
            start_revision: 4,
            opened_ns: 11,
            closed_ns: 19,
            messages: vec![WatchMessage {
                at_ns: 12,
                revision: 5,
                events: vec![event],
            }],
            end: SessionEnd::Compacted { oldest_revision: 9 },
        }],
        register: vec![RegisterWrite {
            resource: "f0".into(),
            version: 1,
            token: 7,
            holder: "c2".into(),
            op: 3,
        }],
    };
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.jsonl");
    history.write_jsonl(&path).expect("write");
    assert_eq!(History::read_jsonl(&path).expect("read"), history);
}
