//! `Watch` (SPEC §4.12): the retained events of a resource or prefix after `start_revision`,
//! then live ones, in one order, without gap or duplicate, from this node's applied state.
//!
//! The stream subscribes to applied events *before* it reads the state, so every event is
//! either in what it read or in a later message; a cursor drops what it has already sent. A
//! watcher that falls behind the live backlog (or sees a snapshot replace the state) goes
//! back to reading the state from its cursor, which answers `compacted` if retention dropped
//! anything it has not seen: never a silent gap.
//!
//! What a watch holds read and not yet written (the page it sends, the message queued for its
//! client) counts against its principal's buffer on this node
//! ([`WATCH_BUFFER_BYTES_PER_PRINCIPAL`]): a principal's watches that nobody reads hold that
//! much between them, and the next waits (and is cut off as a slow watcher if it waits too
//! long), however many of them are open.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tenure_proto::v1 as pb;
use tokio::sync::{broadcast, mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tonic::Status;
use tracing::Instrument;

use super::convert;
use super::validate::WatchSpec;
use crate::auth::Credential;
use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::{Cursor, Event, Name};
use crate::store::notify::Published;

pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

/// Events read from the state per lock hold (and per message at most), and about how many
/// bytes of them: a page of large events is a few messages, never a large hold of the lock.
const PAGE: usize = 1000;
const PAGE_BYTES: usize = 64 * 1024;
/// The most one message carries (a page of large events goes in several): a watcher that
/// does not read makes the node hold, beyond its principal's buffer, the one message being
/// written.
const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// Bytes one principal's watches may hold read and not yet handed to the transport on a
/// node, all together: a page being sent and the messages queued.
pub const WATCH_BUFFER_BYTES_PER_PRINCIPAL: usize = 4 << 20;
/// Messages ready for a watcher beyond the one being written.
const QUEUED_MESSAGES: usize = 1;

/// How often an idle watch reports progress (the applied revision it has covered).
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Runs the watch in a task of its own, which holds `open_stream` until the watch ends; it
/// ends with `unauthenticated` when a reload revokes `credential`, the caller's token.
pub fn start(
    node: Arc<Node>,
    spec: WatchSpec,
    (open_stream, credential, principal): (crate::limits::Permit, Option<Credential>, &str),
) -> WatchStream {
    let (tx, rx) = mpsc::channel(QUEUED_MESSAGES);
    let buffer = node.watch_buffer(principal);
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<Status>();
    // In the call's span: what the stream logs later names its call.
    tokio::spawn(
        async move {
            let _open_stream = open_stream;
            let mut sink = Sink {
                tx,
                queued: spec.after,
                patience: node.config.limits.slow_watcher,
                buffer,
                held: None,
            };
            let ended = tokio::select! {
                ended = run(&node, &spec, &mut sink) => ended,
                () = node.revoked(credential) => Err(ApiError::revoked().into()),
            };
            // The end comes after the messages already queued; the task (and its place)
            // goes now, whether or not the client ever reads them.
            if let Err(status) = ended {
                let _ = ended_tx.send(status);
            }
        }
        .in_current_span(),
    );
    let ended =
        futures::stream::once(ended_rx).filter_map(|ended| async move { ended.ok().map(Err) });
    // A message leaves its principal's buffer when the transport takes it.
    let messages = tokio_stream::wrappers::ReceiverStream::new(rx).map(|(message, _held)| message);
    Box::pin(messages.chain(ended))
}

/// A message for the client, with its share of the principal's buffer.
type Queued = (
    Result<pb::WatchResponse, Status>,
    Option<OwnedSemaphorePermit>,
);

/// Where a watch's messages go, and the revision the last one queued covers.
struct Sink {
    tx: mpsc::Sender<Queued>,
    queued: u64,
    /// A watcher that takes no message for this long is cut off (`--slow-watcher`).
    patience: Duration,
    /// The principal's watch buffer on this node, and the share of it this watch holds for
    /// what it has read and not yet queued.
    buffer: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
}

impl Sink {
    /// Takes `bytes` of the principal's buffer before reading them (waiting for its other
    /// watches' messages to be written, no longer than `--slow-watcher`).
    async fn reserve(&mut self, bytes: usize) -> Result<(), Status> {
        let bytes = bytes.min(WATCH_BUFFER_BYTES_PER_PRINCIPAL) as u32;
        let reserved =
            tokio::time::timeout(self.patience, self.buffer.clone().acquire_many_owned(bytes))
                .await;
        match reserved {
            Ok(Ok(permit)) => {
                match &mut self.held {
                    Some(held) => held.merge(permit),
                    None => self.held = Some(permit),
                }
                Ok(())
            }
            Ok(Err(_)) => Err(ApiError::Unavailable("the node is shutting down".into()).into()),
            // Its principal's other watches hold the whole buffer, unread: this one is told
            // so (and where to resume) rather than left stalled without a word.
            Err(_) => Err(self.cut_off(format!(
                "its principal's watches on this node held too much of their {} KiB buffer unread for {:?} to take this watch's next page",
                WATCH_BUFFER_BYTES_PER_PRINCIPAL / 1024,
                self.patience
            ))),
        }
    }

    /// Gives back what was reserved and not queued.
    fn release(&mut self) {
        self.held = None;
    }

    fn too_slow(&self) -> Status {
        self.cut_off(format!(
            "this watcher took no message for {:?}",
            self.patience
        ))
    }

    fn cut_off(&self, why: String) -> Status {
        ApiError::Limit {
            cap: crate::limits::Cap::SlowWatcher,
            detail: format!(
                "{why}: cut off; watch again from start_revision {}",
                self.queued
            ),
        }
        .into()
    }
}

/// Ends with Ok when the client went away.
async fn run(node: &Node, spec: &WatchSpec, tx: &mut Sink) -> Result<(), Status> {
    let mut live = node.sm.notify.subscribe();
    if node.sm.notify.is_shut_down() {
        return Err(shutting_down(&Cursor::after_revision(spec.after)));
    }
    let mut cursor = {
        let applied = node.sm.read_parked().await;
        if spec.live_only {
            Cursor::after_revision(applied.last_applied.map_or(0, |id| id.index))
        } else if spec.after == 0 {
            applied.state.watch_origin(&spec.scope)
        } else {
            Cursor::after_revision(spec.after)
        }
    };
    loop {
        // Catch up from the state.
        loop {
            tx.reserve(PAGE_BYTES).await?;
            let (events, applied_index) = {
                let applied = node.sm.read_parked().await;
                let page = applied
                    .state
                    .watch_page(&spec.scope, &cursor, &spec.kinds, PAGE, PAGE_BYTES)
                    .map_err(|r| Status::from(ApiError::from(r)))?;
                (page, applied.last_applied.map_or(0, |id| id.index))
            };
            let (mut events, full) = events;
            // A full page's last revision may go on in the next page. A message claims every
            // event of the revisions it holds, so that revision waits for the next page —
            // unless it is the whole page (a revision larger than a page goes in parts, each
            // claiming the revision before it).
            let mut claim = None;
            if full {
                let last = events.last().map(|(_, e)| e.revision);
                let first_of_last = events.iter().position(|(_, e)| Some(e.revision) == last);
                if let Some(at) = first_of_last.filter(|at| *at > 0) {
                    events.truncate(at);
                    claim = events.last().map(|(_, e)| e.revision);
                }
            }
            if let Some((name, last)) = events.last() {
                cursor = Cursor::at(name, last);
            }
            if let Some(revision) = claim {
                cursor = Cursor::after_revision(revision);
                if !send(tx, &events, revision).await? {
                    return Ok(());
                }
                continue;
            }
            if !full {
                // Everything up to the applied index is covered.
                cursor = cursor.max(Cursor::after_revision(applied_index));
                if !send(tx, &events, applied_index).await? {
                    return Ok(());
                }
                break;
            }
            if !send(tx, &events, cursor.revision.saturating_sub(1)).await? {
                return Ok(());
            }
        }
        // Then live.
        let mut last_progress = tokio::time::Instant::now();
        let mut progress = tokio::time::interval(PROGRESS_EVERY);
        loop {
            tokio::select! {
                message = live.recv() => match message {
                    Ok(published) => match published.as_ref() {
                        Published::Events(events) => {
                            let fresh: Vec<(Name, Event)> = events
                                .iter()
                                .filter(|(name, e)| {
                                    spec.scope.covers(name)
                                        && cursor.before(name, e)
                                        && (spec.kinds.is_empty() || spec.kinds.contains(&e.kind))
                                })
                                .cloned()
                                .collect();
                            let Some(newest) = events.last().map(|(_, e)| e.revision) else {
                                continue;
                            };
                            cursor = cursor.max(Cursor::after_revision(newest));
                            if !fresh.is_empty() {
                                let bytes = fresh
                                    .iter()
                                    .map(|(_, e)| crate::lease::history::event_cost(e) as usize)
                                    .sum();
                                tx.reserve(bytes).await?;
                                if !send(tx, &fresh, newest).await? {
                                    return Ok(());
                                }
                                last_progress = tokio::time::Instant::now();
                            }
                        }
                        Published::Reset => break,
                        Published::ShuttingDown => return Err(shutting_down(&cursor)),
                    },
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        return Err(ApiError::Unavailable("the node is shutting down".into()).into())
                    }
                },
                _ = progress.tick() => {
                    if last_progress.elapsed() >= PROGRESS_EVERY {
                        let applied = node.sm.read_parked().await.last_applied;
                        let applied_index = applied.map_or(0, |id| id.index);
                        // Progress only up to what the cursor covers: events of later entries
                        // may still be on their way through the live channel.
                        let covered = cursor.revision.min(applied_index);
                        if !send(tx, &[], covered).await? {
                            return Ok(());
                        }
                        last_progress = tokio::time::Instant::now();
                    }
                }
                _ = tx.tx.closed() => return Ok(()),
            }
        }
        // Fell behind or the state was replaced: re-read from the cursor.
        live = node.sm.notify.subscribe();
    }
}

fn shutting_down(cursor: &Cursor) -> Status {
    ApiError::Unavailable(format!(
        "this node is shutting down; watch another node from start_revision {}",
        cursor
            .revision
            .saturating_sub(u64::from(cursor.within.is_some()))
    ))
    .into()
}

/// Sends `events` (those of every revision up to `revision`, in order) in messages of about
/// [`MAX_MESSAGE_BYTES`] at most, cut only between revisions (one revision's events stay in
/// one message); false when the client is gone. A message before the last claims its last
/// event's revision; the last claims `revision`. A watcher that takes no message for
/// `--slow-watcher` is cut off.
async fn send(tx: &mut Sink, events: &[(Name, Event)], revision: u64) -> Result<bool, Status> {
    let mut message = pb::WatchResponse::default();
    let mut bytes = 0;
    for (name, event) in events {
        let entry = convert::history_entry(name, event);
        let size = prost::Message::encoded_len(&entry);
        // Cut only between revisions: a message claims every event of the revisions it holds,
        // so a resume from its revision neither skips nor repeats one.
        let last = message.events.last().map(|e| e.revision);
        if bytes + size > MAX_MESSAGE_BYTES && last.is_some_and(|r| r != event.revision) {
            message.revision = last.unwrap_or_default();
            if !deliver(tx, std::mem::take(&mut message)).await? {
                return Ok(false);
            }
            bytes = 0;
        }
        bytes += size;
        message.events.push(entry);
    }
    message.revision = revision;
    let sent = deliver(tx, message).await;
    tx.release();
    sent
}

/// Queues one message for the client, with its share of what the watch holds of the
/// principal's buffer; false when it is gone.
async fn deliver(tx: &mut Sink, message: pb::WatchResponse) -> Result<bool, Status> {
    let revision = message.revision;
    let bytes = prost::Message::encoded_len(&message);
    let share = match &mut tx.held {
        Some(held) if held.num_permits() > bytes => held.split(bytes),
        held => held.take(),
    };
    match tokio::time::timeout(tx.patience, tx.tx.send((Ok(message), share))).await {
        Ok(Ok(())) => {
            tx.queued = revision;
            Ok(true)
        }
        Ok(Err(_)) => Ok(false),
        Err(_) => Err(tx.too_slow()),
    }
}
