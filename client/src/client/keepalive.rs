//! One `KeepAlive` stream per client (SPEC §2.3) for every lease handle's and session handle's
//! renewals, instead of one call per lease per tick. Opened at the first renewal on the preferred endpoint (the
//! leader, once a reply named it), and again at the next renewal after it breaks; renewals in
//! flight when it breaks are answered `unavailable` (a renewal is safe to send again). Where
//! no stream can be opened (a node of an older release, or no place among its open streams),
//! a renewal goes as a unary `Renew` (`RenewSession`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tenure_proto::contract::Reason;
use tenure_proto::v1 as pb;
use tenure_proto::v1::leases_client::LeasesClient;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use super::{Client, Inner};
use crate::error::Error;

/// Renewals sent on the stream and not yet taken by the transport.
const OUTGOING: usize = 64;

/// Renewals on the stream waiting for their answers, at most: the node runs 256 of one stream
/// at once and reads no more meanwhile.
const OUTSTANDING: usize = 256;

/// A stream with nothing to renew for this long is closed.
const IDLE_CLOSE: std::time::Duration = std::time::Duration::from_secs(60);

/// After a stream could not be opened, renewals go call by call this long before it is tried
/// again.
const NO_STREAM_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// The sending side of the client's stream task.
pub(super) type KeepAlives = mpsc::UnboundedSender<Renewal>;

pub(super) struct Renewal {
    /// The message to send, its `seq` set when sent: a lease's renewal or a session's.
    message: pb::KeepAliveRequest,
    answer: oneshot::Sender<Answer>,
    /// When the renewal's caller gives up.
    deadline: Instant,
}

/// A renewal sent on the stream: who waits for its answer, and when the stream counts as
/// stuck if none has come.
struct Waiting {
    answer: oneshot::Sender<Answer>,
    stuck_at: Instant,
}

/// How long a renewal waits on a stream before the stream counts as stuck: a third of the
/// time its caller has left, but at least this.
const LEAST_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// `unavailable` answers in a row, with no renewal between them, after which a stream's node
/// counts as gone (removed from the cluster) and the next stream opens at the next endpoint.
const UNAVAILABLE_IN_A_ROW: u32 = 4;

/// A renewal's answer from the stream task: the stream's (renewed or refused), or None when
/// no stream could be opened and it is to go as a unary call.
type Answer = Option<Result<pb::KeepAliveResponse, Error>>;

impl Client {
    /// Renews on the client's one `KeepAlive` stream, shared with every lease and session
    /// handle of the client (a unary `Renew` where no stream opens): the new expiry, or the refusal a
    /// `Renew` would get. The stream opens at the first renewal and again after it breaks.
    pub async fn keep_alive(&self, renew: pb::RenewRequest) -> Result<pb::Lease, Error> {
        self.renew_on_stream(renew, self.deadline()).await
    }

    /// [`Client::keep_alive`] until `deadline`.
    pub(crate) async fn renew_on_stream(
        &self,
        renew: pb::RenewRequest,
        deadline: Instant,
    ) -> Result<pb::Lease, Error> {
        // Renewals are not remembered (SPEC §4.18): on the stream they go without a
        // request_id, a few dozen bytes fewer in every entry.
        let message = pb::KeepAliveRequest {
            renew: Some(pb::RenewRequest {
                request_id: String::new(),
                ..renew.clone()
            }),
            ..Default::default()
        };
        let renewed = match self.send_on_stream(message, deadline).await {
            Some(answered) => answered?.lease,
            None => self.renew_until(renew, deadline).await?.lease,
        };
        renewed.ok_or_else(|| Error::Local("renewed without a lease".into()))
    }

    /// Renews session `session_id` on the client's `KeepAlive` stream (a unary `RenewSession`
    /// where no stream opens), until `deadline`: the session with its new expiry.
    pub(crate) async fn renew_session_on_stream(
        &self,
        session_id: &str,
        deadline: Instant,
    ) -> Result<pb::Session, Error> {
        let message = pb::KeepAliveRequest {
            session_id: session_id.into(),
            ..Default::default()
        };
        let renewed = match self.send_on_stream(message, deadline).await {
            Some(answered) => answered?.session,
            None => {
                self.renew_session_until(session_id, deadline)
                    .await?
                    .session
            }
        };
        renewed.ok_or_else(|| Error::Local("renewed without a session".into()))
    }

    /// Sends `message` on the client's stream (opened at the first renewal and again after it
    /// breaks) and waits for its answer until `deadline`; None when no stream could be opened
    /// and the renewal is to go call by call.
    async fn send_on_stream(
        &self,
        message: pb::KeepAliveRequest,
        deadline: Instant,
    ) -> Option<Result<pb::KeepAliveResponse, Error>> {
        let keep_alives = self.inner.keep_alives.get_or_init(|| {
            let (renewals, taken) = mpsc::unbounded_channel();
            tokio::spawn(run(Arc::downgrade(&self.inner), taken));
            renewals
        });
        let (answer, answered) = oneshot::channel();
        let sent = keep_alives.send(Renewal {
            message,
            answer,
            deadline,
        });
        let answer = match sent {
            Ok(()) => tokio::time::timeout_at(deadline, answered).await,
            Err(_) => Ok(Ok(None)),
        };
        match answer {
            Ok(Ok(answer)) => answer,
            // The task ended (the runtime is shutting down), or no answer in time.
            Ok(Err(_)) | Err(_) => Some(Err(unavailable(
                "no answer on the KeepAlive stream in time",
            ))),
        }
    }

    /// Opens a `KeepAlive` stream on the preferred endpoint, then the others in turn; a reply
    /// naming another endpoint the leader moves it there once.
    async fn open_keep_alive(&self) -> Result<Opened, Error> {
        let count = self.inner.channels.len();
        let first = self.inner.preferred.load(Ordering::Relaxed);
        let mut order: VecDeque<usize> = (0..count).map(|k| (first + k) % count).collect();
        let mut follower = None;
        let mut last = None;
        while let Some(index) = order.pop_front() {
            let (requests, outgoing) = mpsc::channel(OUTGOING);
            let call = self.authorized(ReceiverStream::new(outgoing));
            match LeasesClient::new(self.channel_of(index)?)
                .keep_alive(call)
                .await
            {
                Ok(response) => {
                    self.follow_leader_hint(response.metadata());
                    let opened = (requests, response.into_inner(), index);
                    let leader = self.inner.preferred.load(Ordering::Relaxed);
                    if leader != index && follower.is_none() && order.contains(&leader) {
                        // A follower forwards every renewal: try the leader it names first,
                        // and keep this stream in case the leader does not answer.
                        follower = Some(opened);
                        order.retain(|i| *i != leader);
                        order.push_front(leader);
                        continue;
                    }
                    return Ok(opened);
                }
                Err(status) => {
                    let error = Error::from(status);
                    if !error.is_retryable() {
                        return follower.ok_or(error);
                    }
                    last = Some(error);
                }
            }
        }
        if let Some(opened) = follower {
            return Ok(opened);
        }
        Err(last.unwrap_or_else(|| Error::Local("no endpoints".into())))
    }
}

/// An open stream: where to send renewals, where answers come, and the endpoint's index.
type Opened = (
    mpsc::Sender<pb::KeepAliveRequest>,
    tonic::Streaming<pb::KeepAliveResponse>,
    usize,
);

fn unavailable(message: &str) -> Error {
    Error::Status {
        code: Code::Unavailable,
        reason: Reason::Unavailable.as_str().into(),
        message: message.into(),
    }
}

/// What one answer on the stream means to the renewal that asked: renewed (its lease or
/// session), or the refusal a unary call would have ended with.
fn answer_of(response: pb::KeepAliveResponse) -> Result<pb::KeepAliveResponse, Error> {
    match response.refusal {
        Some(refusal) => Err(Error::Status {
            code: Code::from_i32(refusal.code),
            reason: refusal.reason,
            message: refusal.message,
        }),
        None => Ok(response),
    }
}

/// The client's stream task: opens the stream at the first renewal, sends renewals on it and
/// hands each answer to its renewal; after the stream breaks, or stays idle for
/// [`IDLE_CLOSE`], opens it again at the next one. A stream on which a renewal has waited a
/// third of its caller's time counts as stuck (a node cut off from the leader, a connection
/// to a dead one): it is closed, and the next one starts at the next endpoint. At most
/// [`OUTSTANDING`] renewals wait for their answers; later ones wait their turn here. Sending
/// and reading go on together, so neither side's full buffers can stop the other. Ends when
/// the client is dropped.
async fn run(client: Weak<Inner>, mut renewals: mpsc::UnboundedReceiver<Renewal>) {
    let mut waiting: HashMap<u64, Waiting> = HashMap::new();
    let mut seq = 0u64;
    let mut no_stream_until = None;
    while let Some(first) = renewals.recv().await {
        if no_stream_until.is_some_and(|until| Instant::now() < until) {
            let _ = first.answer.send(None);
            continue;
        }
        let Some(inner) = client.upgrade() else {
            return;
        };
        let opened = Client { inner }.open_keep_alive().await;
        let (requests, mut answers, endpoint) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                tracing::debug!(%error, "no KeepAlive stream; renewing call by call");
                no_stream_until = Some(Instant::now() + NO_STREAM_FOR);
                let _ = first.answer.send(None);
                continue;
            }
        };
        let mut next = Some(first);
        let mut idle_since = Instant::now();
        let mut unavailable_in_a_row = 0;
        let stuck = loop {
            let idle = tokio::time::sleep_until(idle_since + IDLE_CLOSE);
            let first_stuck = waiting.values().map(|w| w.stuck_at).min();
            let stuck = async {
                match first_stuck {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                permit = requests.reserve(), if next.is_some() => {
                    let (Ok(permit), Some(renewal)) = (permit, next.take()) else {
                        break false;
                    };
                    // A renewal whose caller gave up (its handle dropped, or its deadline
                    // passed) is not sent: it would keep alive what nobody holds.
                    if renewal.answer.is_closed() || Instant::now() >= renewal.deadline {
                        continue;
                    }
                    seq += 1;
                    let now = Instant::now();
                    let patience = (renewal.deadline.saturating_duration_since(now) / 3)
                        .max(LEAST_PATIENCE);
                    waiting.insert(seq, Waiting { answer: renewal.answer, stuck_at: now + patience });
                    permit.send(pb::KeepAliveRequest {
                        seq,
                        ..renewal.message
                    });
                }
                renewal = renewals.recv(), if next.is_none() && waiting.len() < OUTSTANDING => {
                    match renewal {
                        Some(renewal) => next = Some(renewal),
                        None => return,
                    }
                }
                answer = answers.message() => match answer {
                    Ok(Some(answer)) => {
                        // A node that only refuses as `unavailable` (one removed from the
                        // cluster) answers fast and never looks stuck: after a few such answers
                        // in a row, and none renewed between them, its stream is given up like
                        // a stuck one. A busy leader refuses some renewals so and renews others.
                        let unavailable = answer
                            .refusal
                            .as_ref()
                            .is_some_and(|r| Code::from_i32(r.code) == Code::Unavailable);
                        unavailable_in_a_row = if unavailable { unavailable_in_a_row + 1 } else { 0 };
                        if let Some(asked) = waiting.remove(&answer.seq) {
                            let _ = asked.answer.send(Some(answer_of(answer)));
                        }
                        if unavailable_in_a_row >= UNAVAILABLE_IN_A_ROW {
                            break true;
                        }
                        idle_since = Instant::now();
                    }
                    Ok(None) | Err(_) => break false,
                },
                () = stuck => break true,
                // Nothing to renew for a while (no lease, or long ttls): give the node its
                // place back; the next renewal opens the stream again.
                () = idle, if waiting.is_empty() && next.is_none() => break false,
            }
        };
        if stuck {
            tracing::debug!(
                endpoint,
                "the KeepAlive stream is stuck or its node unavailable; trying the next endpoint"
            );
            if let Some(inner) = client.upgrade() {
                let count = inner.channels.len();
                let _ = inner.preferred.compare_exchange(
                    endpoint,
                    (endpoint + 1) % count,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
        if let Some(renewal) = next {
            let _ = renewal.answer.send(Some(Err(unavailable(
                "the KeepAlive stream broke before the renewal was sent",
            ))));
        }
        for (_, asked) in waiting.drain() {
            let _ = asked.answer.send(Some(Err(unavailable(
                "the KeepAlive stream broke or stalled before the renewal was answered; its outcome is unknown",
            ))));
        }
    }
}
