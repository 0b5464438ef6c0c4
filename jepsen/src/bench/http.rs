//! The benchmark workloads through the HTTP/JSON gateway (`tenure-http`): the same calls as
//! `tenure`'s, as JSON over HTTP/1.1 to the leader's gateway, so the two tables differ only by
//! the door. Measured: `acquire` and `read`.

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::Workload;

pub struct Session {
    client: Client<HttpConnector, Full<Bytes>>,
    /// `http://HOST:PORT` of the leader's gateway.
    base: String,
    workload: Workload,
    prefix: String,
    resource: String,
    /// The held lease (`Read`): its id and token.
    held: Option<(String, String)>,
}

/// A name in a path.
fn encoded(name: &str) -> String {
    name.replace('/', "%2F")
}

impl Session {
    /// A client of its own connections to the gateway of the leader, which `grpc` (the
    /// nodes' gRPC endpoints, in the order of `http`) names.
    pub async fn open(
        grpc: &[String],
        http: &[String],
        workload: Workload,
        prefix: String,
        resource: String,
    ) -> Result<Session> {
        if !matches!(workload, Workload::Acquire | Workload::Read) {
            bail!(
                "{} is not measured through the gateway (acquire, read)",
                workload.name()
            );
        }
        let leader = super::tenure::leader(grpc).await?;
        let gateway = http
            .get((leader - 1) as usize)
            .context("no gateway of the leader")?;
        let mut session = Session {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base: format!("http://{gateway}"),
            workload,
            prefix,
            resource,
            held: None,
        };
        if workload == Workload::Read {
            let path = format!("/v1/resources/{}:acquire", encoded(&session.resource));
            let body = json!({"holder": session.prefix, "ttl": "600s"});
            let answer = session.call("POST", &path, Some(body)).await?;
            session.held = Some(granted(&answer)?);
        }
        Ok(session)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let json: Value =
            serde_json::from_slice(&bytes).with_context(|| format!("{method} {path}: not JSON"))?;
        if !status.is_success() {
            bail!("{method} {path}: {status} {json}");
        }
        Ok(json)
    }

    pub async fn op(&mut self, n: u64) -> Result<Option<std::time::Duration>> {
        match self.workload {
            Workload::Acquire => {
                let resource = format!("{}/{n}", self.prefix);
                let path = format!("/v1/resources/{}:acquire", encoded(&resource));
                let body = json!({"holder": "b", "ttl": "30s"});
                granted(&self.call("POST", &path, Some(body)).await?)?;
            }
            Workload::Read => {
                let path = format!(
                    "/v1/resources/{}?consistency=CONSISTENCY_LINEARIZABLE",
                    encoded(&self.resource)
                );
                let answer = self.call("GET", &path, None).await?;
                let holders = answer["resource"]["leases"].as_array().map_or(0, Vec::len);
                if holders != 1 {
                    bail!("the owner read shows {holders} holders, not 1");
                }
            }
            other => bail!("{} is not measured through the gateway", other.name()),
        }
        Ok(None)
    }

    pub async fn close(self) {
        if let Some((lease_id, token)) = &self.held {
            let path = format!(
                "/v1/resources/{}/leases/{lease_id}:release",
                encoded(&self.resource)
            );
            let body = json!({"holder": self.prefix, "fencingToken": token});
            let _ = self.call("POST", &path, Some(body)).await;
        }
    }
}

/// The lease a granted acquire's JSON names: its id and token.
fn granted(answer: &Value) -> Result<(String, String)> {
    if answer["granted"] != Value::Bool(true) {
        bail!("not granted: {}", answer["reason"]);
    }
    let lease = &answer["lease"];
    match (lease["leaseId"].as_str(), lease["fencingToken"].as_str()) {
        (Some(id), Some(token)) => Ok((id.to_string(), token.to_string())),
        _ => bail!("granted without a lease: {answer}"),
    }
}
