//! The OpenAPI 3.0 document of the gateway, generated from the route table and the proto
//! descriptors: the same source the gateway transcodes with.

use std::collections::BTreeMap;

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{json, Map, Value};

use super::json::messages;
use super::routes::{path_fields, ROUTES, WATCH};

/// `#/components/schemas/tenure.v1.Lease`.
fn reference(message: &MessageDescriptor) -> Value {
    json!({ "$ref": format!("#/components/schemas/{}", message.full_name()) })
}

/// The schema of one value of `field` (not repeated), recording messages it needs.
fn scalar(field: &FieldDescriptor, kind: Kind, needed: &mut Vec<MessageDescriptor>) -> Value {
    match kind {
        Kind::Bool => json!({ "type": "boolean" }),
        Kind::String => json!({ "type": "string" }),
        Kind::Bytes => json!({ "type": "string", "format": "byte" }),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            json!({ "type": "integer", "format": "int32" })
        }
        Kind::Uint32 | Kind::Fixed32 => {
            json!({ "type": "integer", "format": "int32", "minimum": 0 })
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            json!({ "type": "string", "format": "int64", "description": "a 64-bit integer, as a string" })
        }
        Kind::Uint64 | Kind::Fixed64 => {
            json!({ "type": "string", "format": "uint64", "description": "a 64-bit integer, as a string" })
        }
        Kind::Float | Kind::Double => json!({ "type": "number" }),
        Kind::Enum(e) => json!({
            "type": "string",
            "enum": e.values().map(|v| v.name().to_string()).collect::<Vec<_>>(),
        }),
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Duration" => {
                json!({ "type": "string", "example": "1.5s", "description": "seconds with an `s`" })
            }
            "google.protobuf.Timestamp" => json!({ "type": "string", "format": "date-time" }),
            "google.protobuf.Empty" => json!({ "type": "object" }),
            _ if field.is_map() => {
                let value = m.get_field_by_name("value");
                let schema = match value {
                    Some(v) => scalar(&v, v.kind(), needed),
                    None => json!({}),
                };
                json!({ "type": "object", "additionalProperties": schema })
            }
            _ => {
                needed.push(m.clone());
                reference(&m)
            }
        },
    }
}

/// The schema of `field`.
fn field_schema(field: &FieldDescriptor, needed: &mut Vec<MessageDescriptor>) -> Value {
    let one = scalar(field, field.kind(), needed);
    if field.is_list() {
        json!({ "type": "array", "items": one })
    } else {
        one
    }
}

/// The schema of `message`'s JSON object.
fn message_schema(message: &MessageDescriptor, needed: &mut Vec<MessageDescriptor>) -> Value {
    let mut properties = Map::new();
    for field in message.fields() {
        properties.insert(field.json_name().to_string(), field_schema(&field, needed));
    }
    json!({ "type": "object", "properties": properties })
}

/// The document.
pub fn document() -> Value {
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    let mut needed: Vec<MessageDescriptor> = Vec::new();
    let mut operation_ids: BTreeMap<&str, usize> = BTreeMap::new();
    for route in ROUTES {
        let Some((input, output)) = messages(route.service, route.rpc) else {
            continue;
        };
        let in_path = path_fields(route.path);
        let mut parameters: Vec<Value> = in_path
            .iter()
            .map(|name| {
                json!({
                    "name": name,
                    "in": "path",
                    "required": true,
                    "schema": { "type": "string" },
                    "description": "percent-encoded (`/` as `%2F`)",
                })
            })
            .collect();
        let body_less = matches!(route.method, http::Method::GET | http::Method::DELETE);
        if body_less {
            for field in input.fields().filter(|f| !in_path.contains(&f.name())) {
                if matches!(field.kind(), Kind::Message(ref m) if m.package_name() != "google.protobuf")
                {
                    continue;
                }
                parameters.push(json!({
                    "name": field.json_name(),
                    "in": "query",
                    "required": false,
                    "schema": field_schema(&field, &mut needed),
                }));
            }
        }
        if route.rpc == WATCH {
            parameters.push(json!({
                "name": "Last-Event-ID",
                "in": "header",
                "required": false,
                "schema": { "type": "string" },
                "description": "resume after this revision (the id of the last event received)",
            }));
        }
        needed.push(input.clone());
        needed.push(output.clone());
        let seen = operation_ids.entry(route.rpc).or_insert(0);
        *seen += 1;
        let operation_id = match *seen {
            1 => route.rpc.to_string(),
            n => format!("{}{n}", route.rpc),
        };
        let answer = match route.rpc == WATCH {
            true => json!({
                "description": "`text/event-stream`: one `watch` event per message, `id` = its revision",
                "content": { "text/event-stream": { "schema": reference(&output) } },
            }),
            false => json!({
                "description": "the call's reply",
                "content": { "application/json": { "schema": reference(&output) } },
            }),
        };
        let mut operation = json!({
            "operationId": operation_id,
            "summary": route.summary,
            "description": format!("`{}/{}`", route.service, route.rpc),
            "tags": [route.service.trim_start_matches("tenure.v1.")],
            "parameters": parameters,
            "responses": {
                "200": answer,
                "default": {
                    "description": "an error (SPEC §3): the HTTP status of its gRPC code",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } },
                },
            },
        });
        if !body_less {
            operation["requestBody"] = json!({
                "required": false,
                "content": { "application/json": { "schema": reference(&input) } },
            });
        }
        paths
            .entry(route.path)
            .or_default()
            .insert(route.method.as_str().to_ascii_lowercase(), operation);
    }
    let mut schemas = Map::new();
    while let Some(message) = needed.pop() {
        let name = message.full_name().to_string();
        if schemas.contains_key(&name) {
            continue;
        }
        let schema = message_schema(&message, &mut needed);
        schemas.insert(name, schema);
    }
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "properties": {
                "code": { "type": "string", "description": "the gRPC code's name, e.g. NOT_FOUND" },
                "reason": { "type": "string", "description": "the reason of SPEC §3.2, e.g. session_not_found" },
                "message": { "type": "string" },
                "metadata": { "type": "object", "additionalProperties": { "type": "string" } },
            },
        }),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Tenure HTTP/JSON gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Every unary tenure.v1 call as a route; JSON in the proto3 mapping. KeepAlive and Serve stream both ways: use gRPC for them.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
        "security": [{ "bearer": [] }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_with_its_messages() {
        let doc = document();
        for route in ROUTES {
            let operation = &doc["paths"][route.path][route.method.as_str().to_ascii_lowercase()];
            assert!(operation.is_object(), "{} {}", route.method, route.path);
            let reply = &operation["responses"]["200"]["content"];
            let schema = reply
                .as_object()
                .and_then(|c| c.values().next())
                .map(|c| c["schema"]["$ref"].clone())
                .unwrap_or_default();
            let name = schema
                .as_str()
                .unwrap_or_default()
                .trim_start_matches("#/components/schemas/");
            assert!(doc["components"]["schemas"][name].is_object(), "{name}");
        }
        let lease = &doc["components"]["schemas"]["tenure.v1.Lease"]["properties"];
        assert_eq!(lease["fencingToken"]["type"], "string");
        assert_eq!(lease["expiresAt"]["format"], "date-time");
    }
}
