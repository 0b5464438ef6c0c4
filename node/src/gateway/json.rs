//! JSON in the proto3 JSON mapping, from the proto descriptors (no hand-written structs): a
//! request's body, query and path fields into the call's message, a reply back to JSON.
//!
//! Input takes a field by its JSON name (`fencingToken`) or its proto name (`fencing_token`),
//! 64-bit integers as numbers or strings, durations as `"1.5s"`, timestamps in RFC 3339, enums
//! by name. Output is the canonical mapping with every field present: lowerCamelCase names,
//! 64-bit integers as strings, enums by name.

use std::sync::OnceLock;

use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions,
};
use serde_json::{Map, Value};

/// The descriptors of `proto/`, decoded once.
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(tenure_proto::FILE_DESCRIPTOR_SET)
            .expect("the descriptors this binary was built with decode")
    })
}

/// The input and output messages of `service`/`rpc`.
pub fn messages(service: &str, rpc: &str) -> Option<(MessageDescriptor, MessageDescriptor)> {
    let method = pool()
        .get_service_by_name(service)?
        .methods()
        .find(|m| m.name() == rpc)?;
    Some((method.input(), method.output()))
}

/// A request that does not fit its message: which field, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct BadJson {
    /// The field's path (`ttl`, `claims[1].mode`); empty when the whole body is at fault.
    pub field: String,
    pub message: String,
}

impl BadJson {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        BadJson {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for BadJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field.as_str() {
            "" => write!(f, "{}", self.message),
            field => write!(f, "field `{field}`: {}", self.message),
        }
    }
}

/// The field of `message` a query or path parameter names, by JSON or proto name.
fn field(message: &MessageDescriptor, name: &str) -> Option<FieldDescriptor> {
    message
        .get_field_by_json_name(name)
        .or_else(|| message.get_field_by_name(name))
}

/// The JSON value a text parameter stands for in `field` (numbers, durations and the like
/// stay strings: the mapping takes them so).
fn text_value(field: &FieldDescriptor, text: &str) -> Result<Value, BadJson> {
    match field.kind() {
        Kind::Bool => match text {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(BadJson::new(
                field.name(),
                format!("expected true or false, got {text:?}"),
            )),
        },
        Kind::Message(m) if !is_well_known(&m) => Err(BadJson::new(
            field.name(),
            "a message field cannot come from the query: send it in a JSON body",
        )),
        _ => Ok(Value::String(text.to_string())),
    }
}

/// `google.protobuf` messages the mapping writes as strings.
fn is_well_known(message: &MessageDescriptor) -> bool {
    message.package_name() == "google.protobuf"
}

/// A JSON value in which no object names a key twice: parsers disagree on which of two
/// `"holder"`s counts (serde_json keeps the last), so a body that names one twice is refused
/// rather than read one way here and another by whatever checked it on the way.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if object.insert(key.clone(), value).is_some() {
                return Err(serde::de::Error::custom(format!(
                    "the key `{key}` is given twice"
                )));
            }
        }
        Ok(Value::Object(object))
    }
}

/// Builds the request of `input` from a JSON `body` (an object, or nothing), the `query`
/// parameters and the `path` fields. A field given twice with different values is refused.
pub fn request(
    input: &MessageDescriptor,
    body: &[u8],
    query: &[(String, String)],
    path: &[(&str, String)],
) -> Result<Vec<u8>, BadJson> {
    let given = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Strict>(body) {
            Ok(Strict(Value::Object(object))) => object,
            Ok(_) => return Err(BadJson::new("", "the body must be a JSON object")),
            Err(e) => return Err(BadJson::new("", format!("the body is not JSON: {e}"))),
        }
    };
    // Each field once, under its JSON name, whichever name the body used.
    let mut object = Map::new();
    for (key, value) in given {
        let key = match field(input, &key) {
            Some(f) => f.json_name().to_string(),
            None => key,
        };
        if object.contains_key(&key) {
            return Err(BadJson::new(key, "given twice (under both of its names)"));
        }
        object.insert(key, value);
    }
    for (name, text) in query {
        let Some(f) = field(input, name) else {
            return Err(BadJson::new(
                name.as_str(),
                format!("{} has no such field", input.name()),
            ));
        };
        let value = text_value(&f, text)?;
        let key = f.json_name().to_string();
        if f.is_list() {
            let slot = object
                .entry(key)
                .or_insert_with(|| Value::Array(Vec::new()));
            match slot {
                Value::Array(items) => items.push(value),
                _ => return Err(BadJson::new(f.name(), "given in the body and the query")),
            }
        } else {
            set_once(&mut object, &f, value)?;
        }
    }
    for (name, text) in path {
        let f = field(input, name)
            .ok_or_else(|| BadJson::new(*name, format!("{} has no such field", input.name())))?;
        set_once(&mut object, &f, Value::String(text.clone()))?;
    }
    let mut track = serde_path_to_error::Track::new();
    let deserializer = serde_path_to_error::Deserializer::new(Value::Object(object), &mut track);
    let message = DynamicMessage::deserialize(input.clone(), deserializer).map_err(|e| {
        let path = track.path().to_string();
        let field = match path.as_str() {
            "?" | "." => String::new(),
            _ => path,
        };
        BadJson::new(field, e.to_string())
    })?;
    Ok(prost::Message::encode_to_vec(&message))
}

/// Sets `f` in `object` unless it holds another value already (under either name).
fn set_once(
    object: &mut Map<String, Value>,
    f: &FieldDescriptor,
    value: Value,
) -> Result<(), BadJson> {
    let present = [f.json_name(), f.name()]
        .into_iter()
        .find_map(|key| object.get(key).cloned());
    match present {
        Some(existing) if !same(&existing, &value) => Err(BadJson::new(
            f.name(),
            format!("given twice: {existing} and {value}"),
        )),
        Some(_) => Ok(()),
        None => {
            object.insert(f.json_name().to_string(), value);
            Ok(())
        }
    }
}

/// The same value, whether written as a number or as a string.
fn same(a: &Value, b: &Value) -> bool {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text(a) == text(b)
}

/// The JSON of a reply, encoded as `output`.
pub fn reply(output: &MessageDescriptor, encoded: &[u8]) -> Result<Value, String> {
    let message = DynamicMessage::decode(output.clone(), encoded).map_err(|e| e.to_string())?;
    let options = SerializeOptions::new().skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tenure_proto::v1 as pb;

    fn acquire_input() -> MessageDescriptor {
        messages("tenure.v1.Leases", "Acquire").expect("Acquire").0
    }

    fn acquire(body: &str, query: &[(&str, &str)]) -> Result<pb::AcquireRequest, BadJson> {
        let query: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let bytes = request(
            &acquire_input(),
            body.as_bytes(),
            &query,
            &[("resource", "accounts/alice".into())],
        )?;
        Ok(pb::AcquireRequest::decode(bytes.as_slice()).expect("decodes"))
    }

    #[test]
    fn a_body_in_either_naming_with_the_path_fills_the_request() {
        let r = acquire(
            r#"{"holder": "w1", "ttl": "1.5s", "mode": "LEASE_MODE_WRITE", "units": "2", "on_conflict": "ON_CONFLICT_WAIT"}"#,
            &[],
        )
        .expect("request");
        assert_eq!(r.resource, "accounts/alice");
        assert_eq!(r.holder, "w1");
        assert_eq!(
            r.ttl,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(r.mode, pb::LeaseMode::Write as i32);
        assert_eq!(r.units, 2);
        assert_eq!(r.on_conflict, pb::OnConflict::Wait as i32);
        let r = acquire(r#"{"waitTimeout": "3s", "requestId": "x"}"#, &[]).expect("request");
        assert_eq!(r.wait_timeout.map(|d| d.seconds), Some(3));
        assert_eq!(r.request_id, "x");
    }

    #[test]
    fn wrong_types_and_unknown_fields_name_the_field() {
        let bad = acquire(r#"{"holder": "w1", "units": "two"}"#, &[]).expect_err("refused");
        assert_eq!(bad.field, "units");
        let bad = acquire(r#"{"ttl": 30}"#, &[]).expect_err("refused");
        assert_eq!(bad.field, "ttl");
        let bad = acquire(r#"{"holdr": "w1"}"#, &[]).expect_err("refused");
        assert!(bad.message.contains("holdr"), "{bad}");
        let bad = acquire(r#"{"holder": "#, &[]).expect_err("refused");
        assert_eq!(bad.field, "");
        let bad = acquire("[1]", &[]).expect_err("refused");
        assert_eq!(bad.field, "");
        let bad = acquire(r#"{"resource": "other"}"#, &[]).expect_err("refused");
        assert_eq!(bad.field, "resource");
        let bad = acquire("", &[("nope", "1")]).expect_err("refused");
        assert_eq!(bad.field, "nope");
        let bad = acquire("", &[("holder", "a"), ("holder", "b")]).expect_err("refused");
        assert_eq!(bad.field, "holder");
        let bad = acquire(r#"{"requestId": "a", "request_id": "b"}"#, &[]).expect_err("refused");
        assert_eq!(bad.field, "requestId");
        // A key given twice is refused, at any depth, whichever value would have counted.
        for body in [
            r#"{"holder": "a", "holder": "b"}"#,
            r#"{"holder": "a", "metadata": {"k": "1", "k": "2"}}"#,
            r#"{"resource": "accounts/alice", "resource": "x"}"#,
        ] {
            let bad = acquire(body, &[]).expect_err(body);
            assert!(bad.message.contains("given twice"), "{body}: {bad}");
        }
        let many = messages("tenure.v1.Leases", "AcquireMany")
            .expect("AcquireMany")
            .0;
        let body = br#"{"holder": "h", "claims": [{"resource": "a", "resource": "b"}]}"#;
        let bad = request(&many, body, &[], &[]).expect_err("a key twice in a list's object");
        assert!(bad.message.contains("`resource` is given twice"), "{bad}");
    }

    #[test]
    fn query_parameters_are_fields_too() {
        let r = acquire("", &[("holder", "w2"), ("ttl", "30s")]).expect("request");
        assert_eq!(
            (r.holder.as_str(), r.ttl.map(|d| d.seconds)),
            ("w2", Some(30))
        );
        let (input, _) = messages("tenure.v1.Leases", "Watch").expect("Watch");
        let bytes = request(
            &input,
            b"",
            &[
                ("prefix".into(), "db/".into()),
                ("events".into(), "EVENT_TYPE_ACQUIRED".into()),
                ("events".into(), "EVENT_TYPE_RELEASED".into()),
                ("live_only".into(), "true".into()),
                ("startRevision".into(), "41".into()),
            ],
            &[],
        )
        .expect("request");
        let w = pb::WatchRequest::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(w.prefix, "db/");
        assert_eq!(w.events.len(), 2);
        assert!(w.live_only);
        assert_eq!(w.start_revision, 41);
    }

    #[test]
    fn a_reply_is_canonical_json_with_every_field() {
        let (_, output) = messages("tenure.v1.Leases", "Acquire").expect("Acquire");
        let answer = pb::AcquireResponse {
            granted: true,
            lease: Some(pb::Lease {
                resource: "r".into(),
                fencing_token: 5140,
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = reply(&output, &answer.encode_to_vec()).expect("json");
        assert_eq!(json["granted"], Value::Bool(true));
        assert_eq!(json["lease"]["fencingToken"], Value::String("5140".into()));
        assert_eq!(json["reason"], Value::String(String::new()));
    }

    #[test]
    fn every_path_field_is_a_field_of_its_request() {
        for route in super::super::routes::ROUTES {
            let (input, _) = messages(route.service, route.rpc).expect("call");
            for name in super::super::routes::path_fields(route.path) {
                assert!(
                    input.get_field_by_name(name).is_some(),
                    "{} {}: {} has no field {name}",
                    route.method,
                    route.path,
                    input.name()
                );
            }
        }
    }
}
