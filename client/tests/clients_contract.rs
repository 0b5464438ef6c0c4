//! The Python and Node.js clients speak the same contract: their `tenure_client/contract.py`
//! and `src/contract.js` list every reason of SPEC §3.2, in the same order and spelling as
//! [`Reason::ALL`], and name the headers of SPEC §3.3 as `tenure_proto::contract` does.

use tenure_client::Reason;
use tenure_proto::contract::{LEADER_HEADER, REASON_HEADER};

const PYTHON_CONTRACT: &str = include_str!("../python/tenure_client/contract.py");
const NODE_CONTRACT: &str = include_str!("../node/src/contract.js");

/// Every reason as `(NAME, value)`, in [`Reason::ALL`]'s order.
fn rust_reasons() -> Vec<(String, &'static str)> {
    Reason::ALL
        .iter()
        .map(|reason| (reason.as_str().to_uppercase(), reason.as_str()))
        .collect()
}

/// The string value of every `    NAME = "value"` line under `class Reason`, with its name.
fn python_reasons() -> Vec<(&'static str, &'static str)> {
    let (_, class) = PYTHON_CONTRACT
        .split_once("\nclass Reason(")
        .expect("contract.py has a class Reason");
    class
        .lines()
        .filter_map(|line| line.strip_prefix("    ")?.split_once(" = \""))
        .filter_map(|(name, value)| Some((name, value.strip_suffix('"')?)))
        .collect()
}

/// The value of a module-level `NAME = "value"` line.
fn python_constant(name: &str) -> Option<&'static str> {
    PYTHON_CONTRACT.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(" = \"")?
            .strip_suffix('"')
    })
}

/// The string value of every `  NAME: "value",` line of `export const Reason`, with its name.
fn node_reasons() -> Vec<(&'static str, &'static str)> {
    let (_, object) = NODE_CONTRACT
        .split_once("\nexport const Reason = Object.freeze({")
        .expect("contract.js exports Reason");
    let (object, _) = object.split_once("\n});").expect("Reason's object ends");
    object
        .lines()
        .filter_map(|line| line.strip_prefix("  ")?.split_once(": \""))
        .filter_map(|(name, value)| Some((name, value.strip_suffix("\",")?)))
        .collect()
}

/// The value of an `export const NAME = "value";` line.
fn node_constant(name: &str) -> Option<&'static str> {
    NODE_CONTRACT.lines().find_map(|line| {
        line.strip_prefix("export const ")?
            .strip_prefix(name)?
            .strip_prefix(" = \"")?
            .strip_suffix("\";")
    })
}

fn owned(reasons: Vec<(&str, &'static str)>) -> Vec<(String, &'static str)> {
    reasons
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

#[test]
fn the_python_client_lists_every_reason_as_the_rust_contract_does() {
    assert_eq!(owned(python_reasons()), rust_reasons());
}

#[test]
fn the_node_client_lists_every_reason_as_the_rust_contract_does() {
    assert_eq!(owned(node_reasons()), rust_reasons());
}

#[test]
fn the_node_client_names_the_headers_as_the_rust_contract_does() {
    assert_eq!(node_constant("REASON_HEADER"), Some(REASON_HEADER));
    assert_eq!(node_constant("LEADER_HEADER"), Some(LEADER_HEADER));
}

#[test]
fn the_python_client_names_the_headers_as_the_rust_contract_does() {
    assert_eq!(python_constant("REASON_HEADER"), Some(REASON_HEADER));
    assert_eq!(python_constant("LEADER_HEADER"), Some(LEADER_HEADER));
}
