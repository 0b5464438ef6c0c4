//! Cutting off connections that abuse the node. Every connection the node accepts is wrapped
//! ([`Guarded`]) so that the auth gate, which sees each call, can close it: a connection whose
//! calls are refused for their credentials, or cancelled as soon as they are sent (the rapid
//! reset attack), spends strikes from a bucket (`--connection-strikes`, refilled by half of it
//! a second); one that runs out is closed, and its address may open no new connection for
//! `--abuse-cooldown` (one it opens is held, unread, until then). Honest clients are refused
//! for their credentials only by mistake, and cancel calls only when a deadline passes, long
//! after sending them.
//!
//! Each port's connections are counted and capped in a [`Table`]: how many, how many from one
//! address, and how long one may stay quiet, above all one that never proved who it is.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

mod table;

pub use table::{Closed, Registration, Settings, Table};

/// Addresses remembered in the cooldown at most (the oldest go first).
const REMEMBERED: usize = 4096;

/// One connection's strikes, what it carries, and the switch that closes it.
pub struct Connection {
    remote: Option<SocketAddr>,
    cut: AtomicBool,
    /// The client closed it, or it broke: the calls still open on it are dropped then, which
    /// is no cancellation of theirs.
    ended: AtomicBool,
    waker: AtomicWaker,
    /// Strikes left, and when the bucket was last refilled.
    strikes: Mutex<(f64, Instant)>,
    /// It carried a call whose caller proved who it is (a token; a peer).
    proven: AtomicBool,
    /// Calls open on it, and since when it has had none (None while one is open).
    calls: Mutex<(usize, Option<Instant>)>,
    /// Its place in its port's table.
    _registration: Option<Registration>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("remote", &self.remote)
            .field("cut", &self.cut)
            .field("ended", &self.ended)
            .field("proven", &self.proven)
            .finish_non_exhaustive()
    }
}

/// A call open on a connection, until dropped (with its response's body).
pub struct CallOpen(Arc<Connection>);

impl Drop for CallOpen {
    fn drop(&mut self) {
        let mut calls = self.0.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.0 = calls.0.saturating_sub(1);
        if calls.0 == 0 {
            calls.1 = Some(Instant::now());
        }
    }
}

impl Connection {
    fn new(remote: Option<SocketAddr>, strikes: u32, registration: Option<Registration>) -> Self {
        Connection {
            remote,
            cut: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            strikes: Mutex::new((f64::from(strikes), Instant::now())),
            proven: AtomicBool::new(false),
            calls: Mutex::new((0, Some(Instant::now()))),
            _registration: registration,
        }
    }

    /// A call begins on it, open until the result is dropped; unless it is over (checked
    /// under the same lock as a quiet connection's close, so a call either begins before the
    /// close, which then does not happen, or not at all).
    pub fn try_call(self: &Arc<Self>) -> Option<CallOpen> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_over() {
            return None;
        }
        calls.0 += 1;
        calls.1 = None;
        Some(CallOpen(self.clone()))
    }

    /// It carried a call whose caller proved who it is.
    pub fn prove(&self) {
        self.proven.store(true, Ordering::Release);
    }

    pub fn is_proven(&self) -> bool {
        self.proven.load(Ordering::Acquire)
    }

    /// Since when no call has been open on it; None while one is.
    pub fn quiet_since(&self) -> Option<Instant> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// Spends one strike of `limit` (refilled by `limit / 2` a second); true when none is left
    /// and the connection is to be cut.
    pub fn strike(&self, limit: u32) -> bool {
        let mut bucket = self.strikes.lock().unwrap_or_else(|p| p.into_inner());
        let (left, refilled) = &mut *bucket;
        let now = Instant::now();
        let limit = f64::from(limit);
        *left = (*left + now.duration_since(*refilled).as_secs_f64() * limit / 2.0).min(limit);
        *refilled = now;
        *left -= 1.0;
        *left < 0.0
    }

    /// Closes the connection: its reads end and its writes fail from now on. True the first
    /// time only.
    pub fn cut(&self) -> bool {
        let first = !self.cut.swap(true, Ordering::AcqRel);
        self.waker.wake();
        first
    }

    /// Closes the connection if no call has been open on it for `at_least` (checked and cut
    /// at once, so that no call begins in between): true if this closed it.
    pub fn cut_if_quiet(&self, at_least: Duration) -> bool {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        match calls.1 {
            Some(since) if since.elapsed() >= at_least => self.cut(),
            _ => false,
        }
    }

    /// Whether it is over, cut or closed: strikes no longer count.
    pub fn is_over(&self) -> bool {
        self.is_cut() || self.ended.load(Ordering::Acquire)
    }

    pub fn remote(&self) -> Option<SocketAddr> {
        self.remote
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

/// A connection's IO, closed when its [`Connection`] is cut.
pub struct Guarded<T> {
    inner: T,
    connection: Arc<Connection>,
}

/// What tonic puts in each request's extensions for a guarded connection: the inner
/// connection's own information (for TLS, the peer's certificates), and its [`Connection`].
#[derive(Clone, Debug)]
pub struct GuardInfo<I> {
    pub inner: I,
    pub connection: Arc<Connection>,
}

impl<T: Connected> Connected for Guarded<T> {
    type ConnectInfo = GuardInfo<T::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        GuardInfo {
            inner: self.inner.connect_info(),
            connection: self.connection.clone(),
        }
    }
}

fn cut_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "cut off for abuse")
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.connection.waker.register(cx.waker());
        if self.connection.is_cut() {
            return Poll::Ready(Err(cut_error()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &read {
            Poll::Ready(Ok(())) => buf.filled().len() == before,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            self.connection.ended.store(true, Ordering::Release);
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.connection.is_cut() {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl crate::tls::PeerAddress for Guarded<tokio::net::TcpStream> {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.connection
            .remote
            .map(|remote| remote.ip().to_canonical())
    }
}

/// Addresses whose connection was cut, until when they may connect again.
#[derive(Debug, Default)]
pub struct Cooldown(Mutex<HashMap<IpAddr, Instant>>);

impl Cooldown {
    /// Keeps `ip` out until `for_how_long` has passed.
    pub fn start(&self, ip: IpAddr, for_how_long: Duration) {
        let mut until = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        until.retain(|_, end| *end > now);
        if until.len() >= REMEMBERED {
            let first = until.iter().min_by_key(|(_, end)| **end).map(|(ip, _)| *ip);
            if let Some(first) = first {
                until.remove(&first);
            }
        }
        until.insert(ip, now + for_how_long);
    }

    /// Whether `ip` is kept out now.
    pub fn holds(&self, ip: IpAddr) -> bool {
        self.until(ip).is_some()
    }

    /// Until when `ip` is kept out, if it is now.
    pub fn until(&self, ip: IpAddr) -> Option<Instant> {
        let until = self.0.lock().unwrap_or_else(|p| p.into_inner());
        until.get(&ip).copied().filter(|end| *end > Instant::now())
    }
}

/// Connections from addresses in the cooldown held open, unread, at most.
const TARPIT: usize = 256;

/// Accepted TCP connections, less those from addresses in the cooldown. Those are held open
/// and never read until the cooldown ends (a tarpit: a client that reconnects at once is kept
/// waiting rather than answered, which would let it try again at once), up to [`TARPIT`] of
/// them; past that they are closed at once.
pub struct Admitted<S> {
    tcp: S,
    cooldown: Arc<Cooldown>,
    tarpit: Arc<tokio::sync::Semaphore>,
}

impl<S> Admitted<S> {
    pub fn new(tcp: S, cooldown: Arc<Cooldown>) -> Self {
        Admitted {
            tcp,
            cooldown,
            tarpit: Arc::new(tokio::sync::Semaphore::new(TARPIT)),
        }
    }

    /// Holds `tcp` unread until its address's cooldown ends, if there is room.
    fn hold(&self, tcp: tokio::net::TcpStream, until: Instant) {
        let Ok(place) = self.tarpit.clone().try_acquire_owned() else {
            return;
        };
        tokio::spawn(async move {
            tokio::time::sleep_until(until.into()).await;
            drop((tcp, place));
        });
    }
}

impl<S> Stream for Admitted<S>
where
    S: Stream<Item = std::io::Result<tokio::net::TcpStream>> + Unpin,
{
    type Item = std::io::Result<tokio::net::TcpStream>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match Pin::new(&mut self.tcp).poll_next(cx) {
                Poll::Ready(Some(Ok(tcp))) => {
                    let kept_out = tcp
                        .peer_addr()
                        .ok()
                        .and_then(|peer| self.cooldown.until(peer.ip().to_canonical()));
                    match kept_out {
                        Some(until) => self.hold(tcp, until),
                        None => return Poll::Ready(Some(Ok(tcp))),
                    }
                }
                other => return other,
            }
        }
    }
}

/// Wraps each accepted connection so that it can be cut, with `strikes` to spend, and gives
/// it a place in `table` (a connection the table refuses is closed at once). A connection is
/// handed on to be served only once it has sent something (the HTTP/2 preface, a TLS hello,
/// a request): until then it costs a descriptor and a place in the table, no server state,
/// and the table closes it at its greeting time or to make room.
pub fn guard<S>(
    incoming: S,
    strikes: u32,
    table: Arc<Table>,
) -> impl Stream<Item = std::io::Result<Guarded<tokio::net::TcpStream>>>
where
    S: Stream<Item = std::io::Result<tokio::net::TcpStream>> + Unpin,
{
    Greeted {
        incoming,
        done: false,
        strikes,
        table,
        waiting: futures::stream::FuturesUnordered::new(),
        budget: (tokio::time::Instant::now(), 0),
        pause: Box::pin(tokio::time::sleep(Duration::ZERO)),
    }
}

/// While a port is full, it accepts at most this many connections per [`FULL_WINDOW`] (each
/// placed by making room, or closed, but a member's): a flood of new connections then costs
/// the node a bounded share of its time, and the rest wait in the kernel's backlog.
const ACCEPTS_WHEN_FULL: u32 = 100;
const FULL_WINDOW: Duration = Duration::from_millis(100);

/// A connection waiting to say something first ([`guard`]).
type Silent =
    Pin<Box<dyn std::future::Future<Output = Option<Guarded<tokio::net::TcpStream>>> + Send>>;

struct Greeted<S> {
    incoming: S,
    done: bool,
    strikes: u32,
    table: Arc<Table>,
    waiting: futures::stream::FuturesUnordered<Silent>,
    /// The window of [`ACCEPTS_WHEN_FULL`] under way: its start, and its accepts so far.
    budget: (tokio::time::Instant, u32),
    /// Accepting again at the next window, when the budget ran out.
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl<S> Greeted<S> {
    /// Admits `tcp` to the table; the connection, once it has sent something.
    fn admit(&self, tcp: tokio::net::TcpStream) -> Option<Silent> {
        let remote = tcp.peer_addr().ok();
        let registration = match self.table.admit(remote) {
            Ok(registration) => registration,
            Err(why) => {
                tracing::debug!(
                    port = self.table.port,
                    ?remote,
                    why = why.as_str(),
                    "refused a connection"
                );
                return None;
            }
        };
        let connection = Arc::new(Connection::new(remote, self.strikes, Some(registration)));
        self.table.watch(&connection);
        Some(Box::pin(async move {
            tokio::select! {
                readable = tcp.readable() => readable.ok()?,
                () = Cut(&connection) => return None,
            }
            Some(Guarded {
                inner: tcp,
                connection,
            })
        }))
    }
}

impl<S> Stream for Greeted<S>
where
    S: Stream<Item = std::io::Result<tokio::net::TcpStream>> + Unpin,
{
    type Item = std::io::Result<Guarded<tokio::net::TcpStream>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        use futures::StreamExt;
        let this = &mut *self;
        while !this.done {
            let full = this.table.is_full();
            if full {
                let now = tokio::time::Instant::now();
                if now.duration_since(this.budget.0) >= FULL_WINDOW {
                    this.budget = (now, 0);
                }
                if this.budget.1 >= ACCEPTS_WHEN_FULL {
                    this.pause.as_mut().reset(this.budget.0 + FULL_WINDOW);
                    if std::future::Future::poll(this.pause.as_mut(), cx).is_pending() {
                        break;
                    }
                    continue;
                }
            }
            match this.incoming.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(tcp))) => {
                    // Counted only while full, and only for a connection accepted.
                    if full {
                        this.budget.1 += 1;
                    }
                    if let Some(silent) = this.admit(tcp) {
                        this.waiting.push(silent);
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.done = true,
                Poll::Pending => break,
            }
        }
        loop {
            match this.waiting.poll_next_unpin(cx) {
                Poll::Ready(Some(Some(greeted))) => return Poll::Ready(Some(Ok(greeted))),
                // Cut, or broken, before it said anything: dropped.
                Poll::Ready(Some(None)) => continue,
                Poll::Ready(None) if this.done => return Poll::Ready(None),
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Resolves once `connection` is cut.
struct Cut<'a>(&'a Connection);

impl std::future::Future for Cut<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.waker.register(cx.waker());
        match self.0.is_cut() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests;
