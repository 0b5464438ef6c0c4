//! A client of the HTTP/JSON gateway for tests: JSON calls, raw requests, and Server-Sent
//! Events read as they come.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// How long a test waits for an answer before it fails (a hang is a failure, not a wait).
const PATIENCE: Duration = Duration::from_secs(30);

/// One node's gateway, called with a bearer token (or none).
#[derive(Clone)]
pub struct Http {
    addr: SocketAddr,
    token: Option<String>,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

/// An answer: its status, headers and JSON body (`Null` when it has none).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub json: Value,
}

impl Answer {
    /// The answer's `reason`, for an error.
    pub fn reason(&self) -> &str {
        self.json["reason"].as_str().unwrap_or_default()
    }
}

impl Http {
    pub fn new(addr: SocketAddr, token: Option<&str>) -> Self {
        Http {
            addr,
            token: token.map(str::to_owned),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The same node, with another token.
    pub fn with_token(&self, token: Option<&str>) -> Self {
        Http {
            token: token.map(str::to_owned),
            ..self.clone()
        }
    }

    fn request(&self, method: &str, path: &str, body: Vec<u8>) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        request
            .body(Full::new(Bytes::from(body)))
            .expect("a request")
    }

    async fn send(&self, request: http::Request<Full<Bytes>>) -> http::Response<Incoming> {
        tokio::time::timeout(PATIENCE, self.client.request(request))
            .await
            .expect("an answer in time")
            .expect("the gateway answers")
    }

    /// `method path` with `body` (sent as is).
    pub async fn raw(&self, method: &str, path: &str, body: impl Into<Vec<u8>>) -> Answer {
        self.raw_with(method, path, body, &[]).await
    }

    /// [`Http::raw`] with more (or other) headers.
    pub async fn raw_with(
        &self,
        method: &str,
        path: &str,
        body: impl Into<Vec<u8>>,
        headers: &[(&'static str, &str)],
    ) -> Answer {
        let mut request = self.request(method, path, body.into());
        for (name, value) in headers {
            request
                .headers_mut()
                .insert(*name, http::HeaderValue::from_str(value).expect("a header"));
        }
        let response = self.send(request).await;
        let (parts, body) = response.into_parts();
        let bytes = tokio::time::timeout(PATIENCE, body.collect())
            .await
            .expect("a body in time")
            .expect("a body")
            .to_bytes();
        let json = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes))),
        };
        Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            json,
        }
    }

    /// `method path` with a JSON body (`Null`: none).
    pub async fn call(&self, method: &str, path: &str, body: Value) -> Answer {
        let body = match body {
            Value::Null => Vec::new(),
            body => body.to_string().into_bytes(),
        };
        self.raw(method, path, body).await
    }

    /// `method path` that must answer 200; its JSON.
    pub async fn ok(&self, method: &str, path: &str, body: Value) -> Value {
        let answer = self.call(method, path, body).await;
        assert_eq!(answer.status, 200, "{method} {path}: {:?}", answer.json);
        answer.json
    }

    /// Opens `GET path` as an event stream (from `last_event_id` on, when given).
    pub async fn events(&self, path: &str, last_event_id: Option<u64>) -> Result<Events, Answer> {
        let mut request = self.request("GET", path, Vec::new());
        if let Some(id) = last_event_id {
            request.headers_mut().insert(
                "last-event-id",
                http::HeaderValue::from_str(&id.to_string()).expect("a header"),
            );
        }
        let response = self.send(request).await;
        if response.status() != http::StatusCode::OK {
            let (parts, body) = response.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(Answer {
                status: parts.status.as_u16(),
                headers: parts.headers,
                json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            });
        }
        Ok(Events {
            body: response.into_body(),
            pending: String::new(),
        })
    }
}

/// One Server-Sent Event.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: Value,
}

/// An event stream being read.
pub struct Events {
    body: Incoming,
    pending: String,
}

impl Events {
    /// The next event (comments and keep-alives skipped); `None` when the stream ended.
    pub async fn next(&mut self) -> Option<ServerEvent> {
        loop {
            if let Some(at) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..at + 2).collect();
                let mut event = ServerEvent {
                    event: "message".into(),
                    id: None,
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    match line.split_once(':') {
                        Some(("event", v)) => event.event = v.trim_start().to_string(),
                        Some(("id", v)) => event.id = Some(v.trim_start().to_string()),
                        Some(("data", v)) => data.push_str(v.trim_start()),
                        _ => {}
                    }
                }
                if data.is_empty() && event.id.is_none() {
                    continue;
                }
                event.data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Some(event);
            }
            let frame = tokio::time::timeout(PATIENCE, self.body.frame())
                .await
                .expect("an event in time")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.pending.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }
}
