//! The Python client speaks the same contract: its `tenure_client/contract.py` lists every
//! reason of SPEC §3.2, in the same order and spelling as [`Reason::ALL`], and names the
//! headers of SPEC §3.3 as `tenure_proto::contract` does.

use tenure_client::Reason;
use tenure_proto::contract::{LEADER_HEADER, REASON_HEADER};

const PYTHON_CONTRACT: &str = include_str!("../python/tenure_client/contract.py");

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

#[test]
fn the_python_client_lists_every_reason_as_the_rust_contract_does() {
    let python = python_reasons();
    let rust: Vec<(String, &str)> = Reason::ALL
        .iter()
        .map(|reason| (reason.as_str().to_uppercase(), reason.as_str()))
        .collect();
    let python: Vec<(String, &str)> = python
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    assert_eq!(python, rust);
}

#[test]
fn the_python_client_names_the_headers_as_the_rust_contract_does() {
    assert_eq!(python_constant("REASON_HEADER"), Some(REASON_HEADER));
    assert_eq!(python_constant("LEADER_HEADER"), Some(LEADER_HEADER));
}
