//! A `WAIT` acquire's blocked call (SPEC §4.7), of one resource or several (SPEC §4.25). The
//! node the client reached proposes the acquire (through the leader), then waits on its own
//! applied state for the entry that decides the wait: an admission or a removal. The call
//! answers only with an outcome the log decided; if the client goes away first, this node
//! proposes the removal.

use std::sync::Arc;

use tracing::Instrument;

use crate::coord::Node;
use crate::error::ApiError;
use crate::lease::{CancelWaitOp, Op, Proposal, Reply, WaitOutcome};
use crate::store::notify::Decided;

/// Proposes `request` (an acquire with `wait_ms`) and, if it queued, blocks until its wait is
/// decided. `request.request_id` must be set: a retry of it learns the decided outcome.
pub async fn acquire(node: &Arc<Node>, request: Proposal) -> Result<Reply, ApiError> {
    let Some(target) = Target::of(&request.op) else {
        return node.propose(request).await;
    };
    // Listen before proposing: an admission applied right after the queuing entry is heard.
    let mut registration = node.sm.notify.register(&target.resource, &target.holder);
    // From here until the call answers, a client that goes away has its wait removed.
    let mut guard = CancelOnDrop {
        node: node.clone(),
        request: Some(request.clone()),
        wait_id: None,
    };
    let reply = match node.propose(request.clone()).await {
        Ok(reply) => reply,
        Err(error) => {
            // Outcome unknown: a retry with the same request_id rejoins the wait, if any, and
            // its wait_timeout bounds it otherwise.
            guard.disarm();
            return Err(error);
        }
    };
    let Some(wait_id) = waiting_id(&reply) else {
        guard.disarm();
        return Ok(reply);
    };
    guard.wait_id = Some(wait_id);
    let mut check_state = true;
    loop {
        if check_state {
            match decided_before(node, &target, wait_id) {
                Decision::Pending => {}
                Decision::Known(reply) => {
                    guard.disarm();
                    return Ok(*reply);
                }
                Decision::Forgotten => {
                    // Decided, but history no longer says how: the request's remembered reply
                    // may (a retry of the queuing request learns it there).
                    let reply = node.propose(request.clone()).await?;
                    guard.disarm();
                    return Ok(reply);
                }
            }
        }
        check_state = false;
        match registration.next().await {
            Some(Decided::Outcome(decided)) if decided.wait_id == wait_id => {
                guard.disarm();
                return Ok(target.reply(*decided));
            }
            Some(Decided::Outcome(_)) => {}
            Some(Decided::Reset) => check_state = true,
            Some(Decided::ShuttingDown) | None => {
                // The wait stays queued: a retry on another node (same request_id) rejoins it,
                // and its wait_timeout bounds it otherwise.
                guard.disarm();
                return Err(ApiError::Unavailable(
                    "this node is shutting down; retry on another node to rejoin the wait".into(),
                ));
            }
        }
    }
}

/// Whether `op` may wait (an acquire of one resource or several with `WAIT`).
pub fn waits(op: &Op) -> bool {
    match op {
        Op::AcquireMany(op) => op.wait_ms.is_some(),
        op => op.acquire_op().is_some_and(|a| a.wait_ms.is_some()),
    }
}

/// The wait `op` would wait for, if it may wait: its resource (a multi-wait's first) and its
/// holder. A holder waits at most once for a resource: asked again, it rejoins that wait.
pub fn wait_of(op: &Op) -> Option<(String, String)> {
    waits(op)
        .then(|| Target::of(op))
        .flatten()
        .map(|target| (target.resource, target.holder))
}

/// What a waiting call listens on: its resource (a multi-wait's first) and holder, and a
/// multi-wait's resources.
struct Target {
    resource: String,
    holder: String,
    many: Option<Vec<String>>,
}

impl Target {
    /// What the blocked call answers when its wait is decided.
    fn reply(&self, decided: WaitOutcome) -> Reply {
        match (&self.many, decided.many) {
            (Some(_), Some(many)) => Reply::Many(many),
            _ => Reply::Acquire(decided.outcome),
        }
    }

    fn of(op: &Op) -> Option<Target> {
        match op {
            Op::AcquireMany(op) => Some(Target {
                resource: op.claims.first()?.resource.clone(),
                holder: op.holder.clone(),
                many: Some(op.claims.iter().map(|c| c.resource.clone()).collect()),
            }),
            op => op.acquire_op().map(|op| Target {
                resource: op.resource.clone(),
                holder: op.holder.clone(),
                many: None,
            }),
        }
    }
}

/// The wait a reply names, if the call now waits.
fn waiting_id(reply: &Reply) -> Option<u64> {
    match reply {
        Reply::Acquire(outcome) => outcome.wait_id,
        Reply::Many(outcome) => outcome.wait_id,
        _ => None,
    }
}

/// What this node's applied state says of a wait.
enum Decision {
    /// Not applied yet, or still waiting: an entry will decide it.
    Pending,
    /// Decided before this call listened (a retried or re-attached request, or a snapshot
    /// install skipped the decision): the outcome history records.
    Known(Box<Reply>),
    /// Decided, and history no longer holds how.
    Forgotten,
}

fn decided_before(node: &Node, target: &Target, wait_id: u64) -> Decision {
    let applied = node.sm.read();
    let applied_index = applied.last_applied.map_or(0, |id| id.index);
    let state = &applied.state;
    if applied_index < wait_id || state.is_waiting(&target.resource, &target.holder, wait_id) {
        return Decision::Pending;
    }
    let known = match &target.many {
        Some(resources) => state
            .many_outcome(resources, &target.holder, wait_id)
            .map(|outcome| Reply::Many(Box::new(outcome))),
        None => state
            .wait_outcome(&target.resource, &target.holder, wait_id)
            .map(Reply::Acquire),
    };
    known.map_or(Decision::Forgotten, |reply| {
        Decision::Known(Box::new(reply))
    })
}

/// Proposes the removal of a wait whose call went away before the log decided it.
struct CancelOnDrop {
    node: Arc<Node>,
    /// The queuing request; None once the call has its answer.
    request: Option<Proposal>,
    /// The wait, once the queuing entry's reply named it.
    wait_id: Option<u64>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.request = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let (node, known) = (self.node.clone(), self.wait_id);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // In the call's span (a dropped instrumented future drops inside it).
        runtime.spawn(
            async move {
                // The call may have gone away while its acquire was in flight: proposing the same
                // request again (same request_id, so applied at most once) pins down its wait
                // before the removal names it, so the removal cannot overtake the queuing.
                let wait_id = match known {
                    Some(id) => Some(id),
                    None => match node.propose(request.clone()).await {
                        Ok(reply) => waiting_id(&reply),
                        _ => None,
                    },
                };
                let (Some(wait_id), Some(target)) = (wait_id, Target::of(&request.op)) else {
                    return;
                };
                // A multi-wait's removal in one room ends it in every room.
                let removal = Proposal {
                    request_id: Some(uuid::Uuid::new_v4().to_string()),
                    op: Op::CancelWait(CancelWaitOp {
                        resource: target.resource,
                        holder: target.holder,
                        wait_id: Some(wait_id),
                    }),
                    ..request.clone()
                };
                if let Err(error) = node.propose(removal).await {
                    // The wait still ends at its wait_timeout.
                    tracing::debug!(%error, "could not remove the wait of a call that went away");
                }
            }
            .in_current_span(),
        );
    }
}
