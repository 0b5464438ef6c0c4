//! docs/spec.md covers the whole public API: every service, RPC, message and field of
//! `tenure.v1` is named in it (the reasons are checked against its table in the node's error
//! tests). A field added to a .proto file without a word in the contract fails here.

use prost::Message;

const SPEC: &str = include_str!("../../docs/spec.md");

/// Whether `word` stands in the spec as a word of its own (not inside a longer name).
fn named(word: &str) -> bool {
    SPEC.match_indices(word).any(|(at, _)| {
        let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let before = SPEC[..at].chars().next_back().is_none_or(|c| !is_name(c));
        let after = SPEC[at + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_name(c));
        before && after
    })
}

#[test]
fn the_spec_names_every_rpc_message_and_field_of_the_public_api() {
    let set = prost_types::FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET)
        .expect("the descriptor set the build wrote");
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in set.file.iter().filter(|f| f.package() == "tenure.v1") {
        for service in &file.service {
            seen += 1;
            if !named(service.name()) {
                missing.push(format!("service {}", service.name()));
            }
            for method in &service.method {
                seen += 1;
                if !named(method.name()) {
                    missing.push(format!("rpc {}.{}", service.name(), method.name()));
                }
            }
        }
        for message in &file.message_type {
            for field in &message.field {
                seen += 1;
                if !named(field.name()) {
                    missing.push(format!("field {}.{}", message.name(), field.name()));
                }
            }
        }
    }
    assert!(
        seen > 100,
        "the descriptor set holds the API ({seen} names)"
    );
    assert!(
        missing.is_empty(),
        "docs/spec.md does not name: {}",
        missing.join(", ")
    );
}
