use super::fairness::*;
use super::queue::*;
use super::*;
use crate::lease::{Op, ReleaseOp};
use std::collections::HashMap;
use std::sync::Mutex;

fn release(resource: &str) -> Proposal {
    Proposal {
        stamp: Stamp::default(),
        principal: "p".into(),
        admin: false,
        request_id: None,
        require_registration: false,
        op: Op::Release(ReleaseOp {
            resource: resource.into(),
            lease_id: String::new(),
            holder: "h".into(),
            fencing_token: 1,
        }),
    }
}

/// A reply channel whose caller stays (its receiver is never dropped).
fn kept() -> oneshot::Sender<ProposeResult> {
    let (reply, answer) = oneshot::channel();
    std::mem::forget(answer);
    reply
}

/// A command whose caller went away is never committed; the one behind it on the same
/// resource is, and the batcher's count of waiting commands drops by both.
#[test]
fn a_command_whose_caller_went_away_is_dropped() {
    let mut queue = Queue::default();
    let mut gone = release("a");
    gone.request_id = Some("gone".into());
    queue.push(Pending::new(gone, oneshot::channel().0));
    queue.push(Pending::new(by("q", "a"), kept()));
    let batch = queue.take_batch(false);
    assert_eq!(principals(&batch), ["q"]);
    assert_eq!(queue.take_dropped(), 1);
    assert!(queue.is_empty());
    assert!(queue.take_batch(false).is_empty());
}

fn tick() -> Proposal {
    Proposal {
        op: Op::Tick,
        ..release("unused")
    }
}

fn queued(requests: Vec<Proposal>) -> Queue {
    let mut queue = Queue::default();
    for proposal in requests {
        queue.push(Pending::new(proposal, kept()));
    }
    queue
}

fn keys(batch: &[Pending]) -> Vec<String> {
    batch
        .iter()
        .map(|p| p.proposal.op.resource_key().unwrap_or("-").to_string())
        .collect()
}

#[test]
fn a_resource_named_twice_waits_for_the_next_entry_in_order() {
    let mut queue = queued(vec![release("a"), release("b"), release("a"), release("c")]);
    assert_eq!(keys(&queue.take_batch(false)), ["a", "b", "c"]);
    assert_eq!(keys(&queue.take_batch(false)), ["a"]);
    assert!(queue.is_empty());
}

/// Thousands of commands on one resource leave the queue one per entry, in order, each
/// entry formed without looking through the rest; other resources share those entries.
#[test]
fn many_commands_on_one_resource_leave_one_per_entry_in_order() {
    let mut requests: Vec<Proposal> = Vec::new();
    for i in 0..20_000 {
        let mut hot = release("hot");
        hot.request_id = Some(format!("{i}"));
        requests.push(hot);
    }
    requests.push(release("cold"));
    let mut queue = queued(requests);
    let first = queue.take_batch(false);
    assert_eq!(keys(&first), ["hot", "cold"]);
    for i in 1..20_000 {
        let batch = queue.take_batch(false);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].proposal.request_id, Some(format!("{i}")));
    }
    assert!(queue.is_empty());
}

#[tokio::test]
async fn past_the_bound_a_command_is_refused_at_once_with_a_retry_hint() {
    // A commit that never ends: every command stays queued.
    let batcher = Batcher::start(Stamp::default, |_command: Command| {
        std::future::pending::<ProposeResult>()
    });
    batcher.waiting.store(MAX_QUEUED, Ordering::SeqCst);
    // Refused at once: it never waits for the commit that never ends.
    let refused = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        batcher.propose(release("a")),
    )
    .await;
    match refused {
        Ok(Err(NotServed::Busy(detail))) => assert!(detail.contains("retry"), "{detail}"),
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(batcher.waiting.load(Ordering::SeqCst), MAX_QUEUED);
}

#[test]
fn a_command_without_a_resource_commits_alone_and_keeps_its_place() {
    let mut queue = queued(vec![release("a"), tick(), release("b")]);
    assert_eq!(keys(&queue.take_batch(false)), ["a"]);
    assert_eq!(keys(&queue.take_batch(false)), ["-"]);
    assert_eq!(keys(&queue.take_batch(false)), ["b"]);
    // Also for a resource named on both sides of it.
    let mut queue = queued(vec![release("a"), tick(), release("a")]);
    assert_eq!(keys(&queue.take_batch(false)), ["a"]);
    assert_eq!(keys(&queue.take_batch(false)), ["-"]);
    assert_eq!(keys(&queue.take_batch(false)), ["a"]);
    assert!(queue.is_empty());
}

/// A resource that gets a new command for every entry keeps neither a later command
/// naming no resource nor the resources queued behind that one waiting for ever; and
/// more busy resources than an entry holds take turns.
#[test]
fn a_busy_resource_starves_nobody() {
    let mut queue = queued(vec![
        release("hot"),
        release("hot"),
        tick(),
        release("cold"),
    ]);
    let mut seen = Vec::new();
    for _ in 0..6 {
        queue.push(Pending::new(release("hot"), kept()));
        seen.push(keys(&queue.take_batch(false)));
    }
    assert_eq!(seen[..3], [vec!["hot"], vec!["hot"], vec!["-"]]);
    assert_eq!(seen[3], ["cold", "hot"]);
    let names: Vec<String> = (0..MAX_BATCH + 10).map(|i| format!("r{i}")).collect();
    let mut queue = queued(names.iter().chain(&names).map(|n| release(n)).collect());
    let first = keys(&queue.take_batch(false));
    let second = keys(&queue.take_batch(false));
    assert_eq!(first.len(), MAX_BATCH);
    // The ten that did not fit go first, then the others' second commands.
    assert_eq!(second[..10], names[MAX_BATCH..]);
}

fn by(principal: &str, resource: &str) -> Proposal {
    Proposal {
        principal: principal.into(),
        ..release(resource)
    }
}

fn principals(batch: &[Pending]) -> Vec<String> {
    batch.iter().map(|p| p.proposal.principal.clone()).collect()
}

/// One principal with many commands waiting beside others with one each gets one per
/// entry, as they do; alone, it gets the whole entry; two busy principals share evenly.
#[test]
fn a_flooding_principal_is_paced_to_the_others() {
    let mut requests: Vec<Proposal> = (0..16).map(|i| by("noisy", &format!("n{i}"))).collect();
    requests.extend((0..4).map(|i| by(&format!("honest-{i}"), &format!("h{i}"))));
    let mut queue = queued(requests);
    let first = principals(&queue.take_batch(false));
    assert_eq!(first.iter().filter(|p| *p == "noisy").count(), 1);
    assert_eq!(first.len(), 5, "{first:?}");
    // The honest ones are served: the noisy principal is alone now.
    let second = principals(&queue.take_batch(false));
    assert_eq!(second, vec!["noisy"; 15]);
    assert!(queue.is_empty());

    let mut requests: Vec<Proposal> = Vec::new();
    for i in 0..300 {
        requests.push(by("a", &format!("a{i}")));
        requests.push(by("b", &format!("b{i}")));
    }
    requests.push(by("c", "c0"));
    let mut queue = queued(requests);
    let batch = principals(&queue.take_batch(false));
    assert_eq!(batch.len(), MAX_BATCH);
    let count = |who: &str| batch.iter().filter(|p| *p == who).count();
    assert_eq!(count("c"), 1);
    assert!(
        count("a").abs_diff(count("b")) <= 1,
        "{} {}",
        count("a"),
        count("b")
    );
}

/// Beside principals that each have a command waiting at every fourth entry, one that
/// always has sixteen waiting gets about their rate while entries are being committed,
/// not one command in every entry; alone, or with the log idle, it is not held back.
#[test]
fn a_flooding_principal_gets_about_the_share_of_the_busiest_other() {
    let mut queue = Queue::default();
    let push = |queue: &mut Queue, principal: &str, resource: String| {
        queue.push(Pending::new(by(principal, &resource), kept()))
    };
    let mut got: HashMap<String, usize> = HashMap::new();
    let (mut noisy_waiting, mut fresh) = (0, 0);
    for entry in 0..2000 {
        while noisy_waiting < 16 {
            fresh += 1;
            push(&mut queue, "noisy", format!("n{fresh}"));
            noisy_waiting += 1;
        }
        push(
            &mut queue,
            &format!("honest-{}", entry % 4),
            format!("h{entry}"),
        );
        for principal in principals(&queue.take_batch(true)) {
            noisy_waiting -= usize::from(principal == "noisy");
            *got.entry(principal).or_default() += 1;
        }
    }
    let honest: Vec<usize> = (0..4).map(|h| got[&format!("honest-{h}")]).collect();
    assert!(honest.iter().all(|n| *n == 500), "{honest:?}");
    let noisy = got["noisy"];
    assert!(
        (250..=750).contains(&noisy),
        "noisy got {noisy}, honest {honest:?}"
    );

    // Alone, it fills the entry.
    let mut alone = Queue::default();
    for i in 0..2000 {
        push(&mut alone, "noisy", format!("a{i}"));
        if i % 16 == 15 {
            assert_eq!(alone.take_batch(true).len(), 16);
        }
    }
    // Clients with one call in flight each are never held back, however often they have
    // it waiting and however unevenly they are served.
    let mut steady = Queue::default();
    let mut served: HashMap<String, usize> = HashMap::new();
    for entry in 0..500 {
        for h in 0..8 {
            if entry == 0 || served.get(&format!("one-{h}")).copied().unwrap_or(0) == entry {
                push(&mut steady, &format!("one-{h}"), format!("s{h}-{entry}"));
            }
        }
        for principal in principals(&steady.take_batch(true)) {
            *served.entry(principal).or_default() += 1;
        }
    }
    assert!(served.values().all(|n| *n == 500), "{served:?}");
    // With the log idle (no hold back), the one over its share is served too.
    push(&mut queue, "honest-0", "last".into());
    let batch = principals(&queue.take_batch(false));
    assert!(batch.contains(&"noisy".to_string()), "{batch:?}");
}

/// A principal over its share waits, but no command of it longer than `MAX_HOLD`.
#[test]
fn a_held_principal_takes_its_turn_once_its_oldest_command_has_waited_max_hold() {
    let trained = || {
        let mut queue = Queue::default();
        let shares = &mut queue.fairness.shares;
        let share = |present, depth, taken| Share {
            present,
            depth,
            taken,
        };
        shares.insert("noisy".into(), share(1.0, 16.0, 1.0));
        shares.insert("honest".into(), share(0.5, 1.0, 0.1));
        queue
    };
    let pending = |principal: &str, resource: &str, waited: std::time::Duration| Pending {
        queued_at: Instant::now() - waited,
        ..Pending::new(by(principal, resource), kept())
    };
    let mut fresh = trained();
    fresh.push(pending("noisy", "n1", std::time::Duration::ZERO));
    fresh.push(pending("honest", "h1", std::time::Duration::ZERO));
    assert_eq!(principals(&fresh.take_batch(true)), ["honest"]);
    let mut due = trained();
    due.push(pending("noisy", "n1", MAX_HOLD));
    due.push(pending("honest", "h1", std::time::Duration::ZERO));
    let mut batch = principals(&due.take_batch(true));
    batch.sort();
    assert_eq!(batch, ["honest", "noisy"]);
}

/// Commands of different principals on one resource keep their arrival order, one per
/// entry, whoever sent them.
#[test]
fn one_resource_keeps_arrival_order_across_principals() {
    let mut queue = queued(vec![by("a", "x"), by("b", "x"), by("a", "x"), by("b", "y")]);
    let order: Vec<(String, String)> = std::iter::from_fn(|| {
        let batch = queue.take_batch(false);
        (!batch.is_empty()).then_some(batch)
    })
    .flatten()
    .map(|p| {
        (
            p.proposal.principal.clone(),
            p.proposal.op.resource_key().unwrap_or("-").to_string(),
        )
    })
    .collect();
    let on_x: Vec<&str> = order
        .iter()
        .filter(|(_, r)| r == "x")
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(on_x, ["a", "b", "a"]);
    assert_eq!(order.len(), 4);
}

#[test]
fn an_entry_holds_at_most_max_batch_commands() {
    let names: Vec<String> = (0..MAX_BATCH + 3).map(|i| format!("r{i}")).collect();
    let mut queue = queued(names.iter().map(|n| release(n)).collect());
    assert_eq!(queue.take_batch(false).len(), MAX_BATCH);
    assert_eq!(keys(&queue.take_batch(false)), ["r256", "r257", "r258"]);
}

/// Commands sent while the first entry is being committed share the next entry, and
/// each gets the reply at its own position.
#[tokio::test]
async fn commands_queued_behind_a_commit_share_one_entry_and_get_their_own_replies() {
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
    let recorded = seen.clone();
    let batcher = Batcher::start(Stamp::default, move |command: Command| {
        let recorded = recorded.clone();
        let mut gate = gate_rx.clone();
        async move {
            let replies: Vec<Reply> = match &command {
                Command::V1(_) => vec![Reply::Cancelled {
                    cancelled: true,
                    revision: 0,
                }],
                Command::Batch(all) => (0..all.len())
                    .map(|i| Reply::Cancelled {
                        cancelled: true,
                        revision: i as u64,
                    })
                    .collect(),
            };
            recorded.lock().expect("lock").push(replies.len());
            // Hold every commit until the test opens the gate.
            let _ = gate.wait_for(|open| *open).await;
            Ok(match command {
                Command::V1(_) => replies.into_iter().next().expect("one"),
                Command::Batch(_) => Reply::Batch(replies),
            })
        }
    });
    // Fill both in-flight slots with lone commands, then queue five more.
    let mut calls = tokio::task::JoinSet::new();
    for (k, name) in ["x", "y"].into_iter().enumerate() {
        let b = batcher.clone();
        calls.spawn(async move { b.propose(release(name)).await });
        while seen.lock().expect("lock").len() <= k {
            tokio::task::yield_now().await;
        }
    }
    let mut later = Vec::new();
    for i in 0..5 {
        let b = batcher.clone();
        later.push(tokio::spawn(async move {
            b.propose(release(&format!("r{i}"))).await
        }));
        tokio::task::yield_now().await;
    }
    gate_tx.send_replace(true);
    let mut revisions = Vec::new();
    for call in later {
        match call.await.expect("join") {
            Ok(Reply::Cancelled { revision, .. }) => revisions.push(revision),
            other => panic!("unexpected {other:?}"),
        }
    }
    while calls.join_next().await.is_some() {}
    assert_eq!(*seen.lock().expect("lock"), [1, 1, 5]);
    assert_eq!(revisions, [0, 1, 2, 3, 4]);
}

/// An acquire of `resource` by `principal` with `bytes` of metadata.
fn heavy(principal: &str, resource: &str, bytes: usize) -> Proposal {
    Proposal {
        principal: principal.into(),
        op: Op::Acquire(crate::lease::AcquireOp {
            resource: resource.into(),
            holder: "h".into(),
            ttl_ms: None,
            mode: crate::lease::Mode::Exclusive,
            units: 0,
            metadata: [("blob".to_string(), "x".repeat(bytes))].into(),
            wait_ms: None,
            idempotency_key: None,
        }),
        ..release(resource)
    }
}

/// Shares are of bytes, not commands (SPEC §4.22): a principal flooding 16 KiB commands
/// beside honest ones that send small commands gets about the honest ones' bytes, not their
/// count of commands.
#[test]
fn a_principal_flooding_large_commands_gets_the_bytes_not_the_count_of_the_others() {
    let mut queue = Queue::default();
    let mut bytes: HashMap<String, usize> = HashMap::new();
    let (mut heavy_waiting, mut fresh) = (0, 0);
    for entry in 0..2000 {
        while heavy_waiting < 16 {
            fresh += 1;
            queue.push(Pending::new(
                heavy("heavy", &format!("n{fresh}"), 16 * 1024),
                kept(),
            ));
            heavy_waiting += 1;
        }
        for h in 0..4 {
            let mut small = heavy(&format!("honest-{h}"), &format!("h{h}-{entry}"), 10);
            small.op = match small.op {
                Op::Acquire(op) => Op::Acquire(crate::lease::AcquireOp {
                    metadata: Default::default(),
                    ..op
                }),
                op => op,
            };
            queue.push(Pending::new(small, kept()));
        }
        for pending in queue.take_batch(true) {
            heavy_waiting -= usize::from(pending.proposal.principal == "heavy");
            *bytes.entry(pending.proposal.principal.clone()).or_default() += pending.weight;
        }
    }
    let honest = bytes["honest-0"];
    let heavy = bytes["heavy"];
    assert!(
        heavy <= 4 * honest,
        "the heavy principal got {heavy} weight beside {honest} of each honest one: {bytes:?}"
    );
}
