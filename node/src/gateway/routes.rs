//! The routes of the HTTP/JSON gateway: one per unary `tenure.v1.Leases` and `Cluster` call,
//! and `Watch` as Server-Sent Events. The table is the one source of the dispatch and of the
//! OpenAPI document; the messages come from the proto descriptors.
//!
//! A path template's segments are literals or `{field}` (a field of the request, its value
//! percent-decoded: a name with `/` is sent as `%2F`), and the last may end in `:verb`
//! (`{resource}:acquire`): the verb is split off at the segment's last `:`, so a name may hold
//! `:` too.

use http::Method;

/// One route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    /// `tenure.v1.Leases` or `tenure.v1.Cluster`.
    pub service: &'static str,
    /// The call, as the proto names it (`Acquire`).
    pub rpc: &'static str,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
}

const LEASES: &str = "tenure.v1.Leases";
const CLUSTER: &str = "tenure.v1.Cluster";

macro_rules! routes {
    ($($method:ident $path:literal => $service:ident $rpc:literal, $summary:literal;)*) => {
        /// Every route, in the order the OpenAPI document lists them.
        pub const ROUTES: &[Route] = &[$(Route {
            method: Method::$method,
            path: $path,
            service: $service,
            rpc: $rpc,
            summary: $summary,
        },)*];
    };
}

routes! {
    POST "/v1/resources" => LEASES "CreateResource", "Register a resource with its policy (admin)";
    GET "/v1/resources" => LEASES "ListResources", "List resources, by prefix, a page at a time";
    GET "/v1/resources/{name}" => LEASES "GetResource", "A resource: its policy, live leases, waiting room and bookings";
    POST "/v1/resources/{resource}:acquire" => LEASES "Acquire", "Acquire a lease (or wait for one)";
    POST "/v1/resources:acquireMany" => LEASES "AcquireMany", "Acquire leases on several resources at once, all or none";
    POST "/v1/resources/{resource}/leases/{lease_id}:renew" => LEASES "Renew", "Renew a lease";
    POST "/v1/resources/{resource}/leases/{lease_id}:release" => LEASES "Release", "Release a lease";
    POST "/v1/resources/{resource}/leases/{lease_id}:transfer" => LEASES "Transfer", "Hand a lease to another holder";
    POST "/v1/resources/{resource}:validate" => LEASES "Validate", "Is this fencing token the live one?";
    POST "/v1/resources/{resource}:cancelWait" => LEASES "CancelWait", "Leave the waiting room";
    GET "/v1/resources/{resource}/history" => LEASES "History", "A resource's events, a page at a time";
    POST "/v1/resources/{resource}/bookings" => LEASES "Book", "Book a window of a resource";
    POST "/v1/resources/{resource}/bookings:cancel" => LEASES "CancelBooking", "Cancel a booking";
    POST "/v1/resources/{resource}:forward" => LEASES "Forward", "Send a request to the resource's owner";
    GET "/v1/leases" => LEASES "ListLeases", "Live leases of a holder or principal";
    GET "/v1/watch" => LEASES "Watch", "Events as they happen (Server-Sent Events; resume with Last-Event-ID)";
    POST "/v1/sessions" => LEASES "CreateSession", "Create a session";
    GET "/v1/sessions" => LEASES "ListSessions", "List live sessions";
    GET "/v1/sessions/{session_id}" => LEASES "GetSession", "A session and its first leases";
    POST "/v1/sessions/{session_id}:renew" => LEASES "RenewSession", "Renew a session and all it carries";
    POST "/v1/sessions/{session_id}:close" => LEASES "CloseSession", "Close a session: release all it carries";
    GET "/v1/cluster" => CLUSTER "Status", "Members, leader, term, indexes (admin)";
    POST "/v1/cluster/learners" => CLUSTER "AddLearner", "Add a learner (admin)";
    POST "/v1/cluster/members" => CLUSTER "ChangeMembership", "Change the voters (admin)";
    POST "/v1/cluster:transferLeader" => CLUSTER "TransferLeader", "Move leadership (admin)";
    POST "/v1/cluster:snapshot" => CLUSTER "Snapshot", "Take a snapshot now (admin)";
    GET "/v1/quotas" => CLUSTER "GetQuota", "The default quotas (admin)";
    PUT "/v1/quotas" => CLUSTER "SetQuota", "Set the default quotas (admin)";
    GET "/v1/quotas/{principal}" => CLUSTER "GetQuota", "A principal's quotas and usage (admin)";
    PUT "/v1/quotas/{principal}" => CLUSTER "SetQuota", "Set a principal's quotas (admin)";
}

/// The calls the gateway does not serve: they stream both ways (use gRPC).
pub const GRPC_ONLY: [&str; 2] = ["KeepAlive", "Serve"];

/// The `Watch` route's call: answered as a stream of events.
pub const WATCH: &str = "Watch";

/// A route that matched a request, with the fields its path gave.
#[derive(Debug)]
pub struct Matched {
    pub route: &'static Route,
    pub fields: Vec<(&'static str, String)>,
}

/// Why no route answers a request.
#[derive(Debug, PartialEq, Eq)]
pub enum NoRoute {
    /// No template has this path.
    NotFound,
    /// Some template has it, for other methods.
    Method(Vec<Method>),
    /// A path segment does not decode to UTF-8.
    BadEncoding,
}

/// The route for `method` and the (still percent-encoded) `path`.
pub fn find(method: &Method, path: &str) -> Result<Matched, NoRoute> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut allowed = Vec::new();
    for route in ROUTES {
        match fields_of(route.path, &segments)? {
            Some(fields) if route.method == method => return Ok(Matched { route, fields }),
            Some(_) => allowed.push(route.method.clone()),
            None => {}
        }
    }
    match allowed.is_empty() {
        true => Err(NoRoute::NotFound),
        false => Err(NoRoute::Method(allowed)),
    }
}

/// The fields `template` takes from `segments`, if it matches them.
fn fields_of(
    template: &'static str,
    segments: &[&str],
) -> Result<Option<Vec<(&'static str, String)>>, NoRoute> {
    let parts: Vec<&'static str> = template.trim_start_matches('/').split('/').collect();
    if parts.len() != segments.len() {
        return Ok(None);
    }
    let mut fields = Vec::new();
    for (part, segment) in parts.iter().zip(segments) {
        let Some(rest) = part.strip_prefix('{') else {
            if part != segment {
                return Ok(None);
            }
            continue;
        };
        let (field, verb) = match rest.split_once('}') {
            Some((field, verb)) => (field, verb),
            None => (rest, ""),
        };
        let value = match verb.strip_prefix(':') {
            Some(verb) => match segment.rsplit_once(':') {
                Some((value, theirs)) if theirs == verb => value,
                _ => return Ok(None),
            },
            None => segment,
        };
        if value.is_empty() {
            return Ok(None);
        }
        let decoded = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| NoRoute::BadEncoding)?;
        fields.push((field, decoded.into_owned()));
    }
    Ok(Some(fields))
}

/// The path fields of a template, in order.
pub fn path_fields(template: &str) -> Vec<&str> {
    template
        .split('/')
        .filter_map(|part| part.strip_prefix('{'))
        .filter_map(|rest| rest.split_once('}').map(|(field, _)| field))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_slashes_and_colons_come_through_encoded() {
        let m = find(&Method::POST, "/v1/resources/accounts%2Falice:acquire").expect("route");
        assert_eq!(m.route.rpc, "Acquire");
        assert_eq!(m.fields, vec![("resource", "accounts/alice".to_string())]);
        let m = find(&Method::POST, "/v1/resources/db:primary:acquire").expect("route");
        assert_eq!(m.fields, vec![("resource", "db:primary".to_string())]);
        let m = find(&Method::GET, "/v1/resources/db:primary").expect("route");
        assert_eq!(m.route.rpc, "GetResource");
        assert_eq!(m.fields, vec![("name", "db:primary".to_string())]);
    }

    #[test]
    fn a_lease_route_takes_the_resource_and_the_lease() {
        let m = find(&Method::POST, "/v1/resources/r/leases/lse_7_0:renew").expect("route");
        assert_eq!(m.route.rpc, "Renew");
        assert_eq!(
            m.fields,
            vec![
                ("resource", "r".to_string()),
                ("lease_id", "lse_7_0".to_string())
            ]
        );
    }

    #[test]
    fn literal_verbs_and_plain_collections_are_told_apart() {
        let find_rpc = |method, path| find(&method, path).map(|m| m.route.rpc);
        assert_eq!(
            find_rpc(Method::POST, "/v1/resources"),
            Ok("CreateResource")
        );
        assert_eq!(find_rpc(Method::GET, "/v1/resources"), Ok("ListResources"));
        assert_eq!(
            find_rpc(Method::POST, "/v1/resources:acquireMany"),
            Ok("AcquireMany")
        );
        assert_eq!(
            find_rpc(Method::POST, "/v1/cluster:snapshot"),
            Ok("Snapshot")
        );
    }

    #[test]
    fn unknown_paths_verbs_and_methods_are_refused() {
        assert_eq!(
            find(&Method::POST, "/v1/resources/r/leases/l:explode").map(|m| m.route.rpc),
            Err(NoRoute::NotFound)
        );
        // A verb no route has makes the segment a name: `r:explode` is a resource to GET.
        assert_eq!(
            find(&Method::POST, "/v1/resources/r:explode").map(|m| m.route.rpc),
            Err(NoRoute::Method(vec![Method::GET]))
        );
        assert_eq!(
            find(&Method::DELETE, "/v1/resources/r").map(|m| m.route.rpc),
            Err(NoRoute::Method(vec![Method::GET]))
        );
        assert_eq!(
            find(&Method::GET, "/v1/resources/%FF").map(|m| m.route.rpc),
            Err(NoRoute::BadEncoding)
        );
        // An empty name matches no field.
        assert_eq!(
            find(&Method::POST, "/v1/resources//leases/l:renew").map(|m| m.route.rpc),
            Err(NoRoute::NotFound)
        );
    }

    #[test]
    fn the_spec_lists_every_route_and_no_other() {
        let spec = include_str!("../../../docs/spec.md");
        let section = spec
            .split_once("### 2.7 HTTP/JSON gateway")
            .expect("docs/spec.md §2.7")
            .1;
        let section = section.split("\n## ").next().unwrap_or(section);
        let mut listed = std::collections::BTreeSet::new();
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let rpc = cells[2].split('`').nth(1).expect("a call");
            for route in cells[1].split(", ") {
                let route = route.trim_matches('`');
                let (method, path) = route.split_once(' ').expect("METHOD PATH");
                listed.insert((method.to_string(), path.to_string(), rpc.to_string()));
            }
        }
        let ours: std::collections::BTreeSet<(String, String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string(), r.rpc.to_string()))
            .collect();
        assert_eq!(listed, ours, "docs/spec.md §2.7 against ROUTES");
    }

    #[test]
    fn every_route_names_a_call_of_the_proto_and_every_unary_call_has_a_route() {
        use prost::Message;
        let files = prost_types::FileDescriptorSet::decode(tenure_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptors");
        let mut calls = Vec::new();
        for file in files.file.iter().filter(|f| f.package() == "tenure.v1") {
            for service in &file.service {
                for method in &service.method {
                    calls.push((
                        format!("tenure.v1.{}", service.name()),
                        method.name().to_string(),
                    ));
                }
            }
        }
        for route in ROUTES {
            assert!(
                calls.contains(&(route.service.to_string(), route.rpc.to_string())),
                "{} {} names no call",
                route.method,
                route.path
            );
        }
        for (service, rpc) in &calls {
            let routed = ROUTES.iter().any(|r| r.service == service && r.rpc == rpc);
            assert!(
                routed || GRPC_ONLY.contains(&rpc.as_str()),
                "{service}/{rpc} has no route"
            );
        }
        for route in ROUTES {
            for other in ROUTES.iter().filter(|o| *o != route) {
                assert!(
                    !(route.path == other.path && route.method == other.method),
                    "{} {} twice",
                    route.method,
                    route.path
                );
            }
        }
    }
}
