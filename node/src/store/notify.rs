//! What applying entries tells the node's own callers besides the replies: the events each
//! entry recorded (for `Watch`) and the waits it decided (for blocked `WAIT` acquires).
//!
//! Every node applies every entry, so a call waits or watches on the node it reached, across
//! leader changes, with nothing forwarded but the proposals.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc};

use crate::lease::{Effects, Event, WaitOutcome};

/// Applied batches a slow watcher may fall behind by before it re-reads the state.
const EVENT_BACKLOG: usize = 1024;

/// What one applied batch of entries published.
#[derive(Debug)]
pub enum Published {
    /// The batch's events as (resource, event), in delivery order.
    Events(Vec<(crate::lease::Name, Event)>),
    /// A snapshot replaced the state: events between were never published one by one, so a
    /// watcher re-reads the state from its cursor and a waiting call re-checks its wait.
    Reset,
    /// The node is stopping: streams end so that the server can.
    ShuttingDown,
}

type WaitKey = (String, String);
type Registered = HashMap<WaitKey, Vec<(u64, mpsc::UnboundedSender<Decided>)>>;

pub struct Notifier {
    events: broadcast::Sender<Arc<Published>>,
    waits: Mutex<Registered>,
    next_registration: AtomicU64,
    shut_down: std::sync::atomic::AtomicBool,
}

/// What a registered wait hears.
#[derive(Clone, Debug)]
pub enum Decided {
    Outcome(Box<WaitOutcome>),
    /// The state was replaced by a snapshot: check the state for the wait.
    Reset,
    /// The node is stopping.
    ShuttingDown,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            events: broadcast::channel(EVENT_BACKLOG).0,
            waits: Mutex::new(HashMap::new()),
            next_registration: AtomicU64::new(0),
            shut_down: Default::default(),
        }
    }
}

impl Notifier {
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.events.subscribe()
    }

    /// Listens for the decisions of `holder`'s waits on `resource` from now on.
    pub fn register(self: &Arc<Self>, resource: &str, holder: &str) -> WaitRegistration {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_registration.fetch_add(1, Ordering::Relaxed);
        let key = (resource.to_string(), holder.to_string());
        let mut registered = self.lock();
        // Checked under the lock `shut_down` takes: a registration either sees the flag or
        // is in the map when `shut_down` tells everyone.
        if self.is_shut_down() {
            let _ = tx.send(Decided::ShuttingDown);
        }
        registered.entry(key.clone()).or_default().push((id, tx));
        drop(registered);
        WaitRegistration {
            notifier: self.clone(),
            key,
            id,
            rx,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registered> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes the effects of the entries of one applied batch. Called under the state's
    /// write lock, so a reader that subscribed first sees every event either in the state
    /// it reads or in a later message.
    pub fn publish(&self, batch: Vec<Effects>) {
        let mut events = Vec::new();
        let mut waits = Vec::new();
        for effects in batch {
            events.extend(effects.events);
            waits.extend(effects.waits);
        }
        if !waits.is_empty() {
            let registered = self.lock();
            for outcome in waits {
                let key = (outcome.resource.clone(), outcome.holder.clone());
                for (_, tx) in registered.get(&key).into_iter().flatten() {
                    let _ = tx.send(Decided::Outcome(Box::new(outcome.clone())));
                }
            }
        }
        if !events.is_empty() {
            events.sort_by(|a, b| {
                crate::lease::watch::order_key(&a.0, &a.1)
                    .cmp(&crate::lease::watch::order_key(&b.0, &b.1))
            });
            // No receiver is fine: nobody watches.
            let _ = self.events.send(Arc::new(Published::Events(events)));
        }
    }

    /// Ends every watch and blocked wait on this node: the server waits for open calls to
    /// finish, and these would not by themselves.
    pub fn shut_down(&self) {
        let registered = self.lock();
        self.shut_down.store(true, Ordering::SeqCst);
        for senders in registered.values() {
            for (_, tx) in senders {
                let _ = tx.send(Decided::ShuttingDown);
            }
        }
        let _ = self.events.send(Arc::new(Published::ShuttingDown));
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// The state was replaced wholesale (a snapshot install).
    pub fn reset(&self) {
        for senders in self.lock().values() {
            for (_, tx) in senders {
                let _ = tx.send(Decided::Reset);
            }
        }
        let _ = self.events.send(Arc::new(Published::Reset));
    }
}

/// A blocked call's ear on its waits; unregisters on drop.
pub struct WaitRegistration {
    notifier: Arc<Notifier>,
    key: WaitKey,
    id: u64,
    rx: mpsc::UnboundedReceiver<Decided>,
}

impl WaitRegistration {
    pub async fn next(&mut self) -> Option<Decided> {
        self.rx.recv().await
    }
}

impl Drop for WaitRegistration {
    fn drop(&mut self) {
        let mut registered = self.notifier.lock();
        if let Some(senders) = registered.get_mut(&self.key) {
            senders.retain(|(id, _)| *id != self.id);
            if senders.is_empty() {
                registered.remove(&self.key);
            }
        }
    }
}
