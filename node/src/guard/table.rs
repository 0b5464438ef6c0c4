//! The connections one port holds open ([`Table`]), so that nobody can hold all of them, with
//! or without a token:
//!
//! - at most `limit` at once, and `per_address` from one address (a member's address is
//!   exempt: on loopback every member and client shares one);
//! - a connection that has carried no authenticated call ([`Connection::prove`]) is closed
//!   once it has been quiet (no call open) for the `greeting` time: one that never sent the
//!   HTTP/2 preface or a request head, one that finished a TLS handshake and said nothing
//!   more, one that only asks for health or the console's assets;
//! - any connection quiet for the `idle` time is closed too (authenticated gRPC clients
//!   reconnect when they next call; an HTTP keep-alive connection holds no place for ever);
//! - when the port is full, a quiet connection goes first to make room (an unauthenticated
//!   one; with `evict_proven`, the HTTP ports, any quiet keep-alive connection), the one
//!   quiet the longest among those looked at; if none can go, the new connection is closed.
//!
//! Each refusal and each close is counted (`tenure_connections_closed_total`).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::Connection;

/// Quiet connections looked at, at most, to make room for one.
const SCAN: usize = 64;

/// What one port allows.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Connections open at once.
    pub limit: usize,
    /// Connections open at once from one address (members exempt).
    pub per_address: usize,
    /// How long a connection without an authenticated call may stay quiet.
    pub greeting: Duration,
    /// How long any connection may stay quiet.
    pub idle: Duration,
    /// Whether a quiet authenticated connection may go to make room (not on the gRPC port,
    /// where a quiet client is one between its calls).
    pub evict_proven: bool,
}

/// Why a connection was refused or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Its address had `per_address` open.
    PerAddress,
    /// The port was full and no quiet connection could go.
    Full,
    /// Quiet, without an authenticated call, past the greeting time.
    Greeting,
    /// Quiet past the idle time.
    Idle,
    /// Quiet when the port was full and a new connection needed its place.
    Evicted,
}

impl Closed {
    pub const ALL: [Closed; 5] = [
        Closed::PerAddress,
        Closed::Full,
        Closed::Greeting,
        Closed::Idle,
        Closed::Evicted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Closed::PerAddress => "per_address",
            Closed::Full => "full",
            Closed::Greeting => "greeting",
            Closed::Idle => "idle",
            Closed::Evicted => "evicted",
        }
    }
}

/// The connections of one port.
pub struct Table {
    /// The port, for the log and the metrics: `grpc`, `http` or `metrics`.
    pub port: &'static str,
    settings: Settings,
    exempt: Box<dyn Fn(IpAddr) -> bool + Send + Sync>,
    inner: Mutex<Inner>,
    closed: [AtomicU64; 5],
    /// The sweep runs ([`Table::watch`]).
    sweeping: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Inner {
    open: usize,
    by_address: HashMap<IpAddr, usize>,
    /// Connections that may have to go to make room, in the order they came.
    candidates: VecDeque<Weak<Connection>>,
    /// Every connection open, for the sweep.
    watched: Vec<Weak<Connection>>,
}

/// A connection's place in its table, given back when the connection is dropped.
pub struct Registration {
    table: Arc<Table>,
    ip: Option<IpAddr>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut inner = self.table.lock();
        inner.open = inner.open.saturating_sub(1);
        if let Some(ip) = self.ip {
            if let Some(count) = inner.by_address.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    inner.by_address.remove(&ip);
                }
            }
        }
    }
}

impl Table {
    /// A table of `settings`; `exempt` says which addresses (the members') have no share.
    pub fn new(
        port: &'static str,
        settings: Settings,
        exempt: impl Fn(IpAddr) -> bool + Send + Sync + 'static,
    ) -> Arc<Table> {
        Arc::new(Table {
            port,
            settings,
            exempt: Box::new(exempt),
            inner: Mutex::default(),
            closed: Default::default(),
            sweeping: Default::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection from `remote`, making room if the port is full; or why
    /// not.
    pub fn admit(self: &Arc<Self>, remote: Option<SocketAddr>) -> Result<Registration, Closed> {
        let ip = remote.map(|r| r.ip().to_canonical());
        let exempt = ip.is_some_and(|ip| (self.exempt)(ip));
        // Connections looked at to make room, dropped once the lock is given back.
        let mut seen = Vec::new();
        let admitted = self.place(ip, exempt, &mut seen);
        drop(seen);
        admitted.map_err(|why| self.count(why))?;
        Ok(Registration {
            table: self.clone(),
            ip,
        })
    }

    /// Takes a place for a connection from `ip`, under the lock.
    fn place(
        &self,
        ip: Option<IpAddr>,
        exempt: bool,
        seen: &mut Vec<Arc<Connection>>,
    ) -> Result<(), Closed> {
        let mut inner = self.lock();
        if let (Some(ip), false) = (ip, exempt) {
            if inner.by_address.get(&ip).copied().unwrap_or(0) >= self.settings.per_address {
                return Err(Closed::PerAddress);
            }
        }
        if inner.open >= self.settings.limit && !exempt && !self.make_room(&mut inner, seen) {
            return Err(Closed::Full);
        }
        inner.open += 1;
        if let Some(ip) = ip {
            *inner.by_address.entry(ip).or_default() += 1;
        }
        Ok(())
    }

    /// Lists `connection` among those that may go to make room, and closes it when it has
    /// been quiet too long (one sweep of the table's connections every so often: no task or
    /// timer per connection, so that one refused or evicted at once costs nothing after it).
    pub fn watch(self: &Arc<Self>, connection: &Arc<Connection>) {
        {
            let mut inner = self.lock();
            inner.candidates.push_back(Arc::downgrade(connection));
            inner.watched.push(Arc::downgrade(connection));
        }
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            let table = Arc::downgrade(self);
            let every = self.sweep_period();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let Some(table) = table.upgrade() else {
                        return;
                    };
                    table.sweep();
                }
            });
        }
    }

    /// How often the sweep runs: a quarter of the shortest quiet time, within 100 ms – 1 s.
    fn sweep_period(&self) -> Duration {
        let shortest = self.settings.idle.min(self.settings.greeting);
        (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
    }

    /// Closes every connection quiet too long, and forgets those that ended (and, as
    /// candidates to make room, those that may not go).
    fn sweep(&self) {
        let now = Instant::now();
        let mut closed = Vec::new();
        // Connections looked at are dropped only once the lock is given back: the last
        // reference to one may be among them, and its registration takes the lock.
        let mut seen = Vec::new();
        {
            let mut inner = self.lock();
            inner.watched.retain(|watched| {
                let Some(connection) = watched.upgrade() else {
                    return false;
                };
                let keep = !connection.is_over();
                if keep {
                    let (limit, why) = self.quiet_limit(&connection);
                    if connection
                        .quiet_since()
                        .is_some_and(|since| now.saturating_duration_since(since) >= limit)
                    {
                        closed.push((connection.clone(), limit, why));
                    }
                }
                seen.push(connection);
                keep
            });
            inner.candidates.retain(|candidate| {
                let Some(connection) = candidate.upgrade() else {
                    return false;
                };
                let keep = self.may_go(&connection);
                seen.push(connection);
                keep
            });
        }
        drop(seen);
        // Cut outside the lock: a cut connection's owner may drop it (and its registration)
        // at once. One a call began on meanwhile stays, and is looked at again next time.
        for (connection, limit, why) in closed {
            if connection.cut_if_quiet(limit) {
                self.count(why);
                tracing::debug!(port = self.port, remote = ?connection.remote(), why = why.as_str(), "closed a quiet connection");
            }
        }
    }

    /// Whether `connection` may go to make room: open, and unproven unless the port lets
    /// proven ones go.
    fn may_go(&self, connection: &Connection) -> bool {
        !connection.is_over() && (self.settings.evict_proven || !connection.is_proven())
    }

    /// How long `connection` may stay quiet, and why it is closed past that.
    fn quiet_limit(&self, connection: &Connection) -> (Duration, Closed) {
        match connection.is_proven() {
            false if self.settings.greeting <= self.settings.idle => {
                (self.settings.greeting, Closed::Greeting)
            }
            _ => (self.settings.idle, Closed::Idle),
        }
    }

    /// Closes a quiet connection that may go ([`Table::may_go`]): of the oldest [`SCAN`]
    /// candidates, the one quiet the longest (the next if a call began on it meanwhile).
    /// True if one went. Those looked at are put in `seen`, to be dropped once the lock is
    /// given back.
    fn make_room(&self, inner: &mut Inner, seen: &mut Vec<Arc<Connection>>) -> bool {
        let mut looked = Vec::new();
        while looked.len() < SCAN {
            let Some(candidate) = inner.candidates.pop_front() else {
                break;
            };
            let Some(connection) = candidate.upgrade() else {
                continue;
            };
            // One that may never go is no candidate again: it costs no place in the scan.
            if self.may_go(&connection) {
                looked.push((connection.quiet_since(), candidate, connection.clone()));
            }
            seen.push(connection);
        }
        // Quiet ones first, the longest quiet first; busy ones (None) last.
        looked.sort_by_key(|(since, _, _)| (since.is_none(), *since));
        let mut made = false;
        for (since, candidate, connection) in looked {
            if !made && since.is_some() && connection.cut_if_quiet(Duration::ZERO) {
                self.count(Closed::Evicted);
                tracing::debug!(port = self.port, remote = ?connection.remote(), "closed a quiet connection to make room");
                made = true;
                continue;
            }
            // Kept: back to the end, so the next scan looks further.
            inner.candidates.push_back(candidate);
        }
        made
    }

    fn count(&self, why: Closed) -> Closed {
        self.closed[why as usize].fetch_add(1, Ordering::Relaxed);
        why
    }

    /// Whether it holds its limit of connections or more.
    pub fn is_full(&self) -> bool {
        self.lock().open >= self.settings.limit
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().open
    }

    /// Connections refused or closed for `why` since start.
    pub fn closed(&self, why: Closed) -> u64 {
        self.closed[why as usize].load(Ordering::Relaxed)
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(evict_proven: bool) -> Settings {
        Settings {
            limit: 2,
            per_address: 2,
            greeting: Duration::from_secs(60),
            idle: Duration::from_secs(600),
            evict_proven,
        }
    }

    fn from(last: u8) -> Option<SocketAddr> {
        Some(SocketAddr::new(IpAddr::from([127, 0, 0, last]), 1))
    }

    /// A connection from `last` with a place in `table`, watched by it.
    fn open(table: &Arc<Table>, last: u8) -> Result<Arc<Connection>, Closed> {
        let registration = table.admit(from(last))?;
        let connection = Arc::new(Connection::new(from(last), 10, Some(registration)));
        table.watch(&connection);
        Ok(connection)
    }

    #[tokio::test]
    async fn a_full_port_closes_a_quiet_unproven_connection_and_never_a_busy_or_proven_one() {
        let table = Table::new("grpc", settings(false), |_| false);
        let proven = open(&table, 2).expect("first");
        proven.prove();
        let busy = open(&table, 3).expect("second");
        let call = busy.try_call().expect("open");
        assert_eq!(open(&table, 4).err(), Some(Closed::Full), "nothing may go");
        drop(call);
        let third = open(&table, 4).expect("the quiet unproven one makes room");
        assert!(busy.is_cut() && !proven.is_cut() && !third.is_cut());
        assert_eq!(table.closed(Closed::Evicted), 1);
        // Places come back when connections are dropped.
        drop(busy);
        assert_eq!(table.open(), 2);
    }

    #[tokio::test]
    async fn an_address_holds_its_share_and_a_member_has_none() {
        let table = Table::new("http", settings(true), |ip| {
            ip == IpAddr::from([127, 0, 0, 1])
        });
        let first = open(&table, 2).expect("first");
        let _second = open(&table, 2).expect("second");
        assert_eq!(open(&table, 2).err(), Some(Closed::PerAddress));
        let members: Vec<_> = (0..5).map(|_| open(&table, 1).expect("a member")).collect();
        assert_eq!(table.open(), 7, "a member is held to no cap");
        drop(members);
        // On an HTTP port a quiet proven connection may go too.
        first.prove();
        let _third = open(&table, 3).expect("room made");
        assert!(first.is_cut());
    }

    #[tokio::test]
    async fn the_sweep_closes_a_connection_quiet_past_its_time_and_never_a_busy_one() {
        let quick = Settings {
            idle: Duration::ZERO,
            ..settings(false)
        };
        let table = Table::new("grpc", quick, |_| false);
        let proven = open(&table, 2).expect("first");
        proven.prove();
        let busy = open(&table, 3).expect("second");
        let call = busy.try_call().expect("open");
        table.sweep();
        assert!(proven.is_cut(), "quiet past the idle time");
        assert!(!busy.is_cut(), "a call is open on it");
        assert_eq!(table.closed(Closed::Idle), 1);
        drop(call);
        table.sweep();
        assert!(busy.is_cut(), "watched still, and quiet now");
        assert_eq!(table.closed(Closed::Idle), 2);
    }
}
