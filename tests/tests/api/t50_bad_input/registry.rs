//! `CreateResource` and `Transfer`: every field, each wrong in one way only. Two rows pass
//! validation and are refused at apply (a taken name; the held ad-hoc lease is not
//! transferable), so they also go through a follower's forwarding to the leader.

use tenure_client::pb;
use tonic::Code;

use super::row::{
    bad_ids, bad_labels, bad_names, bad_nonempty_names, long, ttl, Base, Row, DAY_SECONDS, HELD,
};

pub fn rows(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.extend(names_and_labels());
    rows.extend(durations());
    rows.extend(modes_limits_and_fsm());
    rows.extend(transfers(base));
    // Valid requests the state machine refuses, changing nothing.
    rows.push(
        Row::invalid(
            "create_resource: the name of a held ad-hoc resource",
            pb::CreateResourceRequest {
                name: HELD.into(),
                ..Default::default()
            },
        )
        .gets(Code::AlreadyExists, "already_exists"),
    );
    rows.push(
        Row::invalid(
            "transfer: an ad-hoc lease (not transferable)",
            base.transfer(),
        )
        .gets(Code::FailedPrecondition, "not_transferable"),
    );
    rows
}

/// A registration of `t50/registered` with `policy`.
fn create(policy: pb::Policy) -> pb::CreateResourceRequest {
    pb::CreateResourceRequest {
        name: "t50/registered".into(),
        policy: Some(policy),
        ..Default::default()
    }
}

fn names_and_labels() -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, name) in bad_nonempty_names() {
        rows.push(Row::invalid(
            format!("create_resource: name with {what}"),
            pb::CreateResourceRequest {
                name,
                ..create(pb::Policy::default())
            },
        ));
    }
    for (what, label) in bad_labels() {
        rows.push(Row::invalid(
            format!("create_resource: kind with {what}"),
            pb::CreateResourceRequest {
                kind: label.clone(),
                ..create(pb::Policy::default())
            },
        ));
        rows.push(Row::invalid(
            format!("create_resource: display_name with {what}"),
            pb::CreateResourceRequest {
                display_name: label.clone(),
                ..create(pb::Policy::default())
            },
        ));
        rows.push(Row::invalid(
            format!("create_resource: policy.kind with {what}"),
            create(pb::Policy {
                kind: label.clone(),
                ..Default::default()
            }),
        ));
        rows.push(Row::invalid(
            format!("create_resource: policy.display_name with {what}"),
            create(pb::Policy {
                display_name: label,
                ..Default::default()
            }),
        ));
    }
    rows
}

/// Durations: malformed, negative, below the minimum, past the 90-day ceiling, or incoherent
/// with the other fields.
fn durations() -> Vec<Row> {
    type Set = fn(&mut pb::Policy, Option<prost_types::Duration>);
    let fields: [(&str, Set); 5] = [
        ("default_ttl", |p, d| p.default_ttl = d),
        ("max_ttl", |p, d| p.max_ttl = d),
        ("max_lifetime", |p, d| p.max_lifetime = d),
        ("renewal_grace", |p, d| p.renewal_grace = d),
        ("lock_delay", |p, d| p.lock_delay = d),
    ];
    let malformed = [
        ("-1 s", ttl(-1, 0)),
        ("-1 ns", ttl(0, -1)),
        ("nanos = 1e9", ttl(1, 1_000_000_000)),
        ("i64::MIN s", ttl(i64::MIN, 0)),
        ("90 days + 1 s", ttl(90 * DAY_SECONDS + 1, 0)),
        ("i64::MAX s", ttl(i64::MAX, 999_999_999)),
    ];
    let mut rows = Vec::new();
    for (field, set) in fields {
        for (what, value) in &malformed {
            let mut policy = pb::Policy::default();
            set(&mut policy, *value);
            rows.push(Row::invalid(
                format!("create_resource: policy.{field} {what}"),
                create(policy),
            ));
        }
    }
    let incoherent = [
        (
            "default_ttl 0",
            pb::Policy {
                default_ttl: ttl(0, 0),
                ..Default::default()
            },
        ),
        (
            "default_ttl 999 ms",
            pb::Policy {
                default_ttl: ttl(0, 999_000_000),
                ..Default::default()
            },
        ),
        (
            "max_ttl 0",
            pb::Policy {
                max_ttl: ttl(0, 0),
                ..Default::default()
            },
        ),
        (
            "max_lifetime 500 ms",
            pb::Policy {
                max_lifetime: ttl(0, 500_000_000),
                ..Default::default()
            },
        ),
        (
            "default_ttl 2 h above max_ttl 1 h",
            pb::Policy {
                default_ttl: ttl(7_200, 0),
                max_ttl: ttl(3_600, 0),
                ..Default::default()
            },
        ),
        (
            "default_ttl 20 min above max_lifetime 10 min",
            pb::Policy {
                default_ttl: ttl(1_200, 0),
                max_lifetime: ttl(600, 0),
                ..Default::default()
            },
        ),
    ];
    for (what, policy) in incoherent {
        rows.push(Row::invalid(
            format!("create_resource: policy with {what}"),
            create(policy),
        ));
    }
    rows
}

/// Modes, limits, FSM requirements, request ids.
fn modes_limits_and_fsm() -> Vec<Row> {
    let mut rows = Vec::new();
    let modes: [(&str, Vec<i32>); 6] = [
        ("EXCLUSIVE", vec![pb::LeaseMode::Exclusive as i32]),
        (
            "UNSPECIFIED (= exclusive)",
            vec![pb::LeaseMode::Unspecified as i32],
        ),
        ("unknown 99", vec![99]),
        ("unknown -1", vec![-1]),
        ("READ and unknown 4", vec![pb::LeaseMode::Read as i32, 4]),
        (
            "WRITE and EXCLUSIVE",
            vec![pb::LeaseMode::Write as i32, pb::LeaseMode::Exclusive as i32],
        ),
    ];
    for (what, shared_modes) in modes {
        rows.push(Row::invalid(
            format!("create_resource: policy.shared_modes with {what}"),
            create(pb::Policy {
                shared_modes,
                ..Default::default()
            }),
        ));
    }
    for max_waiters in [1_000_001, u32::MAX] {
        rows.push(Row::invalid(
            format!("create_resource: policy.max_waiters {max_waiters}"),
            create(pb::Policy {
                max_waiters,
                ..Default::default()
            }),
        ));
    }
    for max_metadata_bytes in [16 * 1024 + 1, u32::MAX] {
        rows.push(Row::invalid(
            format!("create_resource: policy.max_metadata_bytes {max_metadata_bytes}"),
            create(pb::Policy {
                max_metadata_bytes,
                ..Default::default()
            }),
        ));
    }
    let pair = |machine: &str, transition: &str| pb::FsmRequirement {
        machine: machine.into(),
        transition: transition.into(),
    };
    let requirements = [
        ("an empty machine", vec![pair("", "ship")]),
        ("an empty transition", vec![pair("order", "")]),
        ("both empty", vec![pb::FsmRequirement::default()]),
        ("a control character", vec![pair("order\n", "ship")]),
        ("a machine of 257 bytes", vec![pair(&long(257), "ship")]),
        ("a transition of 257 bytes", vec![pair("order", &long(257))]),
        (
            "65 pairs",
            (0..65).map(|i| pair("order", &format!("t{i}"))).collect(),
        ),
    ];
    for (what, fsm_requirements) in requirements {
        rows.push(Row::invalid(
            format!("create_resource: policy.fsm_requirements with {what}"),
            create(pb::Policy {
                fsm_requirements,
                ..Default::default()
            }),
        ));
    }
    for (what, request_id) in bad_ids("id\u{7}") {
        rows.push(Row::invalid(
            format!("create_resource: request_id with {what}"),
            pb::CreateResourceRequest {
                request_id,
                ..create(pb::Policy::default())
            },
        ));
    }
    rows
}

/// Transfer of the held lease, everything else right.
fn transfers(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    for (what, name) in bad_names() {
        rows.push(Row::invalid(
            format!("transfer: resource with {what}"),
            pb::TransferRequest {
                resource: name.clone(),
                ..base.transfer()
            },
        ));
        rows.push(Row::invalid(
            format!("transfer: holder with {what}"),
            pb::TransferRequest {
                holder: name.clone(),
                ..base.transfer()
            },
        ));
        rows.push(Row::invalid(
            format!("transfer: to_holder with {what}"),
            pb::TransferRequest {
                to_holder: name,
                ..base.transfer()
            },
        ));
    }
    for (what, lease_id) in bad_ids("lse_\u{1b}") {
        rows.push(Row::invalid(
            format!("transfer: lease_id with {what}"),
            pb::TransferRequest {
                lease_id,
                ..base.transfer()
            },
        ));
    }
    rows.push(Row::invalid(
        "transfer: no fencing_token",
        pb::TransferRequest {
            fencing_token: 0,
            ..base.transfer()
        },
    ));
    for (what, to_principal) in bad_labels() {
        rows.push(Row::invalid(
            format!("transfer: to_principal with {what}"),
            pb::TransferRequest {
                to_principal,
                ..base.transfer()
            },
        ));
    }
    rows.push(Row::invalid(
        "transfer: request_id of 129 bytes",
        pb::TransferRequest {
            request_id: long(129),
            ..base.transfer()
        },
    ));
    rows.push(Row::invalid(
        "transfer: empty request",
        pb::TransferRequest::default(),
    ));
    rows
}
