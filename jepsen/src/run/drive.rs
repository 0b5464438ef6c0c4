//! The run itself, inside the client namespace: the clients, the watchers and the nemesis
//! until the time limit, then, with every fault healed, the final reads, the progress check
//! and what the cluster recorded.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_client::Client;
use tokio::time::Instant;

use super::cluster::{
    converged, observe_leaders, register, set_quotas, wait_for_leader, wait_for_rules,
};
use super::TestOptions;
use crate::history::{now_ns, History, Mode};
use crate::hosts::Hosts;
use crate::nemesis::{Fault, Nemesis, Targets};
use crate::procs::Procs;
use crate::secure::Connect;
use crate::workload::{self, Env, FencedStore, Kind, Recorder, WorkloadConfig};

/// The resource the run acquires once every fault is healed, to show progress.
const PROGRESS: &str = "progress";

pub(super) async fn drive(
    options: &TestOptions,
    hosts: Arc<Hosts>,
    procs: Arc<Mutex<Procs>>,
    connect: Connect,
    postgres: Option<&str>,
) -> anyhow::Result<(History, bool, Vec<String>)> {
    let endpoints = procs.lock().unwrap_or_else(|p| p.into_inner()).endpoints();
    let timeout = options.workload.call_timeout;
    // The harness's own calls are an admin's; the workload's are its principal's.
    let client = connect.client(&endpoints)?.with_timeout(timeout);
    let per_node: Vec<Client> = endpoints
        .iter()
        .map(|e| connect.client([e]).map(|c| c.with_timeout(timeout)))
        .collect::<Result<_, _>>()?;
    let workload_client = connect.workload_client(&endpoints)?.with_timeout(timeout);
    let workload_per_node: Vec<Client> = endpoints
        .iter()
        .map(|e| {
            connect
                .workload_client([e])
                .map(|c| c.with_timeout(timeout))
        })
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(
        wait_for_leader(&per_node, Duration::from_secs(30))
            .await
            .is_some(),
        "the cluster elected no leader"
    );
    if options.faults.contains(&Fault::Clock) {
        // A default build refuses clock control: say so now rather than skip every clock fault.
        for endpoint in &endpoints {
            crate::nemesis::set_clock(&connect, endpoint, 0, 0)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "{endpoint} refused clock control ({e}); build tenured with \
                     `cargo build -p tenure-node --features fault-injection --bin tenured`"
                    )
                })?;
        }
    }

    // A cluster of this build alone raises its rules at once: the clients start after it, and
    // the history says from when (the checkers hold later calls to that version's rules).
    // With the upgrade nemesis the raise is its own event, late in the run.
    let mut rules_events = Vec::new();
    if !options.faults.contains(&Fault::Upgrade) {
        match wait_for_rules(&per_node, Duration::from_secs(30)).await {
            Some(rules) => rules_events.push(crate::history::NemesisEvent {
                kind: "rules".into(),
                detail: format!("{} {rules}", crate::nemesis::RAISED),
                start_ns: now_ns(),
                end_ns: None,
                power: None,
            }),
            None => tracing::warn!("no node showed the rules raised within 30 s"),
        }
    }

    // Registered resources first, with their policies (recorded in the history).
    let mut registered = std::collections::BTreeMap::new();
    for (name, kind) in options.workload.all_resources() {
        if let Some(policy) = options.workload.policy(kind) {
            register(&client, &name, &policy).await?;
            registered.insert(name, policy);
        }
    }
    let quotas = match connect.workload_principal() {
        Some(principal) => {
            let set = set_quotas(&client, principal, &options.workload).await?;
            tracing::info!(principal, quotas = %set.describe(), "quotas set");
            Some(set)
        }
        None => None,
    };

    let register = match postgres {
        Some(conn) => {
            let fenced: Vec<String> = options
                .workload
                .all_resources()
                .into_iter()
                .filter(|(_, kind)| *kind == Kind::Fenced)
                .map(|(name, _)| name)
                .collect();
            let guarded = !options.workload.unguarded_writes;
            let clients = options.workload.clients;
            Some(workload::Register::open(conn, clients, &fenced, guarded).await?)
        }
        None => None,
    };

    let started_ns = now_ns();
    let recorder = Arc::new(Recorder::default());
    let (inboxes, receivers): (Vec<_>, Vec<_>) = (1..=options.workload.clients)
        .map(|_| tokio::sync::mpsc::unbounded_channel())
        .unzip();
    let env = Arc::new(Env {
        client: workload_client,
        per_node: workload_per_node,
        watch_per_node: per_node.clone(),
        recorder: recorder.clone(),
        store: FencedStore::default(),
        register,
        config: options.workload.clone(),
        inboxes,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let observer = tokio::spawn(observe_leaders(per_node.clone(), stop_rx.clone()));
    let watchers: Vec<_> = (1..)
        .zip(options.workload.watch_scopes())
        .map(|(watcher, scope)| {
            tokio::spawn(workload::watch_loop(
                env.clone(),
                watcher,
                scope,
                options.seed,
                stop_rx.clone(),
            ))
        })
        .collect();
    let (interrupt_tx, interrupt_rx) = tokio::sync::watch::channel(false);
    let deadline = Instant::now() + options.time_limit;
    let targets = Targets {
        hosts,
        procs,
        per_node: per_node.clone(),
        connect,
    };
    let nemesis = Nemesis::new(
        targets,
        options.faults.clone(),
        options.clock_epsilon,
        options.power_modes.clone(),
        options.seed,
        interrupt_rx,
    );
    let nemesis = match options.rolling_upgrade {
        true => nemesis.rolling(),
        false => nemesis,
    };
    let nemesis = tokio::spawn(nemesis.run(deadline));
    let mut clients: Vec<_> = (1..=options.workload.clients)
        .map(|p| {
            tokio::spawn(workload::client_loop(
                env.clone(),
                p,
                options.seed,
                deadline,
            ))
        })
        .collect();
    for (p, inbox) in (1..=options.workload.clients).zip(receivers) {
        clients.push(tokio::spawn(workload::receiver_loop(
            env.clone(),
            p,
            options.seed,
            deadline,
            inbox,
        )));
    }
    let interrupted = tokio::select! {
        _ = futures::future::join_all(clients) => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    let _ = interrupt_tx.send(interrupted);
    // The nemesis heals every fault before it returns.
    let mut nemesis_events = rules_events;
    nemesis_events.extend(nemesis.await.unwrap_or_default());
    anyhow::ensure!(!interrupted, "interrupted; hosts and nodes are torn down");

    // After healing: every node's linearizable read, then progress.
    let healed = wait_for_leader(&per_node, Duration::from_secs(30))
        .await
        .is_some();
    let mut problems = Vec::new();
    if healed {
        for (resource, _) in options.workload.all_resources() {
            for node in 1..=options.nodes {
                env.read(0, &resource, node).await;
            }
        }
        problems.extend(converged(&per_node, Duration::from_secs(30)).await);
    }
    let progress_deadline = Instant::now() + Duration::from_secs(15);
    let mut progress = false;
    while healed && !progress && Instant::now() < progress_deadline {
        progress = env
            .acquire(0, PROGRESS, 5_000, (Mode::Exclusive, 0), None, None)
            .await
            .is_some();
        if !progress {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    if healed {
        // Every wait ends by its admission, timeout or cancel, and every session by its close
        // or expiry: the histories are read once the waiting rooms are empty and no session
        // is left (or they have had their time and more), so that each resource's history
        // shows how each ended; what is still queued or live then is the checkers' to judge.
        let longest = Duration::from_millis(
            options
                .workload
                .wait_max_ms
                .max(options.workload.session_ttl_max_ms),
        ) + Duration::from_secs(10);
        drain(&env.client, &options.workload, Instant::now() + longest).await;
    }
    let _ = stop_tx.send(true);
    let leaders = observer.await.unwrap_or_default();
    let watches: Vec<_> = futures::future::join_all(watchers)
        .await
        .into_iter()
        .flat_map(Result::unwrap_or_default)
        .collect();

    // What the cluster recorded, once nothing changes it any more but the progress acquire:
    // every resource the run used, the cluster lists or a watcher was told about.
    let mut names: BTreeSet<String> = options
        .workload
        .all_resources()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.insert(PROGRESS.to_owned());
    names.extend(
        watches
            .iter()
            .flat_map(|s| s.events().map(|e| e.resource.clone())),
    );
    // With no leader 30 s after healing the run has failed already: read what answers at once.
    let patience = Duration::from_secs(if healed { 60 } else { 5 });
    let (events, unread) = workload::read_events(&client, names, Instant::now() + patience).await;

    let register = match &env.register {
        Some(register) => register.log().await?,
        None => Vec::new(),
    };
    let history = History {
        seed: options.seed,
        nodes: options.nodes,
        nemeses: options
            .faults
            .iter()
            .map(|f| f.name().to_string())
            .collect(),
        clock_epsilon: options.clock_epsilon,
        started_ns,
        ops: recorder.take(),
        nemesis: nemesis_events,
        leaders,
        resources: registered,
        quotas,
        events,
        unread,
        watches,
        register,
    };
    Ok((history, progress, problems))
}

/// Waits until no resource of the run has anyone in its waiting room and the clients have no
/// session left, or `deadline`.
async fn drain(client: &Client, workload: &WorkloadConfig, deadline: Instant) {
    let rooms: Vec<String> = workload
        .all_resources()
        .into_iter()
        .filter(|(_, kind)| matches!(kind, Kind::Waiting | Kind::Many | Kind::Sessions))
        .map(|(name, _)| name)
        .collect();
    let sessions = workload.kinds.contains(&Kind::Sessions);
    while Instant::now() < deadline {
        let mut left = 0;
        for name in &rooms {
            let read = client
                .get_resource(tenure_client::pb::GetResourceRequest {
                    name: name.clone(),
                    ..Default::default()
                })
                .await;
            left += read.ok().and_then(|r| r.resource).map_or(1, |r| r.waiting);
        }
        if sessions {
            let live = client
                .list_sessions(tenure_client::pb::ListSessionsRequest::default())
                .await;
            left += live.map_or(1, |r| r.sessions.len() as u32);
        }
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::warn!("waiting rooms or sessions still left when the histories are read");
}
