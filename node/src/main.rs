//! `tenured`: one Tenure node. Parses the configuration, sets up logging, runs until
//! SIGINT/SIGTERM; SIGHUP loads the token file and the TLS files again. `tenured restore …` seeds a data
//! directory from a backup instead.

use tenure_node::config::Config;

/// mimalloc instead of glibc's malloc: ≈ 8 % less CPU per write and ≈ 9 % less memory at a
/// million leases (docs/benchmarks.md), for ≈ 50 MiB more resident at small scale.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What a node logs unless `RUST_LOG` says otherwise. openraft logs every failed Raft call
/// (ten a second for a peer that is down); the node's network layer reports a peer that does
/// not answer once, then every 30 s, naming it, so those per-call lines are off.
const DEFAULT_LOG: &str = "info,openraft=warn,openraft::replication=off,\
     openraft::engine::handler::replication_handler=off,sled=warn";

fn main() -> anyhow::Result<()> {
    // Logs go to stderr, in colour only on a terminal (not in journald or `docker logs`).
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(terminal)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG.into()),
        )
        .init();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == "restore")
    {
        return runtime.build()?.block_on(restore());
    }
    let config = Config::load()?;
    config.validate()?;
    if let Some(threads) = config.worker_threads {
        runtime.worker_threads(threads);
    }
    runtime.build()?.block_on(serve(config))
}

/// Runs the node until SIGINT or SIGTERM.
async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.listen).await?;
    tracing::info!(id = config.id, listen = %config.listen, data_dir = %config.data_dir.display(), "tenured starting");
    // Installed before the node starts, so that an early SIGHUP is not the default (exit).
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let running = tenure_node::app::start(config, listener).await?;

    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            // SIGHUP: load the token file and the TLS files again (revoke and add tokens,
            // rotate certificates, without a restart).
            _ = sighup.recv() => {
                if let Err(e) = running.node.reload() {
                    tracing::error!("SIGHUP: {e:#}; what did not load stays in force as it was");
                }
            }
        }
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// `tenured restore`: its own flags (not the node's), then one line saying what it wrote.
async fn restore() -> anyhow::Result<()> {
    use clap::Parser;
    let args = std::env::args_os().skip(2);
    let restore = tenure_node::store::restore::Restore::parse_from(
        std::iter::once("tenured restore".into()).chain(args),
    );
    let restored = restore.run().await?;
    let peers = restore
        .peers
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "restored {} live leases from index {} at index {}, term {} ({} bytes) into {}\n\
         start it: tenured --id {} --data-dir {} --peers {peers}",
        restored.live_leases,
        restored.from_index,
        restored.index,
        restored.term,
        restored.snapshot_bytes,
        restore.data_dir.display(),
        restore.id,
        restore.data_dir.display(),
    );
    if restore.peers.len() > 1 {
        println!(
            "start the other members with the same --peers on empty data directories: they \
             receive the state from it"
        );
    }
    Ok(())
}
