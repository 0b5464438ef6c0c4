//! A `WAIT` acquire's blocked call (SPEC §4.7). The node the client reached proposes the
//! acquire (through the leader), then waits on its own applied state for the entry that
//! decides the wait: an admission or a removal. The call answers only with an outcome the
//! log decided; if the client goes away first, this node proposes the removal.

use std::sync::Arc;

use crate::app::Node;
use crate::error::ApiError;
use crate::lease::{AcquireOp, AcquireOutcome, CancelWaitOp, Op, Reply};
use crate::store::notify::Decided;

use super::forward::ProposeRequest;

/// Proposes `request` (an acquire with `wait_ms`) and, if it queued, blocks until its wait is
/// decided. `request.request_id` must be set: a retry of it learns the decided outcome.
pub async fn acquire(node: &Arc<Node>, request: ProposeRequest) -> Result<Reply, ApiError> {
    let Op::Acquire(AcquireOp {
        resource, holder, ..
    }) = &request.op
    else {
        return node.propose(request).await;
    };
    let (resource, holder) = (resource.clone(), holder.clone());
    // Listen before proposing: an admission applied right after the queuing entry is heard.
    let mut registration = node.sm.notify.register(&resource, &holder);
    let reply = node.propose(request.clone()).await?;
    let wait_id = match &reply {
        Reply::Acquire(AcquireOutcome {
            wait_id: Some(id), ..
        }) => *id,
        _ => return Ok(reply),
    };
    let mut cancel = CancelOnDrop {
        node: node.clone(),
        request: Some(ProposeRequest {
            request_id: None,
            op: Op::CancelWait(CancelWaitOp {
                resource: resource.clone(),
                holder: holder.clone(),
                wait_id: Some(wait_id),
            }),
            ..request.clone()
        }),
    };
    let mut check_state = true;
    loop {
        if check_state && decided_before(node, &resource, &holder, wait_id) {
            // Decided before this call listened (a retried request): the request's remembered
            // reply is now the outcome.
            let reply = node.propose(request.clone()).await?;
            if !matches!(&reply, Reply::Acquire(o) if o.wait_id == Some(wait_id)) {
                cancel.request = None;
                return Ok(reply);
            }
        }
        check_state = false;
        match registration.next().await {
            Some(Decided::Outcome(decided)) if decided.wait_id == wait_id => {
                cancel.request = None;
                return Ok(Reply::Acquire(decided.outcome));
            }
            Some(Decided::Outcome(_)) => {}
            Some(Decided::Reset) => check_state = true,
            None => return Err(ApiError::Unavailable("the node is shutting down".into())),
        }
    }
}

/// Whether this node has applied the entry that queued `wait_id` and the wait is gone.
fn decided_before(node: &Node, resource: &str, holder: &str, wait_id: u64) -> bool {
    let applied = node.sm.read();
    let applied_index = applied.last_applied.map_or(0, |id| id.index);
    applied_index >= wait_id && !applied.state.is_waiting(resource, holder, wait_id)
}

/// Proposes the removal of a wait whose call went away before the log decided it.
struct CancelOnDrop {
    node: Arc<Node>,
    request: Option<ProposeRequest>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(mut request) = self.request.take() else {
            return;
        };
        let node = self.node.clone();
        request.request_id = Some(uuid::Uuid::new_v4().to_string());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = node.propose(request).await {
                    // The wait still ends at its wait_timeout.
                    tracing::debug!(%error, "could not remove the wait of a call that went away");
                }
            });
        }
    }
}
