//! `ListResources`, `ListLeases`, `History`, and `Validate`'s FSM pair: names, pages, orders,
//! event kinds, consistencies.

use tenure_client::pb;

use super::row::{bad_names, bad_nonempty_names, long, Base, Row, HELD, HOLDER};

const BAD_PAGE_SIZES: [u32; 2] = [1_001, u32::MAX];
const BAD_CONSISTENCY: [i32; 2] = [99, -1];

pub fn rows(base: &Base) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.extend(list_resources());
    rows.extend(list_leases());
    rows.extend(history());
    rows.extend(validate_fsm(base));
    rows
}

fn list_resources() -> Vec<Row> {
    let resources = pb::ListResourcesRequest::default;
    let mut rows = Vec::new();
    for (what, prefix) in bad_nonempty_names() {
        rows.push(Row::invalid(
            format!("list_resources: prefix with {what}"),
            pb::ListResourcesRequest {
                prefix,
                ..resources()
            },
        ));
    }
    for page_size in BAD_PAGE_SIZES {
        rows.push(Row::invalid(
            format!("list_resources: page_size {page_size}"),
            pb::ListResourcesRequest {
                page_size,
                ..resources()
            },
        ));
    }
    for page_token in ["has space", "t50|held", "\u{7}"]
        .map(String::from)
        .into_iter()
        .chain([long(129)])
    {
        rows.push(Row::invalid(
            format!("list_resources: page_token {:.20?}", page_token),
            pb::ListResourcesRequest {
                page_token,
                ..resources()
            },
        ));
    }
    for consistency in BAD_CONSISTENCY {
        rows.push(Row::invalid(
            format!("list_resources: consistency = {consistency}"),
            pb::ListResourcesRequest {
                consistency,
                ..resources()
            },
        ));
    }
    rows
}

fn list_leases() -> Vec<Row> {
    let leases = || pb::ListLeasesRequest {
        holder: HOLDER.into(),
        ..Default::default()
    };
    let mut rows = vec![Row::invalid(
        "list_leases: neither holder nor principal",
        pb::ListLeasesRequest::default(),
    )];
    for (what, holder) in bad_nonempty_names() {
        rows.push(Row::invalid(
            format!("list_leases: holder with {what}"),
            pb::ListLeasesRequest { holder, ..leases() },
        ));
    }
    for (what, principal) in [
        ("a control character", "p\u{7}".to_string()),
        ("257 bytes", long(257)),
    ] {
        rows.push(Row::invalid(
            format!("list_leases: principal with {what}"),
            pb::ListLeasesRequest {
                holder: String::new(),
                principal,
                ..leases()
            },
        ));
    }
    for page_size in BAD_PAGE_SIZES {
        rows.push(Row::invalid(
            format!("list_leases: page_size {page_size}"),
            pb::ListLeasesRequest {
                page_size,
                ..leases()
            },
        ));
    }
    for page_token in ["nopipe", "a b|c", "t50/held|", "|lse_1_0", "a|b|c"] {
        rows.push(Row::invalid(
            format!("list_leases: page_token {page_token:?}"),
            pb::ListLeasesRequest {
                page_token: page_token.into(),
                ..leases()
            },
        ));
    }
    for consistency in BAD_CONSISTENCY {
        rows.push(Row::invalid(
            format!("list_leases: consistency = {consistency}"),
            pb::ListLeasesRequest {
                consistency,
                ..leases()
            },
        ));
    }
    rows
}

fn history() -> Vec<Row> {
    let history = || pb::HistoryRequest {
        resource: HELD.into(),
        ..Default::default()
    };
    let mut rows = Vec::new();
    for (what, resource) in bad_names() {
        rows.push(Row::invalid(
            format!("history: resource with {what}"),
            pb::HistoryRequest {
                resource,
                ..history()
            },
        ));
    }
    for page_size in BAD_PAGE_SIZES {
        rows.push(Row::invalid(
            format!("history: page_size {page_size}"),
            pb::HistoryRequest {
                page_size,
                ..history()
            },
        ));
    }
    for order in [3, 99, -1] {
        rows.push(Row::invalid(
            format!("history: order = {order}"),
            pb::HistoryRequest { order, ..history() },
        ));
    }
    for events in [
        vec![0],
        vec![99],
        vec![-1],
        vec![pb::EventType::Acquired as i32, 13],
    ] {
        rows.push(Row::invalid(
            format!("history: events {events:?}"),
            pb::HistoryRequest {
                events,
                ..history()
            },
        ));
    }
    for page_token in [
        "x",
        "1",
        "1.x",
        "x.1",
        "-1.0",
        "1.4294967296",
        "1.2.3",
        "18446744073709551616.0",
    ] {
        rows.push(Row::invalid(
            format!("history: page_token {page_token:?}"),
            pb::HistoryRequest {
                page_token: page_token.into(),
                ..history()
            },
        ));
    }
    for consistency in BAD_CONSISTENCY {
        rows.push(Row::invalid(
            format!("history: consistency = {consistency}"),
            pb::HistoryRequest {
                consistency,
                ..history()
            },
        ));
    }
    rows
}

fn validate_fsm(base: &Base) -> Vec<Row> {
    let fsm: [(&str, String, String); 5] = [
        (
            "fsm_machine without fsm_transition",
            "order".into(),
            String::new(),
        ),
        (
            "fsm_transition without fsm_machine",
            String::new(),
            "ship".into(),
        ),
        (
            "fsm_machine with a control character",
            "order\u{7}".into(),
            "ship".into(),
        ),
        ("fsm_machine of 257 bytes", long(257), "ship".into()),
        ("fsm_transition of 257 bytes", "order".into(), long(257)),
    ];
    fsm.into_iter()
        .map(|(what, fsm_machine, fsm_transition)| {
            Row::invalid(
                format!("validate: {what}"),
                pb::ValidateRequest {
                    fsm_machine,
                    fsm_transition,
                    ..base.validate()
                },
            )
        })
        .collect()
}
