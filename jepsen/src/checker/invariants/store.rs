//! The simulated fenced store keeps its word.

use super::{describe_op, Anomaly};
use crate::history::{Call, Nanos, Op, Outcome, Value};

fn write_token(op: &Op) -> Option<u64> {
    match op.call {
        Call::Write { token, .. } => Some(token),
        _ => None,
    }
}

/// Does the write raise the store's bar (an exclusive holder's write)?
fn exclusive(op: &Op) -> bool {
    matches!(op.call, Call::Write { shared: false, .. })
}

/// The fenced store keeps the highest token an exclusive writer used and refuses any write,
/// shared or exclusive, with a lower one (SPEC §1, fencing token).
/// * `stale_write_accepted`: accepted with token t although an exclusive write with a higher
///   token had been accepted (and returned) before this one was invoked;
/// * `fresh_write_rejected`: rejected although no exclusive write with a higher token was
///   accepted (or may have been) before this one returned, or the store's own `highest` is not
///   higher.
pub(crate) fn fenced_store(resource: &str, ops: &[&Op], t0: Nanos) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let writes: Vec<(&Op, u64)> = ops
        .iter()
        .filter_map(|op| write_token(op).map(|t| (*op, t)))
        .collect();
    let accepted = |op: &Op| {
        matches!(
            op.outcome,
            Outcome::Ok {
                value: Value::StoreAccepted
            }
        )
    };

    // Accepted writes by completion, with prefix maxima of their tokens.
    let mut done: Vec<(&Op, u64)> = writes
        .iter()
        .copied()
        .filter(|(op, _)| accepted(op) && exclusive(op))
        .collect();
    done.sort_by_key(|(op, _)| (op.complete_ns, op.id));
    let mut best_done: Vec<usize> = Vec::with_capacity(done.len());
    for (i, (_, t)) in done.iter().enumerate() {
        let best = match best_done.last() {
            Some(&j) if done[j].1 >= *t => j,
            _ => i,
        };
        best_done.push(best);
    }
    // Writes that were (or may have been) accepted, by invocation, with prefix maxima.
    let mut maybe: Vec<(&Op, u64)> = writes
        .iter()
        .copied()
        .filter(|(op, _)| {
            exclusive(op) && (accepted(op) || matches!(op.outcome, Outcome::Unknown { .. }))
        })
        .collect();
    maybe.sort_by_key(|(op, _)| (op.invoke_ns, op.id));
    let mut best_maybe: Vec<usize> = Vec::with_capacity(maybe.len());
    for (i, (_, t)) in maybe.iter().enumerate() {
        let best = match best_maybe.last() {
            Some(&j) if maybe[j].1 >= *t => j,
            _ => i,
        };
        best_maybe.push(best);
    }

    for &(op, token) in &writes {
        match &op.outcome {
            Outcome::Ok {
                value: Value::StoreAccepted,
            } => {
                let n = done.partition_point(|(o, _)| o.complete_ns < op.invoke_ns);
                if n > 0 {
                    let (prev, prev_token) = done[best_done[n - 1]];
                    if prev_token > token {
                        out.push(Anomaly {
                            kind: "stale_write_accepted".into(),
                            resource: resource.to_owned(),
                            message: format!(
                                "the store accepted token {token} after it had accepted token {prev_token} from an exclusive holder: {} then {}",
                                describe_op(prev, t0),
                                describe_op(op, t0)
                            ),
                            ops: vec![prev.id, op.id],
                        });
                    }
                }
            }
            Outcome::Ok {
                value: Value::StoreRejected { highest },
            } => {
                let n = maybe.partition_point(|(o, _)| o.invoke_ns < op.complete_ns);
                let higher = (n > 0)
                    .then(|| maybe[best_maybe[n - 1]])
                    .filter(|(o, t)| *t > token && o.id != op.id);
                let message = if *highest <= token {
                    Some(format!(
                        "the store rejected token {token} saying it had seen {highest}, which is not higher: {}",
                        describe_op(op, t0)
                    ))
                } else if higher.is_none() {
                    Some(format!(
                        "the store rejected token {token} (saying it had seen {highest}) though no exclusive write with a higher token was accepted before: {}",
                        describe_op(op, t0)
                    ))
                } else {
                    None
                };
                if let Some(message) = message {
                    out.push(Anomaly {
                        kind: "fresh_write_rejected".into(),
                        resource: resource.to_owned(),
                        message,
                        ops: vec![op.id],
                    });
                }
            }
            _ => {}
        }
    }
    out
}
