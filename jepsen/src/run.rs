//! One test run: hosts and nodes up, clients and nemesis for the time limit, every fault
//! healed, final reads through every node and a progress check, then teardown, the checker
//! and the report.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_client::Client;
use tokio::time::Instant;

use tenure_client::{pb, prost_duration};

use crate::checker::{self, CheckParams, CheckReport};
use crate::history::{now_ns, History, Mode, QuotaSettings, ResourcePolicy};
use crate::hosts::{self, Hosts};
use crate::nemesis::{current_leader, Fault, Nemesis, Targets};
use crate::procs::{self, Procs};
use crate::secure::{Connect, Secure};
use crate::workload::{self, Env, FencedStore, Recorder, WorkloadConfig};

/// The resource the run acquires once every fault is healed, to show progress.
const PROGRESS: &str = "progress";

#[derive(Clone, Debug)]
pub struct TestOptions {
    pub nodes: u64,
    pub time_limit: Duration,
    pub faults: Vec<Fault>,
    pub seed: u64,
    pub workload: WorkloadConfig,
    pub out_dir: PathBuf,
    pub min_grants: usize,
    pub min_leader_changes: usize,
    /// Waits admitted from the waiting room (after queueing) the run needs.
    pub min_admissions: usize,
    /// Extra `tenured` flags, e.g. `--fi-stale-reads` for a deliberately broken build.
    pub node_args: Vec<String>,
    /// Auth and TLS on (`crate::secure`).
    pub secure: bool,
    pub bin: Option<PathBuf>,
    pub clock_epsilon: f64,
}

/// What the run found, beyond the checker's anomalies.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunVerdict {
    pub grants: usize,
    pub leader_changes: usize,
    pub progress_after_heal: bool,
    pub problems: Vec<String>,
}

impl RunVerdict {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Runs a test end to end. Hosts and processes are torn down before this returns, also when
/// it fails.
pub fn run_test(options: &TestOptions) -> anyhow::Result<(History, CheckReport, RunVerdict)> {
    std::fs::create_dir_all(&options.out_dir)?;
    let bin = match &options.bin {
        Some(bin) => bin.clone(),
        None => procs::tenured_bin()?,
    };
    let hosts = Arc::new(Hosts::setup(options.nodes)?);
    let data_root = options.out_dir.join("nodes");
    std::fs::create_dir_all(&data_root)?;
    let mut node_args = options.node_args.clone();
    let connect = if options.secure {
        let addrs: Vec<String> = (1..=options.nodes).map(hosts::node_ip).collect();
        let (secure, flags) = Secure::generate(&options.out_dir.join("secrets"), &addrs)?;
        node_args.extend(flags);
        Connect::secure(secure)
    } else {
        Connect::default()
    };
    let procs = Procs::start(&hosts, bin, options.nodes, data_root, node_args)?;
    let procs = Arc::new(Mutex::new(procs));

    // The clients talk to the nodes from the client namespace: every runtime thread is
    // created by this thread after it moved there, and inherits it.
    let root_namespace = std::fs::File::open("/proc/self/ns/net")?;
    hosts::enter_client_namespace()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let driven = runtime.block_on(drive(options, hosts.clone(), procs.clone(), connect));
    drop(runtime);
    nix::sched::setns(&root_namespace, nix::sched::CloneFlags::CLONE_NEWNET)?;
    drop(procs);
    drop(hosts);

    let (history, progress) = driven?;
    history.write_jsonl(&options.out_dir.join("history.jsonl"))?;
    let check = checker::check(
        &history,
        &CheckParams {
            clock_epsilon: options.clock_epsilon,
            max_states_per_resource: 5_000_000,
        },
    );
    let verdict = judge(options, &history, &check, progress);
    Ok((history, check, verdict))
}

/// Too little activity is a failed run, not a pass.
fn judge(
    options: &TestOptions,
    history: &History,
    check: &CheckReport,
    progress: bool,
) -> RunVerdict {
    let leader_changes = {
        let mut seen: Vec<(u64, u64)> = history
            .leaders
            .iter()
            .map(|(_, node, term)| (*node, *term))
            .collect();
        seen.dedup();
        seen.len().saturating_sub(1)
    };
    let mut verdict = RunVerdict {
        grants: check.grants,
        leader_changes,
        progress_after_heal: progress,
        problems: vec![],
    };
    if !progress {
        verdict
            .problems
            .push("no acquire succeeded after every fault was healed".into());
    }
    if check.grants < options.min_grants {
        verdict.problems.push(format!(
            "only {} grants checked (need {})",
            check.grants, options.min_grants
        ));
    }
    if leader_changes < options.min_leader_changes {
        verdict.problems.push(format!(
            "{leader_changes} leader changes (need {})",
            options.min_leader_changes
        ));
    }
    if check.waits.admitted < options.min_admissions {
        verdict.problems.push(format!(
            "only {} waits admitted (need {})",
            check.waits.admitted, options.min_admissions
        ));
    }
    if options.workload.watchers > 0 && check.watch.events_checked == 0 {
        verdict
            .problems
            .push("the watchers checked no event".into());
    }
    if !history.unread.is_empty() {
        let unread: Vec<String> = history
            .unread
            .iter()
            .map(|(resource, error)| format!("{resource} ({error})"))
            .collect();
        verdict.problems.push(format!(
            "the history of {} resource(s) could not be read after the run: {}",
            unread.len(),
            unread.join(", ")
        ));
    }
    verdict
}

async fn wait_for_leader(per_node: &[Client], timeout: Duration) -> Option<u64> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(leader) = current_leader(per_node).await {
            return Some(leader);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Records every change of the leader most nodes name.
async fn observe_leaders(
    per_node: Vec<Client>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<(u64, u64, u64)> {
    let mut seen: Vec<(u64, u64, u64)> = Vec::new();
    while !*stop.borrow() {
        let mut best: Option<(u64, u64)> = None;
        for client in &per_node {
            if let Ok(status) = client
                .with_timeout(Duration::from_millis(200))
                .node_status(0)
                .await
            {
                if status.state == "Leader" && best.is_none_or(|(_, term)| status.term > term) {
                    best = Some((status.id, status.term));
                }
            }
        }
        if let Some((node, term)) = best {
            if seen.last().is_none_or(|(_, n, t)| (*n, *t) != (node, term)) {
                seen.push((now_ns(), node, term));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// Registers `name` with `policy` (an admin's call), retrying until the
/// cluster confirms it or says it exists.
async fn register(client: &Client, name: &str, policy: &ResourcePolicy) -> anyhow::Result<()> {
    let ms = |ms: u64| Some(prost_duration(Duration::from_millis(ms)));
    let mode = |m: &Mode| match m {
        Mode::Exclusive => pb::LeaseMode::Exclusive as i32,
        Mode::Read => pb::LeaseMode::Read as i32,
        Mode::Write => pb::LeaseMode::Write as i32,
    };
    let request = pb::CreateResourceRequest {
        name: name.into(),
        kind: "jepsen".into(),
        policy: Some(pb::Policy {
            default_ttl: ms(policy.default_ttl_ms),
            max_ttl: ms(policy.max_ttl_ms),
            renewal_grace: ms(policy.renewal_grace_ms),
            transferable: policy.transferable,
            shared_modes: policy.shared_modes.iter().map(mode).collect(),
            total_units: policy.total_units,
            ..Default::default()
        }),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.create_resource(request.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.reason() == Some(tenure_client::Reason::AlreadyExists) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%name, %e, "registering again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => anyhow::bail!("could not register {name}: {e}"),
        }
    }
}

/// Sets the workload's quotas for `principal` (admin), retrying with the same request id
/// until the cluster confirms them: every later decision of the cluster holds the clients to
/// them.
async fn set_quotas(
    client: &Client,
    principal: &str,
    config: &WorkloadConfig,
) -> anyhow::Result<QuotaSettings> {
    let limits = config.quota_limits();
    let request = pb::SetQuotaRequest {
        principal: principal.to_owned(),
        changes: limits
            .iter()
            .map(|(quota, limit)| pb::QuotaChange {
                quota: quota.clone(),
                limit: *limit,
                reset: false,
            })
            .collect(),
        request_id: uuid::Uuid::new_v4().to_string(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.set_quota(request.clone()).await {
            Ok(_) => {
                return Ok(QuotaSettings {
                    principal: principal.to_owned(),
                    limits,
                })
            }
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%e, "setting the quotas again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => anyhow::bail!("could not set the quotas of {principal}: {e}"),
        }
    }
}

async fn drive(
    options: &TestOptions,
    hosts: Arc<Hosts>,
    procs: Arc<Mutex<Procs>>,
    connect: Connect,
) -> anyhow::Result<(History, bool)> {
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
        options.seed,
        interrupt_rx,
    );
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
    let nemesis_events = nemesis.await.unwrap_or_default();
    anyhow::ensure!(!interrupted, "interrupted; hosts and nodes are torn down");

    // After healing: every node's linearizable read, then progress.
    let healed = wait_for_leader(&per_node, Duration::from_secs(30))
        .await
        .is_some();
    if healed {
        for (resource, _) in options.workload.all_resources() {
            for node in 1..=options.nodes {
                env.read(0, &resource, node).await;
            }
        }
    }
    let progress_deadline = Instant::now() + Duration::from_secs(15);
    let mut progress = false;
    while healed && !progress && Instant::now() < progress_deadline {
        progress = env
            .acquire(0, PROGRESS, 5_000, (Mode::Exclusive, 0), None)
            .await
            .is_some();
        if !progress {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
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
    let (events, unread) =
        workload::read_events(&client, names, Instant::now() + Duration::from_secs(60)).await;

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
    };
    Ok((history, progress))
}
