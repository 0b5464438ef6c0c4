//! What a client without a token can hold of a node's ports, and one principal of its open
//! streams:
//!
//! - `idle-connections`: TCP connections to node 1's gRPC port that never send a byte, from
//!   many loopback addresses, opened again whenever the node closes them;
//! - `idle-gateway`: keep-alive connections to node 1's HTTP gateway, each having fetched a
//!   console file (no token needed), left open, opened again when closed;
//! - `health-watch`: health Watch streams (no token needed) to node 1 from one address;
//! - `rejoin`: a principal that holds a resource sends the same WAIT acquire of it (the same
//!   holder, so every call rejoins one wait) again and again to node 1.
//!
//! Beside each, a new client from an address of its own (not a member's, not the attacker's)
//! makes an authenticated call to node 1 every half second: the figures say how many it got
//! answered, and the slowest.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_client::pb;
use tenure_proto::v1::leases_client::LeasesClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

/// The loopback address of the `n`th attacking host (127.0.0.2 and up: not a member's).
fn attacker(n: usize) -> IpAddr {
    IpAddr::from([127, 0, (2 + n / 250) as u8, (2 + n % 250) as u8])
}

/// The address the probing client calls from: a client of its own, on no member's address.
const PROBE_FROM: [u8; 4] = [127, 0, 9, 9];

/// A TCP connection to `endpoint` from `from`.
async fn connect_from(endpoint: &str, from: IpAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let addr: SocketAddr = endpoint
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    socket.connect(addr).await
}

/// Reads `stream` until the node closes it (or `stop`); whether the node closed it.
async fn until_closed(stream: &mut tokio::net::TcpStream, stop: &AtomicBool) -> bool {
    let mut sink = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut sink)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) | Err(_) => continue,
        }
    }
    false
}

/// Connections the attack keeps open, and those the node closed.
#[derive(Default)]
struct Held {
    opened: AtomicU64,
    closed: AtomicU64,
    failed: AtomicU64,
}

impl Held {
    fn describe(&self, what: &str) -> String {
        format!(
            "{} {what} opened, {} closed by the node, {} connects failed",
            self.opened.load(Ordering::Relaxed),
            self.closed.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed)
        )
    }
}

/// Keeps `count` connections to `endpoint` open from `addresses` attacking hosts, each made
/// by `open` (which may send something first), opening another whenever the node closes one,
/// until `stop`.
async fn hold_open<F, Fut>(
    endpoint: &str,
    (count, addresses): (usize, usize),
    stop: &Arc<AtomicBool>,
    open: F,
) -> Held
where
    F: Fn(tokio::net::TcpStream) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Option<tokio::net::TcpStream>> + Send,
{
    let held = Arc::new(Held::default());
    let mut tasks = JoinSet::new();
    for i in 0..count {
        let (endpoint, stop, held, open) = (
            endpoint.to_string(),
            stop.clone(),
            held.clone(),
            open.clone(),
        );
        let from = attacker(i % addresses.max(1));
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(tcp) = connect_from(&endpoint, from).await else {
                    held.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                held.opened.fetch_add(1, Ordering::Relaxed);
                let Some(mut stream) = open(tcp).await else {
                    held.closed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if until_closed(&mut stream, &stop).await {
                    held.closed.fetch_add(1, Ordering::Relaxed);
                }
                // A refused connection comes back after a moment, not in a tight loop.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Arc::try_unwrap(held).unwrap_or_default()
}

/// What the probing client got: calls answered and failed, and the slowest answered.
#[derive(Default)]
struct Probed {
    answered: u64,
    failed: u64,
    slowest: Duration,
    last_error: Option<String>,
}

impl Probed {
    fn describe(&self) -> String {
        let failed = match &self.last_error {
            Some(e) if self.failed > 0 => format!("{} failed ({e})", self.failed),
            _ => format!("{} failed", self.failed),
        };
        format!(
            "a new client from {}: {} calls answered, {failed}, slowest {} ms",
            IpAddr::from(PROBE_FROM),
            self.answered,
            self.slowest.as_millis()
        )
    }
}

/// Every half second until `stop`, `call` from [`PROBE_FROM`] on a new connection.
async fn probe<F, Fut>(stop: Arc<AtomicBool>, call: F) -> Probed
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut probed = Probed::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        match tokio::time::timeout(Duration::from_secs(15), call()).await {
            Ok(Ok(())) => {
                probed.answered += 1;
                probed.slowest = probed.slowest.max(started.elapsed());
            }
            Ok(Err(e)) => {
                probed.failed += 1;
                probed.last_error = Some(format!("{e:#}"));
            }
            Err(_) => {
                probed.failed += 1;
                probed.last_error = Some("no answer in 15 s".into());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    probed
}

/// A gRPC client of `endpoint` on a new connection from [`PROBE_FROM`].
async fn probe_client(endpoint: &str) -> anyhow::Result<LeasesClient<tonic::transport::Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))?
        .local_address(Some(IpAddr::from(PROBE_FROM)))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(LeasesClient::new(channel))
}

fn bearer<T>(message: T, token: &str) -> anyhow::Result<tonic::Request<T>> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    Ok(request)
}

/// An acquire of `resource` for `holder` with a 30 s ttl.
fn acquire(resource: &str, holder: &str) -> pb::AcquireRequest {
    crate::bench::tenure::acquire_request(resource, holder, Duration::from_secs(30))
}

/// The probe's call on the gRPC port: an acquire of a name of its own, as `token`.
async fn grpc_call(endpoint: &str, token: &str, n: u64) -> anyhow::Result<()> {
    let mut client = probe_client(endpoint).await?;
    let resource = format!("probe/{n}");
    let answer = client
        .acquire(bearer(acquire(&resource, "probe"), token)?)
        .await?
        .into_inner();
    anyhow::ensure!(answer.granted, "not granted: {}", answer.reason);
    Ok(())
}

pub(super) async fn idle_connections(
    endpoints: &[String],
    (count, addresses): (usize, usize),
    token: String,
    stop: Arc<AtomicBool>,
) -> String {
    let target = endpoints[0].clone();
    let probing = {
        let (stop, target) = (stop.clone(), target.clone());
        let n = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            probe(stop, || {
                let (target, token, n) = (target.clone(), token.clone(), n.clone());
                async move { grpc_call(&target, &token, n.fetch_add(1, Ordering::Relaxed)).await }
            })
            .await
        })
    };
    let held = hold_open(&target, (count, addresses), &stop, |tcp| async move {
        Some(tcp)
    })
    .await;
    let probed = probing.await.unwrap_or_default();
    format!(
        "{} from {addresses} addresses, never a byte; {}",
        held.describe("silent connections to node 1"),
        probed.describe()
    )
}

pub(super) async fn idle_gateway(
    gateways: &[String],
    (count, addresses): (usize, usize),
    token: String,
    stop: Arc<AtomicBool>,
) -> String {
    let Some(target) = gateways.first().cloned() else {
        return "no gateway to attack".into();
    };
    let probing = {
        let (stop, target) = (stop.clone(), target.clone());
        tokio::spawn(async move {
            probe(stop, || {
                let (target, token) = (target.clone(), token.clone());
                async move { gateway_call(&target, &token).await }
            })
            .await
        })
    };
    let host = target.clone();
    let held = hold_open(&target, (count, addresses), &stop, move |mut tcp| {
        let host = host.clone();
        async move {
            let request = format!("GET /console/console.css HTTP/1.1\r\nhost: {host}\r\n\r\n");
            tcp.write_all(request.as_bytes()).await.ok()?;
            let mut answer = [0u8; 1024];
            let n = tcp.read(&mut answer).await.ok()?;
            (n > 0).then_some(tcp)
        }
    })
    .await;
    let probed = probing.await.unwrap_or_default();
    format!(
        "{} from {addresses} addresses; {}",
        held.describe("keep-alive connections to node 1's gateway, each after a console file,"),
        probed.describe()
    )
}

/// The probe's call on the gateway: an authenticated listing, on a new connection.
async fn gateway_call(gateway: &str, token: &str) -> anyhow::Result<()> {
    let mut tcp = connect_from(gateway, IpAddr::from(PROBE_FROM)).await?;
    let request = format!(
        "GET /v1/resources?pageSize=1 HTTP/1.1\r\nhost: {gateway}\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    anyhow::ensure!(
        answer.starts_with("HTTP/1.1 200"),
        "{}",
        answer.lines().next().unwrap_or("no answer")
    );
    Ok(())
}

pub(super) async fn health_watch(endpoints: &[String], stop: Arc<AtomicBool>) -> String {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let target = &endpoints[0];
    let channel = |from: IpAddr| {
        tonic::transport::Endpoint::from_shared(format!("http://{target}")).map(|e| {
            e.local_address(Some(from))
                .connect_timeout(Duration::from_secs(5))
                .connect_lazy()
        })
    };
    let Ok(attacker_channel) = channel(attacker(0)) else {
        return "no channel".into();
    };
    let (mut opened, mut refused, mut held) = (0u64, 0u64, Vec::new());
    // The whole node-wide cap, from one address.
    for _ in 0..256 {
        match HealthClient::new(attacker_channel.clone())
            .watch(HealthCheckRequest::default())
            .await
        {
            Ok(stream) => {
                opened += 1;
                held.push(stream);
            }
            Err(_) => refused += 1,
        }
    }
    let other = match channel(IpAddr::from(PROBE_FROM)) {
        Ok(channel) => HealthClient::new(channel)
            .watch(HealthCheckRequest::default())
            .await
            .map(|_| "opened")
            .unwrap_or("refused"),
        Err(_) => "no channel",
    };
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
    format!(
        "256 health Watch streams from one address: {opened} opened, {refused} refused; one from another address: {other}"
    )
}

/// `count` WAIT acquires of one held resource by one holder (each rejoins the one wait), as
/// `token`, to node 1; then whether another principal (`other`) can open a Watch and a WAIT
/// acquire there.
pub(super) async fn rejoin(
    endpoints: &[String],
    count: usize,
    (token, other): (String, String),
    stop: Arc<AtomicBool>,
) -> String {
    let target = &endpoints[0];
    let channels: Vec<_> = (0..count.div_ceil(1000))
        .filter_map(|i| {
            tonic::transport::Endpoint::from_shared(format!("http://{target}"))
                .ok()
                .map(|e| e.local_address(Some(attacker(i))).connect_lazy())
        })
        .collect();
    if channels.is_empty() {
        return "no channel".into();
    }
    let first = LeasesClient::new(channels[0].clone());
    let held = match bearer(acquire("rejoin/held", "m-1"), &token) {
        Ok(request) => first.clone().acquire(request).await,
        Err(e) => return format!("the attack failed: {e}"),
    };
    if !held.is_ok_and(|held| held.get_ref().granted) {
        return "could not hold the resource".into();
    }
    let answers = Arc::new(Mutex::new(std::collections::BTreeMap::<String, u64>::new()));
    let mut calls = JoinSet::new();
    for i in 0..count {
        let mut client = LeasesClient::new(channels[i % channels.len()].clone());
        let mut request = acquire("rejoin/held", "m-2");
        request.on_conflict = pb::OnConflict::Wait as i32;
        request.wait_timeout = Some(tenure_client::prost_duration(Duration::from_secs(600)));
        let (token, stop, answers) = (token.clone(), stop.clone(), answers.clone());
        calls.spawn(async move {
            let Ok(request) = bearer(request, &token) else {
                return;
            };
            let answer = tokio::select! {
                answer = client.acquire(request) => match answer {
                    Ok(_) => "answered".to_string(),
                    Err(status) => format!(
                        "refused {}",
                        status
                            .metadata()
                            .get("tenure-reason")
                            .and_then(|r| r.to_str().ok())
                            .unwrap_or("?")
                    ),
                },
                () = async { while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                } } => "still waiting at the end".to_string(),
            };
            *answers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(answer)
                .or_default() += 1;
        });
    }
    // Once the calls are in, another principal's streams on the same node.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let others = other_streams(target, &other).await;
    while calls.join_next().await.is_some() {}
    let answers = answers.lock().unwrap_or_else(|p| p.into_inner());
    let answers: Vec<String> = answers.iter().map(|(a, n)| format!("{n} {a}")).collect();
    format!(
        "{count} WAIT acquires of one held resource by one holder to node 1: {}; {others}",
        answers.join(", ")
    )
}

/// Whether principal `token` can open a Watch and a WAIT acquire on `target`.
async fn other_streams(target: &str, token: &str) -> String {
    let Ok(mut client) = probe_client(target).await else {
        return "another principal could not connect".into();
    };
    let watch = match bearer(
        pb::WatchRequest {
            resource: "rejoin/held".into(),
            ..Default::default()
        },
        token,
    ) {
        Ok(request) => client.watch(request).await.map(|_| ()),
        Err(_) => return "no request".into(),
    };
    let mut wait = acquire("rejoin/held", "other");
    wait.on_conflict = pb::OnConflict::Wait as i32;
    wait.wait_timeout = Some(tenure_client::prost_duration(Duration::from_millis(300)));
    let waited = match bearer(wait, token) {
        Ok(request) => client.acquire(request).await.map(|_| ()),
        Err(_) => return "no request".into(),
    };
    let shown = |r: Result<(), tonic::Status>| match r {
        Ok(()) => "served".to_string(),
        Err(status) => format!("refused ({})", status.message()),
    };
    format!(
        "another principal's Watch on node 1: {}, its WAIT acquire: {}",
        shown(watch),
        shown(waited)
    )
}
